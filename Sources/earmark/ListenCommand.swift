import ArgumentParser
import EarmarkCapture
import EarmarkKit
import Foundation

struct ListenCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "listen",
        abstract: "Identify what is playing, live, from a microphone, a pipe or a file.",
        discussion: """
        Listens to the default microphone (any PulseAudio or PipeWire source), matches the last \
        12 s of sound against the catalog every second and reports each track as it is recognised: \
        the first one, a new one when the music changes, and "no match" when nothing matches \
        for a while (once, not on every attempt). While a track is matched, the status line on a \
        terminal shows its current position, moving with the clock.

        Inputs:
          (default)      the default input device
          --device NAME  another source (`pactl list short sources`;
                         also $EARMARK_DEVICE)
          --input -      WAV on standard input, e.g.
                         ffmpeg -i URL -f wav - | earmark listen --input -
                         (raw PCM: --raw s16le|s24le|s32le|f32le
                         --rate HZ --channels N)
          --input FILE   any audio file at real-time pace (--fast: as fast
                         as it decodes)

        Text output: one line per event on standard output, e.g.
          0:03  match: Title — Artist  at 1:23.45, confidence 0.99
        and a summary when listening ends (end of input, --duration, Ctrl-C).

        --json: one JSON object per line (NDJSON), flushed at once. Every \
        object has "event" and "time" (seconds of input heard so far):
          match          track, matchOffset (seconds into the track at
                         streamTime), streamTime, predictedCurrentMatchOffset
                         (the track position at "time"), confidence, score,
                         significance, frequencySkew, timeScale,
                         alternativeOffsets
          noMatch        previousTrack (the id that stopped matching, or null)
          discontinuity  gap (seconds the input's timestamps jumped)
          dropped        seconds (audio dropped: matching fell behind)
          error          message
          loudness       with --loudness, every second: momentary, shortTerm
                         (LUFS; null in silence)
          sound          with --classify, every classification window (0.96 s,
                         half overlapping): start, duration, labels [{label,
                         identifier, confidence}] (top 3)
          transcript     with --transcribe, what is said: final (false while
                         the text may still change, re-read every 2.5 s of
                         speech; true once a pause settles it, or after 25 s),
                         start, end (seconds of input), text, language, words
                         [{start, end, word}]; a final one replaces the
                         volatile ones before it. "time" is when it was made
          end            last: matches (count), dropped (seconds), reason
                         (input ended, duration, interrupted, matched, error)

        Exit codes:
          0  listening ended normally; with --once: a track was matched
          1  with --once: the input ended (or --duration passed) without a match
          2  an error: no sound server or device, unreadable input, unusable catalog
        """
    )

    @OptionGroup var options: GlobalOptions

    @Option(help: ArgumentHelp("Record from this PulseAudio/PipeWire source instead of the default one.",
                               valueName: "name"))
    var device: String?

    @Option(help: ArgumentHelp("Listen to this instead of a microphone: a file, or - for standard input.",
                               valueName: "file|-"))
    var input: String?

    @Flag(help: "With --input FILE: read as fast as possible instead of at real-time pace.")
    var fast = false

    @Flag(help: "Stop at the first match (exit 0), or exit 1 if the input ends without one.")
    var once = false

    @Option(parsing: .unconditional, help: ArgumentHelp("Stop after this many seconds of audio.", valueName: "seconds"))
    var duration: Double?

    @Option(help: ArgumentHelp("With --input -: the stream is raw PCM in this format (s16le, s24le, s32le, f32le), not WAV.",
                               valueName: "format"))
    var raw: String?

    @Option(parsing: .unconditional, help: ArgumentHelp("Sample rate of raw PCM input.", valueName: "Hz"))
    var rate: Double = 44_100

    @Option(parsing: .unconditional, help: ArgumentHelp("Channels of raw PCM input.", valueName: "n"))
    var channels: Int = 1

    @Flag(help: "Also report the loudness heard (EBU R 128 momentary and short-term, LUFS) every second.")
    var loudness = false

    @Flag(help: "Also classify the sounds heard (speech, music, …) with the model of tools/fetch-model.sh.")
    var classify = false

    @Option(help: ArgumentHelp("Sound model for --classify (default: see `earmark classify --help`).", valueName: "path"))
    var model: String?

    @Flag(help: "Also transcribe what is said (Whisper base of tools/fetch-speech-model.sh, only where there is speech).")
    var transcribe = false

    @Option(help: ArgumentHelp("With --transcribe: language code (en, fr, es, …) or auto to detect it.", valueName: "code"))
    var language: String = "auto"

    @Option(name: .customLong("speech-model"), help: ArgumentHelp(
        "Speech model for --transcribe (default: see `earmark transcribe --help`).", valueName: "path"))
    var speechModelPath: String?

    @Option(help: ArgumentHelp("Also save the audio heard to this WAV file (32-bit float, as captured).",
                               valueName: "file"))
    var record: String?

    @Option(parsing: .unconditional, help: ArgumentHelp("Seconds of recent audio each attempt matches (3–60).", valueName: "seconds"))
    var window: Double = StreamingOptions.default.window

    func validate() throws {
        if let duration { guard duration.isFinite, duration > 0 else { throw ValidationError("--duration must be a number of seconds > 0.") } }
        guard window.isFinite, (3...60).contains(window) else { throw ValidationError("--window must be between 3 and 60 seconds.") }
        if fast && (input == nil || input == "-") { throw ValidationError("--fast needs --input FILE.") }
        if input != nil && device != nil { throw ValidationError("--device and --input exclude each other.") }
        if let raw {
            guard input == "-" else { throw ValidationError("--raw needs --input -.") }
            guard PCMStreamReader.SampleFormat(rawValue: raw) != nil else {
                throw ValidationError("--raw must be one of: \(PCMStreamReader.SampleFormat.allCases.map(\.rawValue).joined(separator: ", ")).")
            }
        }
        guard rate.isFinite, (1000...384_000).contains(rate) else { throw ValidationError("--rate must be between 1000 and 384000 Hz.") }
        guard (1...32).contains(channels) else { throw ValidationError("--channels must be between 1 and 32.") }
        if language.isEmpty { throw ValidationError("--language needs a code such as en, or auto.") }
        if !transcribe && (language != "auto" || speechModelPath != nil) {
            throw ValidationError("--language and --speech-model need --transcribe.")
        }
    }

    mutating func run() async throws {
        let options = options, once = once, duration = duration
        var streaming = StreamingOptions.default
        streaming.window = window
        // Only a microphone or a file at real-time pace must not wait: a file read as fast as it decodes,
        // and a pipe (whose writer simply blocks), wait for the matcher instead of losing audio.
        streaming.dropsWhenBehind = input == nil || (input != "-" && !fast)
        let source: any AudioSource
        let realTime: Bool
        do {
            switch input {
            case "-"?:
                let format = raw.flatMap(PCMStreamReader.SampleFormat.init(rawValue:))
                source = try PCMStreamReader(fileDescriptor: 0, raw: format.map { ($0, rate, channels) })
                realTime = true
            case let path?:
                source = try FileReplay(path: path, realTime: !fast)
                realTime = !fast
            case nil:
                let name = device ?? ProcessInfo.processInfo.environment["EARMARK_DEVICE"].flatMap { $0.isEmpty ? nil : $0 }
                source = try MicrophoneCapture(device: name)
                realTime = true
            }
        } catch {
            writeStderr("earmark: error: \(describe(error, file: input ?? "microphone"))\n")
            throw ExitCode(2)
        }
        let display = ListenDisplay(json: options.json, live: !options.json && stderrIsTerminal)
        var input: any AudioSource = record.map { RecordingSource(source, recordingTo: $0) } ?? source
        if loudness { input = LoudnessTap(input) { display.showLoudness(time: $0, momentary: $1, shortTerm: $2) } }
        if classify { input = try SoundTap(input, model: try loadSoundModel(model)) { display.showSound($0, time: $1) } }
        var speechSession: SpeechAnalysisSession?
        if transcribe {
            let analyzer: SpeechAnalyzer
            do {
                let code = language == "auto" ? nil : language.lowercased()
                analyzer = try SpeechAnalyzer(recognizer: WhisperRecognizer(model: try SpeechModel.load(path: speechModelPath)),
                                              detector: SpeechDetector(soundModel: try SoundModel.load(path: model)),
                                              options: SpeechStreamOptions(transcription: TranscriptionOptions(language: code, wordTimestamps: true, beamSize: 1)))
            } catch {
                writeStderr("earmark: error: \(describe(error))\n")
                throw ExitCode(2)
            }
            let tap = TranscriptTap(input, analyzer: analyzer, live: streaming.dropsWhenBehind)
            speechSession = tap.analysis
            input = tap
        }
        let session = try await reportingErrors {
            StreamingSession(catalog: try options.openReadOnly(), options: streaming, clock: realTime ? MonotonicClock() : nil)
        }

        let stop = LockedFlag()
        let interrupted = LockedFlag()
        let signals = [SIGINT, SIGTERM].map { sig -> any DispatchSourceSignal in
            signal(sig, SIG_IGN)
            let s = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            s.setEventHandler { interrupted.set(); stop.set() }
            s.resume()
            return s
        }
        defer { signals.forEach { $0.cancel() } }
        session.feed(from: input, maximumDuration: duration, shouldStop: { stop.isSet })

        let ticker = Task { while !Task.isCancelled { display.tick(); try? await Task.sleep(for: .milliseconds(250)) } }
        let transcripts = speechSession.map { speech in
            Task {
                do {
                    for try await result in speech.results { display.showTranscript(result) }
                } catch {
                    display.showError("transcription failed: \(error)")
                }
            }
        }
        var failed = false
        var matched = false
        for await event in session.events {
            // After --once has its match, the rest of the queued audio is only drained, not reported.
            if once && matched { continue }
            display.show(event)
            if case .error = event { failed = true }
            if case .match = event {
                matched = true
                // Stop reading; the session then ends after the audio already queued (and a recording is closed).
                if once { stop.set() }
            }
        }
        // Reading has stopped (end of input, --duration, --once, Ctrl-C): the last speech is made final.
        speechSession?.finish()
        await transcripts?.value
        ticker.cancel()
        let reason = matched && once ? "matched" : interrupted.isSet ? "interrupted"
            : failed ? "error" : (duration.map { display.heard >= $0 - 0.05 } ?? false) ? "duration" : "input ended"
        display.end(reason: reason)
        if failed { throw ExitCode(2) }
        if once && !matched { throw ExitCode(1) }
    }
}

