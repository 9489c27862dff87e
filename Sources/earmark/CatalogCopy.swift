import ArgumentParser
import EarmarkKit
import Foundation

struct CatalogCopyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "copy",
        abstract: "Copy a whole catalog to another place, verifying the copy.",
        discussion: """
        SOURCE and DESTINATION are catalog locations (a file path today). SOURCE is opened read-only and \
        checked first; a damaged one is refused. DESTINATION is created with SOURCE's signature algorithm \
        when it is missing; an existing one must use the same algorithm. Every track then moves with its \
        fingerprint, stored peaks, analyses, descriptions and source file, each in its own transaction, \
        under new ids. A copy that stops can be run again: tracks already there (same audio) are skipped, \
        so it goes on where it stopped.

        Then the copy is verified: every SOURCE track must have its counterpart in DESTINATION with as many \
        landmarks, and for a sample of tracks (--verify-sample, spread over the catalog) every landmark \
        looked up in DESTINATION must find the counterpart at the same frame, which is what matching reads.

        With --json the result is one object: {"source", "destination", "tracks", "added", "duplicate", \
        "verifiedTracks", "verifiedLandmarks", "problems"}.

        Exit codes: 0 copied and verified; 1 the copy differs from the source (the problems are listed); \
        2 a catalog could not be used (missing, damaged, locked, another signature algorithm).
        """
    )

    @Option(name: .long, help: ArgumentHelp("Seconds to wait while another earmark process holds a catalog's write lock.",
                                            valueName: "seconds"))
    var lockTimeout: Double = 30

    @Option(name: .long, help: ArgumentHelp("Tracks whose every landmark is looked up in the copy.", valueName: "n"))
    var verifySample = 8

    @Flag(name: .long, help: "Print machine-readable JSON on standard output instead of text.")
    var json = false

    @Argument(help: ArgumentHelp("The catalog to copy.", valueName: "source"))
    var source: String

    @Argument(help: ArgumentHelp("Where the copy goes (created when missing).", valueName: "destination"))
    var destination: String

    func validate() throws {
        guard lockTimeout.isFinite, lockTimeout >= 0 else { throw ValidationError("--lock-timeout must be a number of seconds ≥ 0.") }
        guard verifySample >= 0 else { throw ValidationError("--verify-sample must be 0 or more.") }
    }

    mutating func run() async throws {
        let (json, lockTimeout, verifySample) = (json, lockTimeout, verifySample)
        let source = (self.source as NSString).expandingTildeInPath
        let destination = (self.destination as NSString).expandingTildeInPath
        let report = try await reportingErrors { () -> CopyReport in
            if CatalogStores.isFile(source), CatalogStores.isFile(destination), absolutePath(source) == absolutePath(destination) {
                throw CLIError("\(source) is the destination itself")
            }
            let from = try CatalogStores.open(source, access: .read, busyTimeout: lockTimeout)
            let problems = try from.check()
            guard problems.isEmpty else { throw CLIError("\(from.location) is damaged: \(problems.prefix(3).joined(separator: "; "))") }
            let into = try CatalogStores.open(destination, access: .create, busyTimeout: lockTimeout, configuration: from.configuration)

            let bar = ProgressBar(enabled: stderrIsTerminal && !json)
            var audio = 0.0
            let merged = try into.merge(from: from) { done, total, sourceTrack, _ in
                audio += sourceTrack.duration
                bar.update(done: done, total: total, audioSeconds: audio, current: sourceTrack.title ?? "#\(sourceTrack.id)")
            }
            bar.finish()
            let verified = try into.verifyCopy(merged, from: from, sample: verifySample)
            let counts = MergeReport(merged)
            return CopyReport(source: from.location, destination: into.location, tracks: merged.count, added: counts.added,
                              duplicate: counts.duplicate, verifiedTracks: verified.tracks, verifiedLandmarks: verified.landmarks,
                              problems: verified.problems)
        }
        if json {
            try printJSON(report)
        } else {
            for p in report.problems { print("problem: \(p)") }
            print("\(report.tracks) track\(report.tracks == 1 ? "" : "s") in \(report.destination): \(report.added) copied, "
                  + "\(report.duplicate) there already; \(report.verifiedLandmarks) landmarks of \(report.verifiedTracks) "
                  + "track\(report.verifiedTracks == 1 ? "" : "s") found in the copy"
                  + (report.problems.isEmpty ? "" : "; \(report.problems.count) problem\(report.problems.count == 1 ? "" : "s")"))
        }
        if !report.problems.isEmpty { throw ExitCode(1) }
    }
}

struct CopyReport: Encodable {
    var source: String
    var destination: String
    var tracks: Int
    var added: Int
    var duplicate: Int
    var verifiedTracks: Int
    var verifiedLandmarks: Int
    var problems: [String]
}
