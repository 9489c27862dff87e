import ArgumentParser
import EarmarkKit
import Foundation

struct MatchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "match",
        abstract: "Identify clips against the catalog.",
        discussion: """
        Each clip is an audio file (at least about one second of sound) or a .earsig signature file \
        made by `earmark signature`. The catalog is opened read-only once for all clips.

        For each clip the best match is printed on one line as

          clip.wav: Title — Artist  1:23.45–1:33.45 heard at 0.0–10.0 s of the clip; confidence 0.97
            (evidence 31.2 decades: 87 of 95 peaks verified, 57 aligned hashes; best other track 4 hashes)

        naming the stretch of the track that was heard and where it is in the clip. Matches are \
        ranked by their evidence against chance (decades: 10 is a one-in-10^10 coincidence), which \
        peak verification and aligned hashes give, not by the hash count alone. A clip played at \
        another speed (up to ±10 %), tempo or pitch says so, e.g. "speed +3.0 %", "tempo -4.0 %", \
        "pitch +5.9 % (+1.0 semitones)". Further matches (several tracks in one clip) follow, indented.

        A clip longer than a minute (a radio hour, a DJ set) is matched in 20-s windows every 10 s, \
        with a progress bar, and every stretch in which a track was heard is printed in order of \
        time, each with its range in the clip and in the track.

        A clip that cannot be read prints `path: error` on standard error and the remaining clips \
        are still matched.

        --json: for one clip, one object {path, matches: [{track, matchOffset, confidence, score, \
        significance, runnerUpScore, frequencySkew, timeScale, alternativeOffsets, queryStart, \
        queryEnd, referenceStart, referenceEnd, key (the track's stored key at the matched stretch, \
        {start, end, tonic, mode}, when `catalog add --analyze` stored one; else null), bpm (the tempo \
        of the stored beats in the matched stretch, or null), …}], \
        queryDuration, queryLandmarks, candidateHits, loudness (the clip's EBU R 128 loudness, as \
        `earmark analyze` prints it; null for .earsig files), sound (with --classify: the clip's sound \
        classification, as `catalog info --json` shows a track's: model, dominant labels with their \
        share, categoryShares, speech ranges, timeline; else null), error}; for several clips, a JSON array of \
        those objects in argument order (a clip that failed has empty matches, null numbers and \
        its message in error; error is null otherwise).

        Exit codes:
          0  every clip matched
          1  some clip had no match (and no clip failed)
          2  some clip could not be read or matched, or the catalog could not be opened
        """
    )

    @OptionGroup var options: GlobalOptions

    @Argument(help: ArgumentHelp("Audio clips or .earsig signature files to identify.", valueName: "clip"))
    var clips: [String]

    @Option(name: .customLong("max-matches"), parsing: .unconditional, help: ArgumentHelp(
        "Report at most this many tracks per clip.", valueName: "n"))
    var maxMatches: Int = MatchOptions.default.maximumMatches

    @Flag(help: "Also classify each clip's sounds (speech, music, … ; the model of tools/fetch-model.sh).")
    var classify = false

    @Option(help: ArgumentHelp("Sound model for --classify (default: see `earmark classify --help`).", valueName: "path"))
    var model: String?

    func validate() throws {
        guard maxMatches >= 1 else { throw ValidationError("--max-matches must be at least 1.") }
    }

    mutating func run() async throws {
        let options = options
        let clips = clips
        let maxMatches = maxMatches
        let soundModel = classify ? try loadSoundModel(model) : nil
        try await reportingErrors {
            var matchOptions = MatchOptions.default
            matchOptions.maximumMatches = maxMatches
            let recognizer = try Recognizer(catalogPath: options.catalogPath, options: matchOptions,
                                            busyTimeout: options.lockTimeout)
            var reports: [ClipReport] = []
            var unmatched = 0
            var failed = 0
            for clip in clips {
                let report: ClipReport
                do {
                    let bar = ProgressBar(enabled: stderrIsTerminal)
                    let (result, loudness, sound) = try recognizer.matchAnalyzing(path: clip, sound: soundModel) { done, total in
                        bar.update(done: Int(done), total: Int(total.rounded(.up)), audioSeconds: done, current: clip)
                    }
                    bar.finish()
                    var r = ClipReport(path: clip, result: result, loudness: loudness, sound: sound)
                    r.contexts = try result.matches.map { try recognizer.context(of: $0) }
                    report = r
                    if result.matches.isEmpty { unmatched += 1 }
                } catch let error as CatalogError {
                    throw error   // the catalog, not the clip, is at fault: stop
                } catch {
                    let message = describe(error, file: clip)
                    writeStderr(message + "\n")
                    report = ClipReport(path: clip, error: message)
                    failed += 1
                }
                if !options.json, report.error == nil {
                    print(report.humanText)
                }
                reports.append(report)
            }
            if options.json {
                if clips.count == 1 { try printJSON(reports[0]) } else { try printJSON(reports) }
            }
            if failed > 0 { throw ExitCode(2) }
            if unmatched > 0 { throw ExitCode(1) }
        }
    }
}

