import ArgumentParser
import EarmarkKit

struct CatalogListCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list",
        abstract: "List the tracks in the catalog.",
        discussion: """
        Prints a table of id, title, artist, album and duration, ordered by id. \
        With --json: an array of track objects (id, title, artist, album, metadata, duration, \
        sourcePath, contentHash, landmarkCount, addedAt).
        """
    )

    @OptionGroup var options: GlobalOptions

    mutating func run() async throws {
        let options = options
        try await reportingErrors {
            let tracks = try options.openReadOnly().tracks()
            if options.json {
                try printJSON(tracks)
                return
            }
            guard !tracks.isEmpty else {
                print("The catalog is empty (\(options.catalogPath)); add tracks with `earmark catalog add`.")
                return
            }
            let header = ["ID", "TITLE", "ARTIST", "ALBUM", "DURATION"]
            let rows = tracks.map { t in
                ["\(t.id)", truncate(t.title ?? "", 40), truncate(t.artist ?? "", 30),
                 truncate(t.album ?? "", 30), formatDuration(t.duration)]
            }
            let widths = header.indices.map { c in ([header] + rows).map { $0[c].count }.max() ?? 0 }
            func line(_ cells: [String]) -> String {
                var out = String(repeating: " ", count: widths[0] - cells[0].count) + cells[0]
                for c in 1..<4 { out += "  " + pad(cells[c], widths[c]) }
                out += "  " + String(repeating: " ", count: widths[4] - cells[4].count) + cells[4]
                return out
            }
            print(line(header))
            for r in rows { print(line(r)) }
            let total = tracks.reduce(0) { $0 + $1.duration }
            print("\(tracks.count) track\(tracks.count == 1 ? "" : "s"), \(formatDuration(total))")
        }
    }
}
