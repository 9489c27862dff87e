import ArgumentParser
import EarmarkKit

struct CatalogUpdateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "update",
        abstract: "Change a track's title, artist, album or metadata.",
        discussion: """
        Fields that are not given are left as they are. --set adds or replaces one metadata key \
        (stored as a string); other keys are kept. Prints the updated track (--json: the track object).

        Example: earmark catalog update 12 --title "Hello, World" --set isrc=GBXXX0000001 --set year=1999
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

    func validate() throws {
        guard title != nil || artist != nil || album != nil || !assignments.isEmpty else {
            throw ValidationError("Nothing to change: give --title, --artist, --album or --set key=value.")
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
        let (id, title, artist, album) = (id, title, artist, album)
        let metadata = try parsedAssignments()
        try await reportingErrors {
            let catalog = try options.openForWriting()
            let track = try catalog.update(id: id, title: title, artist: artist, album: album,
                                           metadata: metadata.isEmpty ? nil : metadata)
            if options.json {
                try printJSON(track)
            } else {
                printTrack(track)
            }
        }
    }
}
