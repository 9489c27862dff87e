import ArgumentParser
import EarmarkKit
import Foundation

struct TranscribeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "transcribe",
        abstract: "Say what is said in a file: text with time ranges (Whisper base, on this machine).",
        discussion: """
        Runs the Whisper base speech recogniser (fetched and converted once by tools/fetch-speech-model.sh) \
        over the audio in 30-s windows and prints the transcript, one segment a line with its time range. \
        Only the speech is read: the sound classifier (YAMNet, the model `earmark classify` uses) finds the \
        speech ranges first, so music and silence give no text (--all-audio reads everything). Decoding is \
        beam search with 5 beams (--beam 1: greedy), with timestamps and Whisper's guards (a window whose text \
        repeats itself or is unlikely is decoded again by sampling at temperatures 0.2 to 1.0, seeded; a window \
        that is likely silence is skipped); the language is detected on the first stretch of speech unless \
        --language names it.

        --format json (or --json): {path, model, language, languageProbability, duration, text, segments: \
        [{start, end, text, words}], speech: [{start, end}] (the ranges read; null with --all-audio), error}; an array \
        for several files. words ([{start, end, word}]) only with --words. --format srt or vtt: one subtitle \
        cue per segment (with --words, VTT cues carry <hh:mm:ss.mmm> timestamps before each word); several \
        files are separated by a line naming each file.

        The model is --model PATH, else $EARMARK_SPEECH_MODEL, else models/whisper-base.emodel beside the \
        executable's source tree or in the working directory, else ~/.local/share/earmark/models/whisper-base.emodel. \
        The sound model that finds the speech is --sound-model PATH, else the one `earmark classify` uses \
        ($EARMARK_MODEL, models/yamnet.emodel, …).

        Exit codes: 0 every file transcribed (music or silence only gives an empty transcript); 2 a file or a \
        model could not be read.
        """
    )

    enum Format: String, ExpressibleByArgument, CaseIterable {
        case text, json, srt, vtt
    }

    @Option(help: ArgumentHelp("Language code (en, fr, es, …) or auto to detect it.", valueName: "code"))
    var language: String = "auto"

    @Option(help: ArgumentHelp("Output format: text, json, srt or vtt.", valueName: "format"))
    var format: Format = .text

    @Flag(help: "Same as --format json.")
    var json = false

    @Option(help: ArgumentHelp("Beams of the beam search (1: greedy decoding).", valueName: "n"))
    var beam = 5

    @Flag(help: "Time every word (cross-attention alignment): words in text and JSON, word timestamps in VTT cues.")
    var words = false

    @Option(help: ArgumentHelp("Speech model file (.emodel).", valueName: "path"))
    var model: String?

    @Option(name: .customLong("decoder-weights"),
            help: ArgumentHelp("How the decoder's per-token weights are held: float16 (the file's values) or int8 (quantised when loading, half the bytes a step reads).",
                               valueName: "float16|int8"))
    var decoderWeights: String = DecoderWeights.standard.rawValue

    @Option(name: .customLong("sound-model"), help: ArgumentHelp("Sound model file (.emodel) that finds the speech.", valueName: "path"))
    var soundModel: String?

    @Flag(help: "Read the whole recording, not only the speech the sound classifier finds.")
    var allAudio = false

    @Flag(help: "Encode every window whole (30 s), as Whisper and CTranslate2 do, instead of a short recording's audio and 8 s of padding (slower on short recordings; the short reading falls back to the whole window when it fails).")
    var wholeWindows = false

    @Argument(help: ArgumentHelp("Audio files to transcribe.", valueName: "file"))
    var files: [String] = []

    func validate() throws {
        if files.isEmpty { throw ValidationError("Give at least one audio file.") }
        if json && format != .text && format != .json { throw ValidationError("--json and --format \(format.rawValue) disagree.") }
        if language.isEmpty { throw ValidationError("--language needs a code such as en, or auto.") }
        if !(1...16).contains(beam) { throw ValidationError("--beam must be 1 to 16.") }
        if DecoderWeights(rawValue: decoderWeights) == nil { throw ValidationError("--decoder-weights must be float16 or int8.") }
    }

    mutating func run() async throws {
        let speechModel: SpeechModel
        do {
            speechModel = try SpeechModel.load(path: model, decoderWeights: DecoderWeights(rawValue: decoderWeights) ?? .standard)
        } catch {
            writeStderr("earmark: error: \(error)\n")
            throw ExitCode(2)
        }
        var detector: SpeechDetector?
        if !allAudio {
            do {
                detector = SpeechDetector(soundModel: try SoundModel.load(path: soundModel))
            } catch {
                writeStderr("earmark: error: \(error) (or pass --all-audio to read every second)\n")
                throw ExitCode(2)
            }
        }
        let code = language == "auto" ? nil : language.lowercased()
        if let code, speechModel.language(code: code) == nil {
            throw ValidationError("--language \(language): the model does not know it (codes such as en, fr, es, de; or auto).")
        }
        let asJSON = json || format == .json
        let recognizer = WhisperRecognizer(model: speechModel)
        var reports: [TranscriptReport] = []
        var failed = 0
        for file in files {
            let bar = stderrIsTerminal ? FractionProgress(label: PathName.last(file)) : nil
            do {
                let samples = try SpeechAudio.load(path: file, sampleRate: recognizer.sampleRate)
                let speech = try detector?.ranges(samples: samples, sampleRate: recognizer.sampleRate)
                var options = TranscriptionOptions(language: code, wordTimestamps: words, beamSize: beam)
                if wholeWindows { options.shortWindowPadding = nil }
                let result = try recognizer.transcribe(samples: samples, options: options, speech: speech) { bar?.update($0) }
                bar?.finish()
                let report = TranscriptReport(path: file, model: speechModel.name, result: result, words: words)
                switch asJSON ? .json : format {
                case .text: print(report.humanText)
                case .json: break
                case .srt, .vtt:
                    if files.count > 1 { print("== \(file)") }
                    print(format == .srt ? report.srt : report.vtt, terminator: "")
                }
                reports.append(report)
            } catch {
                bar?.finish()
                let message = describe(error, file: file)
                writeStderr(message + "\n")
                reports.append(TranscriptReport(path: file, model: speechModel.name, error: message))
                failed += 1
            }
        }
        if asJSON { if files.count == 1 { try printJSON(reports[0]) } else { try printJSON(reports) } }
        if failed > 0 { throw ExitCode(2) }
    }
}

