import ArgumentParser
import EarmarkCatalogPostgres
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
        until it is rebuilt or restored. With --json: {path, healthy, tracks, problems}, and with --repair \
        "repaired": the rows deleted.

        On a sharded PostgreSQL catalog, rows that an interrupted add left on a shard (landmarks or peaks of a \
        track whose coordinator row was never committed) are reported; nothing reads them, and the next \
        `catalog add` deletes them, or --repair (which opens the catalog for writing) before checking.

        Exit codes: 0 healthy; 2 problems found, or the file cannot be opened as a catalog.
        """
    )

    @OptionGroup var options: GlobalOptions

    @Flag(help: "A sharded PostgreSQL catalog: first delete the shard rows interrupted writes left behind.")
    var repair = false

    mutating func run() async throws {
        let options = options
        let repair = repair
        try await reportingErrors {
            var repaired: Int?
            if repair, !CatalogStores.isFile(options.catalogPath), let server = try options.openForWriting() as? PostgresCatalog {
                repaired = try server.removeOrphans()
                if !options.json { print("\(server.location): \(repaired ?? 0) orphan row\(repaired == 1 ? "" : "s") deleted") }
            }
            let catalog = try options.openReadOnly()
            let problems = try catalog.check()
            let tracks = problems.isEmpty ? try catalog.stats().trackCount : nil
            if options.json {
                try printJSON(CheckReport(path: catalog.location, healthy: problems.isEmpty, tracks: tracks, problems: problems, repaired: repaired))
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
    var repaired: Int?
}

