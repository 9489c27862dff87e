import ArgumentParser
import EarmarkKit
import Foundation

struct CatalogExportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "export",
        abstract: "Write a compact, self-contained copy of the catalog.",
        discussion: """
        The copy is a consistent snapshot (SQLite VACUUM INTO) without free space, safe to take \
        while other processes use the catalog, and can be opened with --catalog or brought in \
        elsewhere with `earmark catalog import`. The destination must not exist.
        """
    )

    @OptionGroup var options: GlobalOptions

    @Argument(help: ArgumentHelp("The file to write.", valueName: "file"))
    var file: String

    mutating func run() async throws {
        let options = options
        let destination = (file as NSString).expandingTildeInPath
        try await reportingErrors {
            guard !FileManager.default.fileExists(atPath: destination) else {
                throw CLIError("\(destination) already exists; choose another name or remove it first")
            }
            let catalog = try options.openReadOnly()
            let tracks = try catalog.stats().trackCount
            try catalog.export(to: destination)
            let bytes = (try? FileManager.default.attributesOfItem(atPath: destination)[.size] as? Int) ?? 0
            if options.json {
                try printJSON(ExportReport(path: destination, tracks: tracks, bytes: bytes))
            } else {
                print("exported \(tracks) track\(tracks == 1 ? "" : "s") to \(destination)"
                      + String(format: " (%.1f MB)", Double(bytes) / 1_048_576))
            }
        }
    }
}

struct ExportReport: Encodable {
    var path: String
    var tracks: Int
    var bytes: Int
}