/// A live "name: 42 %" line on standard error.
final class FractionProgress {
    let label: String
    init(label: String) { self.label = label }
    func update(_ fraction: Double) {
        writeStderr("\r\(label): \(Int((fraction * 100).rounded())) % transcribed\u{1B}[K")
    }
    func finish() { writeStderr("\r\u{1B}[K") }
}

/// What `transcribe` prints for people and as subtitles (the JSON object is EarmarkKit's ``TranscriptReport``).
extension TranscriptReport {
    var humanText: String {
        guard error == nil else { return "\(path): \(error!)" }
        var head = "\(path): \(formatDuration(duration ?? 0))"
        if let speech {
            let seconds = speech.reduce(0) { $0 + $1.duration }
            head += speech.isEmpty ? ", no speech" : String(format: ", speech %.1f s", seconds)
        }
        if !segments.isEmpty {
            head += ", language \(language ?? "?")" + String(format: " (%.0f %%)", 100 * (languageProbability ?? 0))
        }
        var lines = [head]
        for s in segments {
            lines.append(String(format: "  [%@ → %@] ", Self.clock(s.start), Self.clock(s.end)) + s.text)
            if let words = s.words, !words.isEmpty {
                lines.append("      " + words.map { "\($0.word)@\(Self.clock($0.start))" }.joined(separator: " "))
            }
        }
        return lines.joined(separator: "\n")
    }

    /// SubRip: numbered cues `hh:mm:ss,mmm --> hh:mm:ss,mmm`, one per segment.
    var srt: String {
        var out = ""
        for (i, s) in segments.enumerated() {
            out += "\(i + 1)\n\(Self.subtitleTime(s.start, ",")) --> \(Self.subtitleTime(s.end, ","))\n\(s.text)\n\n"
        }
        return out
    }

    /// WebVTT: one cue per segment; with words, each word after its `<hh:mm:ss.mmm>` timestamp.
    var vtt: String {
        var out = "WEBVTT\n\n"
        for s in segments {
            out += "\(Self.subtitleTime(s.start, ".")) --> \(Self.subtitleTime(s.end, "."))\n"
            if let words = s.words, !words.isEmpty {
                out += words.enumerated().map { i, w in
                    i == 0 ? w.word : "<\(Self.subtitleTime(w.start, "."))>\(w.word)"
                }.joined(separator: " ")
            } else {
                out += s.text
            }
            out += "\n\n"
        }
        return out
    }

    /// `hh:mm:ss` then `separator` and milliseconds.
    static func subtitleTime(_ seconds: Double, _ separator: String) -> String {
        let ms = max(0, Int((seconds * 1000).rounded()))
        return String(format: "%02d:%02d:%02d%@%03d", ms / 3_600_000, (ms / 60_000) % 60, (ms / 1000) % 60, separator, ms % 1000)
    }

    static func clock(_ seconds: Double) -> String {
        let centis = Int((seconds * 100).rounded())
        return String(format: "%d:%02d.%02d", centis / 6000, (centis / 100) % 60, centis % 100)
    }
}