/// A match as JSON, with the track's stored key and tempo at the matched stretch added to its fields.
struct MatchWithContext: Encodable {
    var match: Match
    var context: MatchContext
    enum CodingKeys: String, CodingKey { case key, bpm }
    func encode(to encoder: any Encoder) throws {
        try match.encode(to: encoder)
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(context.key, forKey: .key)
        try c.encode(context.bpm, forKey: .bpm)
    }
}

/// The outcome for one clip, as printed by `match`.
struct ClipReport: Encodable {
    var path: String
    var matches: [Match] = []
    /// Stored key and tempo of each match's track at the matched stretch (parallel to `matches`).
    var contexts: [MatchContext] = []
    var queryDuration: Double?
    var queryLandmarks: Int?
    var candidateHits: Int?
    /// EBU R 128 loudness of the clip (audio clips only).
    var loudness: LoudnessResult?
    /// Sound classification of the clip (with --classify).
    var sound: SoundAnalysis?
    var error: String?

    init(path: String, result: MatchResult, loudness: LoudnessResult? = nil, sound: SoundAnalysis? = nil) {
        self.path = path
        self.loudness = loudness
        self.sound = sound
        matches = result.matches
        queryDuration = result.queryDuration
        queryLandmarks = result.queryLandmarks
        candidateHits = result.candidateHits
    }

    init(path: String, error: String) {
        self.path = path
        self.error = error
    }

    enum CodingKeys: String, CodingKey { case path, matches, queryDuration, queryLandmarks, candidateHits, loudness, sound, error }

    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(path, forKey: .path)
        try c.encode(matches.indices.map { MatchWithContext(match: matches[$0], context: contexts.indices.contains($0) ? contexts[$0] : MatchContext()) },
                     forKey: .matches)
        try c.encode(queryDuration, forKey: .queryDuration)   // null when absent
        try c.encode(queryLandmarks, forKey: .queryLandmarks)
        try c.encode(candidateHits, forKey: .candidateHits)
        try c.encode(loudness, forKey: .loudness)
        try c.encode(sound, forKey: .sound)
        try c.encode(error, forKey: .error)
    }

    var humanText: String {
        var notes: [String] = []
        if let l = loudness?.integrated { notes.append(String(format: "clip %.1f LUFS", l)) }
        if let s = sound { notes.append(s.summaryText) }
        let level = notes.isEmpty ? "" : " (" + notes.joined(separator: "; ") + ")"
        guard let first = matches.first else { return "\(path): no match" + level }
        var context: [String] = []
        if let k = contexts.first?.key { context.append("key \(k.tonic) \(k.mode.rawValue)") }
        if let bpm = contexts.first?.bpm { context.append(String(format: "%.0f BPM", bpm)) }
        let key = context.isEmpty ? "" : " [" + context.joined(separator: ", ") + "]"
        var lines = ["\(path): \(ClipReport.describe(first))" + key + level]
        for m in matches.dropFirst() { lines.append("    also: \(ClipReport.describe(m))") }
        return lines.joined(separator: "\n")
    }

    /// What was heard where, and the evidence that decided it. Matches are ranked by their evidence (decades
    /// against chance), not by aligned hashes, so the hash count of the best other track is named as such.
    static func describe(_ m: Match) -> String {
        "\(trackLabel(m.track))  \(formatOffset(m.referenceStart))–\(formatOffset(m.referenceEnd))"
            + String(format: " heard at %.1f–%.1f s of the clip", m.queryStart, m.queryEnd) + skewSuffix(m)
            + String(format: "; confidence %.2f (evidence %.1f decades: %d of %d peaks verified, %d aligned hashes; best other track %d hashes)",
                     m.confidence, m.significance, m.verifiedPeaks, m.queryPeaks, m.score, m.runnerUpScore)
    }
}
