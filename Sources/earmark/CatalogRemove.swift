import ArgumentParser
import EarmarkKit

struct CatalogRemoveCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "remove",
        abstract: "Remove tracks from the catalog.",
        discussion: """
        All given tracks are removed in one transaction. If any id is unknown nothing is removed \
        and the exit code is 2. Removed ids are never reused. The file does not shrink by itself; \
        `earmark catalog export` writes a compact copy.
        """
    )

    @OptionGroup var options: GlobalOptions

    @Argument(help: ArgumentHelp("Ids of the tracks to remove.", valueName: "id"))
    var ids: [Int64]

    mutating func run() async throws {
        let options = options
        let ids = ids
        try await reportingErrors {
            let catalog = try options.openForWriting()
            let unique = ids.reduce(into: [Int64]()) { if !$0.contains($1) { $0.append($1) } }
            try catalog.remove(ids: unique)
            if options.json {
                try printJSON(["removed": unique])
            } else {
                print("removed " + unique.map { "#\($0)" }.joined(separator: ", "))
            }
        }
    }
}
