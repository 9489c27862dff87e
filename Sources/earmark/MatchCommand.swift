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

        --transcribe adds a line `says: "…"` with what the clip says (Whisper base reads only the \
        stretches the sound classifier hears as speech; music and silence say nothing).

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
        share, categoryShares, speech ranges, timeline; else null), transcript (only with --transcribe: \
        what the clip says, as `catalog info --json` shows a track's speech: {model, language, duration, \
        text, segments: [{start, end, text, words: [{start, end, word}]}]}; empty text and segments \
        when nothing is said), error}; for several clips, a JSON array of \
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

    @Option(help: ArgumentHelp("Sound model for --classify and --transcribe (default: see `earmark classify --help`).", valueName: "path"))
    var model: String?

    @Flag(help: "Also transcribe what each clip says (Whisper base of tools/fetch-speech-model.sh, only where there is speech).")
    var transcribe = false

    @Option(name: .customLong("speech-model"), help: ArgumentHelp(
        "Speech model for --transcribe (default: see `earmark transcribe --help`).", valueName: "path"))
    var speechModelPath: String?

    func validate() throws {
        guard maxMatches >= 1 else { throw ValidationError("--max-matches must be at least 1.") }
    }

    mutating func run() async throws {
        let options = options
        let clips = clips
        let maxMatches = maxMatches
        let classify = classify
        let soundModel = classify || transcribe ? try loadSoundModel(model) : nil
        var speechModel: SpeechModel?
        if transcribe {
            do {
                speechModel = try SpeechModel.load(path: speechModelPath)
            } catch {
                writeStderr("earmark: error: \(describe(error))\n")
                throw ExitCode(2)
            }
        }
        let speech = speechModel
        try await reportingErrors {
            let recognizer = try Recognizer(catalogPath: options.catalogPath, busyTimeout: options.lockTimeout)
            recognizer.matcher.options.maximumMatches = maxMatches
            // A few clips repay few of the page faults a mapped index costs on first touch: 64 MB of mapping a
            // clip, then pread (at 10,000 h a one-clip process took 0.76 s instead of 0.97 s; docs/catalog.md).
            if let file = recognizer.matcher.catalog as? Catalog, file.indexMemoryLimit == nil {
                file.indexMemoryLimit = clips.count * (64 << 20)
            }
            var reports: [ClipReport] = []
            var unmatched = 0
            var failed = 0
            for clip in clips {
                let report: ClipReport
                do {
                    let bar = ProgressBar(enabled: stderrIsTerminal)
                    var r = try recognizer.report(path: clip, sound: soundModel, speech: speech) { done, total in
                        bar.update(done: Int(done), total: Int(total.rounded(.up)), audioSeconds: done, current: clip)
                    }
                    // The classification that only found the speech is not reported unless asked for.
                    if !classify { r.sound = nil }
                    report = r
                    bar.finish()
                    if report.matches.isEmpty { unmatched += 1 }
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

/// The text line(s) `match` prints for one clip (the JSON object is EarmarkKit's ``ClipReport``).
extension ClipReport {
    var humanText: String {
        var notes: [String] = []
        if let l = loudness?.integrated { notes.append(String(format: "clip %.1f LUFS", l)) }
        if let s = sound { notes.append(s.summaryText) }
        let level = notes.isEmpty ? "" : " (" + notes.joined(separator: "; ") + ")"
        let says = transcript.map { t in
            "\n    says: " + (t.hasSpeech ? "\u{201C}\(t.text)\u{201D} (\(t.language), " + String(format: "%.1f–%.1f s", t.segments[0].start, t.segments.last!.end) + ")"
                                      : "nothing (no speech)")
        } ?? ""
        guard let first = matches.first else { return "\(path): no match" + level + says }
        var context: [String] = []
        if let k = contexts.first?.key { context.append("key \(k.tonic) \(k.mode.rawValue)") }
        if let bpm = contexts.first?.bpm { context.append(String(format: "%.0f BPM", bpm)) }
        let key = context.isEmpty ? "" : " [" + context.joined(separator: ", ") + "]"
        var lines = ["\(path): \(ClipReport.describe(first))" + key + level]
        for m in matches.dropFirst() { lines.append("    also: \(ClipReport.describe(m))") }
        return lines.joined(separator: "\n") + says
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
