import ArgumentParser
import Foundation
import EarmarkKit

struct CatalogInfoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "info",
        abstract: "Show everything stored about one track.",
        discussion: """
        Prints the track's fields (id, title, artist, album, duration, landmarks, source file, audio hash, \
        when it was added, metadata), then one line for each analysis stored by `catalog add --analyze`: \
        loudness, sound, key, rhythm, structure, pace and instruments, and the transcript (speech: language, \
        segment and word counts, then each segment with its time range). The audio hash is a digest of the \
        decoded audio, or `sig-` and 32 hex digits for a track added from a .earsig signature file.

        With --json: the track object (id, title, artist, album, metadata, duration, sourcePath, contentHash, \
        landmarkCount, addedAt; absent fields left out) with "analysis": {kind: result} holding every stored \
        analysis in its stored shape: loudness {integrated, range, truePeak, samplePeak, maximumMomentary, \
        maximumShortTerm, shortTermPerSecond, duration}, sound, key, rhythm, structure, pace, instruments and \
        speech {model, language, duration, text, segments: [{start, end, text, words: [{start, end, word}]}]} \
        (docs/catalog.md lists them); {} when none was stored.

        --svg out.svg also draws the stored analysis as a timeline (loudness, beats and bars, sections, key \
        ranges, instrument activity, sound classes and speech; the lanes of the kinds stored), the picture \
        `GET /v1/tracks/{id}/timeline.svg` of `earmark serve` answers.

        Exit code 2 when there is no track with that id, the catalog cannot be opened, or the SVG cannot be written.
        """
    )

    @OptionGroup var options: GlobalOptions

    @Argument(help: ArgumentHelp("Track id (see `earmark catalog list`).", valueName: "id"))
    var id: Int64

    @Option(help: ArgumentHelp("Also draw the stored analysis as an SVG timeline into this file.", valueName: "out.svg"))
    var svg: String?

    func validate() throws {
        if let svg, svg.isEmpty { throw ValidationError("--svg needs a file name.") }
    }

    mutating func run() async throws {
        let options = options
        let (id, svg) = (id, svg)
        try await reportingErrors {
            let catalog = try options.openReadOnly()
            guard let track = try catalog.track(id: id) else {
                throw CatalogError(.noSuchTrack, "no track with id \(id)", path: catalog.location)
            }
            let analyses = try catalog.analyses(trackID: id)
            if let svg {
                try writeTimeline(AnalysisTimeline(track: track, analyses: analyses).svg(emptyMessage: AnalysisTimeline.noStoredAnalysis),
                                  to: svg)
            }
            if options.json {
                // The track object, plus "analysis": {kind: result} (each in its documented shape).
                print(String(decoding: try trackInfoJSON(track, analyses: analyses, prettyPrinted: true), as: UTF8.self))
            } else {
                printTrack(track)
                for a in analyses where a.kind == LoudnessSummary.kind {
                    guard let l = try? JSONDecoder().decode(LoudnessSummary.self, from: a.json) else { continue }
                    print(pad("loudness:", 11) + " " + formatLevel(l.integrated, "LUFS") + " integrated, range " + formatLevel(l.range, "LU")
                          + ", true peak " + formatLevel(l.truePeak, "dBTP") + ", loudest 3 s " + formatLevel(l.maximumShortTerm, "LUFS"))
                }
                for a in analyses where a.kind == SoundAnalysis.kind {
                    guard let s = try? JSONDecoder().decode(SoundAnalysis.self, from: a.json) else { continue }
                    let speech = s.speech.isEmpty ? "no speech" : "speech \(Int((s.speechShare * 100).rounded())) % of the time"
                    print(pad("sound:", 11) + " " + s.summaryText + "; " + speech)
                }
                for a in analyses where a.kind == KeyResult.kind {
                    guard let k = try? JSONDecoder().decode(KeyResult.self, from: a.json) else { continue }
                    let changes = k.ranges.count > 1 ? " (\(k.ranges.count) key ranges)" : ""
                    print(pad("key:", 11) + " \(k.tonic) \(k.mode.rawValue)" + changes)
                }
                for a in analyses where a.kind == RhythmResult.kind {
                    guard let r = try? JSONDecoder().decode(RhythmResult.self, from: a.json) else { continue }
                    if let reason = r.reason { print(pad("rhythm:", 11) + " none (\(reason.rawValue))") }
                    guard let bpm = r.bpm else { continue }
                    print(pad("rhythm:", 11) + String(format: " %.1f BPM, %d beats a bar", bpm, r.beatsPerBar)
                          + (r.timeSignature.map { ", time \($0)" } ?? ""))
                }
                for a in analyses where a.kind == StructureResult.kind {
                    guard let st = try? JSONDecoder().decode(StructureResult.self, from: a.json) else { continue }
                    if let reason = st.reason {
                        print(pad("structure:", 11) + " none (\(reason.rawValue))")
                        continue
                    }
                    print(pad("structure:", 11) + " " + st.sections.map { "\(formatDuration($0.start)) \($0.label ?? "")" }.joined(separator: ", "))
                }
                for a in analyses where a.kind == PaceResult.kind {
                    guard let p = try? JSONDecoder().decode(PaceResult.self, from: a.json) else { continue }
                    if let reason = p.reason {
                        print(pad("pace:", 11) + " none (\(reason.rawValue))")
                        continue
                    }
                    print(pad("pace:", 11) + String(format: " %.0f events a minute", p.overall))
                }
                for a in analyses where a.kind == InstrumentActivity.kind {
                    guard let s = try? JSONDecoder().decode(InstrumentSummary.self, from: a.json) else { continue }
                    print(pad("instruments:", 11) + " " + s.summaryText)
                }
                for a in analyses where a.kind == SpeechAnalysis.kind {
                    guard let sp = try? JSONDecoder().decode(SpeechAnalysis.self, from: a.json) else { continue }
                    print(pad("speech:", 11) + " " + sp.summaryText)
                    for seg in sp.segments {
                        print("  " + formatDuration(seg.start) + "–" + formatDuration(seg.end) + "  " + seg.text)
                    }
                }
                if let svg { print(pad("timeline:", 11) + " " + svg) }
            }
        }
    }
}

/// The human-readable form of a track, shared by `info` and `update`.
func printTrack(_ t: Track) {
    func row(_ name: String, _ value: String?) {
        print(pad(name + ":", 11) + " " + (value ?? "—"))
    }
    row("id", "\(t.id)")
    row("title", t.title)
    row("artist", t.artist)
    row("album", t.album)
    row("duration", formatDuration(t.duration) + String(format: " (%.2f s)", t.duration))
    row("landmarks", "\(t.landmarkCount)")
    row("source", t.sourcePath)
    row("audio hash", t.contentHash.isEmpty ? nil : t.contentHash)
    row("added", t.addedAt)
    if t.metadata.isEmpty {
        row("metadata", nil)
    } else {
        print("metadata:")
        for key in t.metadata.keys.sorted() {
            print("  \(key): " + formatJSONValue(t.metadata[key]!).replacingOccurrences(of: "\n", with: "\n    "))
        }
    }
}
