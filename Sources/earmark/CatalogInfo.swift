import ArgumentParser
import EarmarkKit

struct CatalogInfoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "info",
        abstract: "Show everything stored about one track.",
        discussion: "With --json: the track object. Exit code 2 when there is no track with that id."
    )

    @OptionGroup var options: GlobalOptions

    @Argument(help: ArgumentHelp("Track id (see `earmark catalog list`).", valueName: "id"))
    var id: Int64

    mutating func run() async throws {
        let options = options
        let id = id
        try await reportingErrors {
            let catalog = try options.openReadOnly()
            guard let track = try catalog.track(id: id) else {
                throw CatalogError(.noSuchTrack, "no track with id \(id)", path: catalog.path)
            }
            if options.json {
                try printJSON(track)
            } else {
                printTrack(track)
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
