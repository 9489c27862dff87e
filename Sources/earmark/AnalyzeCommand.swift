import ArgumentParser
import EarmarkKit
import Foundation

struct AnalyzeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "analyze",
        abstract: "Measure music metadata of audio files (so far: loudness and instrument activity).",
        discussion: """
        Loudness follows EBU R 128 / ITU-R BS.1770-4 (libebur128), measured on the file's own channels \
        and sample rate: integrated loudness (LUFS), loudness range (LU), true peak (dBTP), sample \
        peak (dBFS), and momentary (400 ms) and short-term (3 s) loudness every 100 ms. Silence has no \
        loudness: those values are null.

        Instrument activity comes from the sound classifier (YAMNet, see `earmark classify --help`): \
        for each family (drums, bass, guitar, keys, strings, brass, woodwinds, voice, synth) a 0…1 \
        activity curve, one value per 0.96-s window every 0.48 s (the best score among the family's \
        labels), and the time ranges where it plays (the curve reaches 0.1 and stays at 0.05 or more; gaps \
        up to 1 s joined, ranges under 1 s dropped). It is left out, with a warning, when no model is \
        installed, unless --only asks for it.

        --json: one object {path, loudness: {integrated, range, truePeak, samplePeak, maximumMomentary, \
        maximumShortTerm, momentary: [{start, end, value}], shortTerm: [{start, end, value}], duration, \
        sampleRate, channels}, instruments: {model, duration, families: [{family, activeRanges: [{start, \
        end}], activity: [{start, end, value}]}]}, error} per file; an array for several files.

        Key, rhythm, structure and pace are planned; --only accepts loudness and instruments.

        Exit codes: 0 every file analysed; 2 some file could not be read.
        """
    )

    @Flag(help: "Print JSON on standard output instead of text.")
    var json = false

    @Option(help: ArgumentHelp("Dimensions to compute, comma-separated (loudness, instruments). Default: all available.", valueName: "list"))
    var only: String?

    @Option(help: ArgumentHelp("Sound model for instrument activity (default: see `earmark classify --help`).", valueName: "path"))
    var model: String?

    @Argument(help: ArgumentHelp("Audio files to analyse.", valueName: "file"))
    var files: [String]

    private var asked: [String]? {
        only.map { $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) } }
    }

    func validate() throws {
        let planned = ["key", "rhythm", "structure", "pace"]
        for a in asked ?? [] where a != "loudness" && a != "instruments" {
            throw ValidationError(planned.contains(a) ? "--only \(a): not available yet (loudness and instruments are)." : "--only: unknown dimension '\(a)'.")
        }
    }

    mutating func run() async throws {
        let wantLoudness = asked?.contains("loudness") ?? true
        var soundModel: SoundModel?
        if asked?.contains("instruments") ?? true {
            do {
                soundModel = try SoundModel.load(path: model)
                guard InstrumentActivity.supports(soundModel!) else {
                    throw SoundModelError(.inconsistent, "\(soundModel!.name) does not have YAMNet's AudioSet labels that instrument activity needs")
                }
            } catch let e as SoundModelError where e.code == .notFound && asked == nil && model == nil {
                warn("instrument activity skipped: \(e.message)")
                soundModel = nil
            } catch {
                writeStderr("earmark: \(error)\n")
                throw ExitCode(2)
            }
        }
        var reports: [AnalysisReport] = []
        var failed = 0
        for file in files {
            do {
                let f = try Fingerprinter.fingerprint(path: file, digest: false, loudness: wantLoudness, sound: soundModel)
                let report = AnalysisReport(path: file, loudness: f.loudness, instruments: f.instruments, error: nil)
                if !json { print(report.humanText) }
                reports.append(report)
            } catch {
                let message = describe(error, file: file)
                writeStderr(message + "\n")
                reports.append(AnalysisReport(path: file, loudness: nil, instruments: nil, error: message))
                failed += 1
            }
        }
        if json { if files.count == 1 { try printJSON(reports[0]) } else { try printJSON(reports) } }
        if failed > 0 { throw ExitCode(2) }
    }
}

struct AnalysisReport: Encodable {
    var path: String
    var loudness: LoudnessResult?
    var instruments: InstrumentActivity?
    var error: String?

    enum CodingKeys: String, CodingKey { case path, loudness, instruments, error }
    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(path, forKey: .path)
        try c.encode(loudness, forKey: .loudness)
        try c.encode(instruments, forKey: .instruments)
        try c.encode(error, forKey: .error)
    }

    var humanText: String {
        if let error { return "\(path): \(error)" }
        var lines: [String] = []
        if let l = loudness {
            lines.append("\(path): \(formatDuration(l.duration)), \(l.channels) ch, \(Int(l.sampleRate)) Hz")
            lines.append("  loudness \(formatLevel(l.integrated, "LUFS")) integrated, range \(formatLevel(l.range, "LU")), true peak \(formatLevel(l.truePeak, "dBTP")), "
                         + "sample peak \(formatLevel(l.samplePeak, "dBFS"))")
            lines.append("  loudest 400 ms \(formatLevel(l.maximumMomentary, "LUFS")), loudest 3 s \(formatLevel(l.maximumShortTerm, "LUFS"))")
        } else {
            lines.append("\(path):" + (instruments.map { " \(formatDuration($0.duration))" } ?? ""))
        }
        if let i = instruments { lines.append("  instruments: " + i.summaryText) }
        return lines.joined(separator: "\n")
    }
}
