import ArgumentParser
import EarmarkKit

struct CatalogUpdateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "update",
        abstract: "Change a track's title, artist, album or metadata.",
        discussion: """
        Fields that are not given are left as they are. --set adds or replaces one metadata key \
        (stored as a string); --unset deletes one (it must exist); other keys are kept. Prints the \
        updated track (--json: the track object).

        Example: earmark catalog update 12 --title "Hello, World" --set isrc=GBXXX0000001 --unset year
        """
    )

    @OptionGroup var options: GlobalOptions

    @Argument(help: ArgumentHelp("Track id.", valueName: "id"))
    var id: Int64

    @Option(help: ArgumentHelp("New title.", valueName: "title"))
    var title: String?

    @Option(help: ArgumentHelp("New artist.", valueName: "artist"))
    var artist: String?

    @Option(help: ArgumentHelp("New album.", valueName: "album"))
    var album: String?

    @Option(name: .customLong("set"), help: ArgumentHelp(
        "Set a metadata key (repeatable).", valueName: "key=value"))
    var assignments: [String] = []

    @Option(name: .customLong("unset"), help: ArgumentHelp(
        "Delete a metadata key (repeatable).", valueName: "key"))
    var removals: [String] = []

    func validate() throws {
        guard title != nil || artist != nil || album != nil || !assignments.isEmpty || !removals.isEmpty else {
            throw ValidationError("Nothing to change: give --title, --artist, --album, --set key=value or --unset key.")
        }
        if let both = removals.first(where: { key in assignments.contains { $0.hasPrefix(key + "=") } }) {
            throw ValidationError("--set and --unset both name '\(both)'.")
        }
        _ = try parsedAssignments()
    }

    func parsedAssignments() throws -> [String: JSONValue] {
        var out: [String: JSONValue] = [:]
        for a in assignments {
            guard let eq = a.firstIndex(of: "="), eq != a.startIndex else {
                throw ValidationError("--set expects key=value, got '\(a)'.")
            }
            out[String(a[..<eq])] = .string(String(a[a.index(after: eq)...]))
        }
        return out
    }

    mutating func run() async throws {
        let options = options
        let (id, title, artist, album, removals) = (id, title, artist, album, Set(removals))
        let metadata = try parsedAssignments()
        try await reportingErrors {
            let catalog = try options.openForWriting()
            let track = try catalog.update(id: id, title: title, artist: artist, album: album,
                                           metadata: metadata.isEmpty ? nil : metadata, removingKeys: removals)
            if options.json {
                try printJSON(track)
            } else {
                printTrack(track)
            }
        }
    }
}
