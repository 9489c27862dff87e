import ArgumentParser
import EarmarkKit
import Foundation

struct CatalogImportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Install a catalog file (e.g. from `catalog export`) as the catalog.",
        discussion: """
        FILE is first opened as a catalog and integrity-checked; a damaged file, a non-catalog or \
        one made by another signature algorithm is refused. It is then copied (as a consistent \
        snapshot, like `catalog export`) to the --catalog path.

        Import does not merge: it refuses when the destination catalog already exists and holds \
        tracks (or is some other non-empty file). An existing empty catalog is replaced. To combine \
        catalogs, use `earmark catalog merge FILE`.
        """
    )

    @OptionGroup var options: GlobalOptions

    @Argument(help: ArgumentHelp("The catalog file to import.", valueName: "file"))
    var file: String

    mutating func run() async throws {
        let options = options
        let source = (file as NSString).expandingTildeInPath
        try await reportingErrors {
            let destination = options.catalogPath
            let fm = FileManager.default
            guard fm.fileExists(atPath: source) else { throw CLIError("\(source): no such file") }
            guard absolutePath(source) != absolutePath(destination) else {
                throw CLIError("\(source) is already the catalog")
            }

            // Validate the source.
            let sourceCatalog = try Catalog(path: source, readOnly: true, busyTimeout: options.lockTimeout)
            let problems = try sourceCatalog.check()
            guard problems.isEmpty else {
                throw CLIError("\(source) is damaged: \(problems.prefix(3).joined(separator: "; "))")
            }
            let stats = try sourceCatalog.stats()

            // Only an absent, zero-length or empty-catalog destination may be replaced.
            if fm.fileExists(atPath: destination) {
                let size = (try? fm.attributesOfItem(atPath: destination)[.size] as? Int) ?? 0
                if size > 0 {
                    let existing: Int
                    do {
                        existing = try Catalog(path: destination, readOnly: true, busyTimeout: options.lockTimeout)
                            .stats().trackCount
                    } catch {
                        throw CLIError("\(destination) exists and is not an empty catalog (\(describe(error))); refusing to replace it")
                    }
                    guard existing == 0 else {
                        throw CLIError("\(destination) already holds \(existing) track\(existing == 1 ? "" : "s"); refusing to replace it (import does not merge catalogs: use `earmark catalog merge`, another --catalog path, or remove the file first)")
                    }
                }
                for suffix in ["", "-wal", "-shm", "-index"] where fm.fileExists(atPath: destination + suffix) {
                    try fm.removeItem(atPath: destination + suffix)
                }
            } else {
                let folder = URL(fileURLWithPath: destination).deletingLastPathComponent().path
                if !folder.isEmpty { try fm.createDirectory(atPath: folder, withIntermediateDirectories: true) }
            }
            try sourceCatalog.export(to: destination)

            // Make sure the result opens for writing like any catalog, and index it if it is large.
            try Catalog(path: destination, busyTimeout: options.lockTimeout).flushIndex(ifLargerThanFile: true)
            if options.json {
                try printJSON(ImportReport(source: source, catalog: destination, tracks: stats.trackCount,
                                           totalDuration: stats.totalDuration))
            } else {
                print("imported \(stats.trackCount) track\(stats.trackCount == 1 ? "" : "s")"
                      + String(format: " (%.2f h of audio)", stats.totalDuration / 3600) + " into \(destination)")
            }
        }
    }
}

struct ImportReport: Encodable {
    var source: String
    var catalog: String
    var tracks: Int
    var totalDuration: Double
}
