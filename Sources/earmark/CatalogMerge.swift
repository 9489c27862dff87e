import ArgumentParser
import EarmarkKit
import Foundation

struct CatalogMergeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "merge",
        abstract: "Copy every track of another catalog into the catalog.",
        discussion: """
        FILE (a catalog, e.g. from `catalog export` on another machine) is opened read-only and \
        integrity-checked first; a damaged file, a non-catalog or one made by another signature \
        algorithm is refused. Each of its tracks is then copied with its fingerprint, stored \
        peaks, analyses, descriptions and source path, in its own transaction. Copied tracks get \
        new ids in this catalog (track ids are never reused); each line names the id it had in \
        FILE. A track whose audio is already here is skipped as `same audio as #ID`. The catalog \
        is created when missing. Nothing needs decoding, so a merge is far faster than adding the \
        source files again.

        With --json the result is one object: {"results": [{"sourceId", "status" (added or \
        duplicate), "track"}], "added", "duplicate"}.

        Exit codes: 0 merged; 2 FILE or the catalog could not be used (missing, damaged, locked).
        """
    )

    @OptionGroup var options: GlobalOptions

    @Argument(help: ArgumentHelp("The catalog file whose tracks are copied.", valueName: "file"))
    var file: String

    mutating func run() async throws {
        let options = options
        let source = (file as NSString).expandingTildeInPath
        try await reportingErrors {
            guard FileManager.default.fileExists(atPath: source) else { throw CLIError("\(source): no such file") }
            guard absolutePath(source) != absolutePath(options.catalogPath) else {
                throw CLIError("\(source) is the catalog itself")
            }
            let from = try Catalog(path: source, readOnly: true, busyTimeout: options.lockTimeout)
            let problems = try from.check()
            guard problems.isEmpty else { throw CLIError("\(source) is damaged: \(problems.prefix(3).joined(separator: "; "))") }
            let into = try Catalog(path: options.catalogPath, create: true, busyTimeout: options.lockTimeout)

            let bar = ProgressBar(enabled: stderrIsTerminal && !options.json)
            var audio = 0.0
            let merged = try into.merge(from: from) { done, total, sourceTrack, result in
                audio += sourceTrack.duration
                let line = MergeReport.Entry(sourceId: sourceTrack.id, result: result)
                if !options.json { bar.printLine(line.humanLine) }
                bar.update(done: done, total: total, audioSeconds: audio, current: sourceTrack.title ?? "#\(sourceTrack.id)")
            }
            bar.finish()
            let report = MergeReport(merged)
            if options.json {
                try printJSON(report)
            } else {
                print("\(report.added) added, \(report.duplicate) skipped (same audio)"
                      + String(format: " — %.2f h of audio from %@", audio / 3600, source))
            }
        }
    }
}

/// The line `catalog merge` prints for one track.
extension MergeReport.Entry {
    var humanLine: String {
        status == "added"
            ? "added      \(pad("#\(track.id)", 5)) \(trackLabel(track)) (\(formatDuration(track.duration))), #\(sourceId) there"
            : "skipped    #\(sourceId) there: same audio as #\(track.id) \(trackLabel(track))"
    }
}