/// Passes a source's buffers on while measuring their loudness; reports it every second of audio.
final class LoudnessTap: AudioSource {
    private let source: any AudioSource
    private let report: (Double, Double?, Double?) -> Void
    private var meter: LoudnessMeter?
    private var nextReport = 1.0

    init(_ source: any AudioSource, report: @escaping (Double, Double?, Double?) -> Void) {
        self.source = source
        self.report = report
    }

    func next() throws -> PCMBuffer? {
        guard let buffer = try source.next() else { return nil }
        if meter == nil || meter!.sampleRate != buffer.sampleRate || meter!.channels != buffer.channels {
            meter = try LoudnessMeter(sampleRate: buffer.sampleRate, channels: buffer.channels)
        }
        meter!.append(buffer.samples)
        if meter!.duration >= nextReport {
            nextReport += 1
            report(meter!.duration, meter!.momentary, meter!.shortTerm)
        }
        return buffer
    }
}

/// A flag set from any thread.
final class LockedFlag: @unchecked Sendable {
    // All access goes through the lock.
    private let lock = NSLock()
    private var value = false
    func set() { lock.lock(); value = true; lock.unlock() }
    var isSet: Bool { lock.lock(); defer { lock.unlock() }; return value }
}

/// What `listen` prints: event lines (text or NDJSON) and, on a terminal, a status line kept up to date.
final class ListenDisplay: @unchecked Sendable {
    // All mutable state is guarded by `lock`; the ticker task and the event loop both call in.
    private let lock = NSLock()
    private let json: Bool
    private let live: Bool
    private let clock = MonotonicClock()
    private let started: Double
    private var current: StreamMatch?
    private var statusVisible = false
    /// What the `end` event reports (shared with `earmark serve`'s WebSocket).
    private var summary = ListenSummary()
    var heard: Double { lock.lock(); defer { lock.unlock() }; return summary.heard }
    private var level: Double?
    private var hearing: String?
    /// The latest volatile transcript, for the status line.
    private var saying: String?

