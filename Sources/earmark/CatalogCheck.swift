import ArgumentParser
import EarmarkKit

struct CatalogCheckCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check",
        abstract: "Check the catalog file for damage.",
        discussion: """
        Runs SQLite's integrity check over the whole file, then checks what SQLite sees as opaque \
        bytes: every track's stored peaks and every posting of the hash index must decode, name an \
        existing track and a frame within its duration, and each track's postings must add up to \
        its landmark count. Reads every page, so it takes about as long as reading the file. A \
        catalog that fails SQLite's quick check refuses every write (add, update, remove, merge) \
        until it is rebuilt or restored. With --json: {path, healthy, tracks, problems}.

        Exit codes: 0 healthy; 2 problems found, or the file cannot be opened as a catalog.
        """
    )

    @OptionGroup var options: GlobalOptions

    mutating func run() async throws {
        let options = options
        try await reportingErrors {
            let catalog = try options.openReadOnly()
            let problems = try catalog.check()
            let tracks = problems.isEmpty ? try catalog.stats().trackCount : nil
            if options.json {
                try printJSON(CheckReport(path: catalog.location, healthy: problems.isEmpty, tracks: tracks, problems: problems))
            } else if problems.isEmpty {
                print("\(catalog.location): ok, \(tracks ?? 0) track\(tracks == 1 ? "" : "s")")
            } else {
                for p in problems { print("problem: \(p)") }
                print("\(catalog.location): \(problems.count) problem\(problems.count == 1 ? "" : "s") found")
            }
            if !problems.isEmpty { throw ExitCode(2) }
        }
    }
}

struct CheckReport: Encodable {
    var path: String
    var healthy: Bool
    var tracks: Int?
    var problems: [String]
}
