import ArgumentParser
import EarmarkKit
import Foundation

struct AnalyzeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "analyze",
        abstract: "Measure music metadata of audio files (so far: loudness).",
        discussion: """
        Loudness follows EBU R 128 / ITU-R BS.1770-4 (libebur128), measured on the file's own channels \
        and sample rate: integrated loudness (LUFS), loudness range (LU), true peak (dBTP), sample \
        peak (dBFS), and momentary (400 ms) and short-term (3 s) loudness every 100 ms. Silence has no \
        loudness: those values are null.

        --json: one object {path, loudness: {integrated, range, truePeak, samplePeak, maximumMomentary, \
        maximumShortTerm, momentary: [{start, end, value}], shortTerm: [{start, end, value}], duration, \
        sampleRate, channels}, error} per file; an array for several files.

        Key, rhythm, structure, pace and instrument activity are planned; --only accepts loudness.

        Exit codes: 0 every file analysed; 2 some file could not be read.
        """
    )

    @Flag(help: "Print JSON on standard output instead of text.")
    var json = false

    @Option(help: ArgumentHelp("Dimensions to compute, comma-separated (loudness).", valueName: "list"))
    var only: String = "loudness"

    @Argument(help: ArgumentHelp("Audio files to analyse.", valueName: "file"))
    var files: [String]

    func validate() throws {
        let asked = only.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        let planned = ["key", "rhythm", "structure", "pace", "instruments"]
        for a in asked where a != "loudness" {
            throw ValidationError(planned.contains(a) ? "--only \(a): not available yet (only loudness is)." : "--only: unknown dimension '\(a)'.")
        }
    }

    mutating func run() async throws {
        var reports: [AnalysisReport] = []
        var failed = 0
        for file in files {
            do {
                let loudness = try LoudnessMeter.measure(path: file)
                let report = AnalysisReport(path: file, loudness: loudness, error: nil)
                if !json { print(report.humanText) }
                reports.append(report)
            } catch {
                let message = describe(error, file: file)
                writeStderr(message + "\n")
                reports.append(AnalysisReport(path: file, loudness: nil, error: message))
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
    var error: String?

    enum CodingKeys: String, CodingKey { case path, loudness, error }
    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(path, forKey: .path)
        try c.encode(loudness, forKey: .loudness)
        try c.encode(error, forKey: .error)
    }

    var humanText: String {
        guard let l = loudness else { return "\(path): \(error ?? "no result")" }
        return "\(path): \(formatDuration(l.duration)), \(l.channels) ch, \(Int(l.sampleRate)) Hz\n"
            + "  loudness \(formatLevel(l.integrated, "LUFS")) integrated, range \(formatLevel(l.range, "LU")), true peak \(formatLevel(l.truePeak, "dBTP")), "
            + "sample peak \(formatLevel(l.samplePeak, "dBFS"))\n"
            + "  loudest 400 ms \(formatLevel(l.maximumMomentary, "LUFS")), loudest 3 s \(formatLevel(l.maximumShortTerm, "LUFS"))"
    }
}