    init(json: Bool, live: Bool) {
        self.json = json
        self.live = live
        started = clock.now()
    }

    func show(_ event: SessionEvent) {
        lock.lock()
        defer { lock.unlock() }
        summary.record(event)
        switch event {
        case .match(let m): current = m
        case .noMatch: current = nil
        default: break
        }
        if case .ended = event { return }   // `end(reason:)` reports it, with the reason
        if json {
            emitLine(event)
            return
        }
        let stamp = formatDuration(event.time) + "  "
        let text: String
        switch event {
        case .match(let m):
            text = stamp + (m.relocated ? "moved: " : "match: ") + ListenDisplay.describe(m.match, at: m.predictedCurrentMatchOffset)
        case .noMatch(_, let previous): text = stamp + (previous == nil ? "no match" : "no match (the track stopped matching)")
        case .discontinuity(_, let gap): text = stamp + String(format: "input skipped %.2f s", gap)
        case .dropped(_, let s): text = stamp + String(format: "dropped %.1f s of audio: matching fell behind", s)
        case .error(_, let message):
            clearStatus()
            writeStderr("earmark: error: \(message)\n")
            return
        case .ended: return
        }
        clearStatus()
        print(text)
        fflush(nil)
        drawStatus()
    }

    /// Reports the loudness heard: an NDJSON `loudness` event, or the status line's level.
    func showLoudness(time: Double, momentary: Double?, shortTerm: Double?) {
        lock.lock()
        defer { lock.unlock() }
        level = momentary
        guard json else { return }
        var object: [String: JSONValue] = ["event": .string("loudness"), "time": .number(time)]
        object["momentary"] = momentary.map(JSONValue.number) ?? .null
        object["shortTerm"] = shortTerm.map(JSONValue.number) ?? .null
        emitLine(object)
    }

    /// Reports a classified window: an NDJSON `sound` event, or the status line's leading label.
    func showSound(_ window: SoundWindow, time: Double) {
        lock.lock()
        defer { lock.unlock() }
        hearing = window.labels.first?.label
        guard json else { return }
        emitLine(ListenSoundEvent(window, time: time))
    }

    /// Reports a transcript result: an NDJSON `transcript` event; in text, a line for each final result with text
    /// (volatile text goes to the status line).
    func showTranscript(_ result: SpeechResult) {
        lock.lock()
        defer { lock.unlock() }
        if json {
            emitLine(ListenTranscriptEvent(result))
            return
        }
        guard result.isFinal else {
            saying = result.text.isEmpty ? nil : result.text
            drawStatus()
            return
        }
        saying = nil
        guard !result.text.isEmpty else { return }
        clearStatus()
        print(formatDuration(result.start) + "  says: \u{201C}" + result.text + "\u{201D}")
        fflush(nil)
        drawStatus()
    }

    /// A failure beside the session's own: on standard error.
    func showError(_ message: String) {
        lock.lock()
        defer { lock.unlock() }
        clearStatus()
        writeStderr("earmark: error: \(message)\n")
    }

    /// Redraws the status line (on a terminal), moving the predicted position with the clock.
    func tick() {
        lock.lock()
        defer { lock.unlock() }
        drawStatus()
    }

    func end(reason: String) {
        lock.lock()
        defer { lock.unlock() }
        clearStatus()
        if json {
            emitLine(summary.end(reason: reason))
            return
        }
        let matches = summary.matches, dropped = summary.dropped
        var text = "listened \(formatDuration(summary.heard)) (\(reason)): "
        if matches.isEmpty {
            text += "no match"
        } else {
            text += "\(matches.count) match\(matches.count == 1 ? "" : "es"): "
                + matches.map { "\(trackLabel($0.match.track)) at \(formatDuration($0.detectedAt))" }.joined(separator: "; ")
        }
        if dropped > 0 { text += String(format: "; %.1f s dropped", dropped) }
        writeStderr(text + "\n")
    }

    private func drawStatus() {
        guard live else { return }
        let elapsed = clock.now() - started
        var text: String
        if let m = current {
            text = "♪ " + ListenDisplay.describe(m.match, at: m.predictedCurrentMatchOffset(at: clock.now()))
        } else {
            text = "listening… " + formatDuration(elapsed)
        }
        if let level { text += String(format: "  [%.0f LUFS]", level) }
        if let hearing { text += "  [\(hearing)]" }
        if let saying { text += "  \u{201C}\(saying)\u{201D}" }
        text = truncate(text, max(10, ProgressBar.terminalWidth() - 1))
        writeStderr("\r" + text + "\u{1B}[K")
        statusVisible = true
    }

    private func clearStatus() {
        if statusVisible { writeStderr("\r\u{1B}[K") }
        statusVisible = false
    }

    static func describe(_ m: Match, at position: Double) -> String {
        "\(trackLabel(m.track))  at \(formatOffset(position))" + String(format: ", confidence %.2f", m.confidence) + skewSuffix(m)
    }

    /// One NDJSON line on standard output, written at once.
    private func emitLine<T: Encodable>(_ value: T) {
        guard let data = try? ListenJSON.encode(value) else { return }
        FileHandle.standardOutput.write(data + Data("\n".utf8))
    }
}
