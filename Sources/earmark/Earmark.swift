import ArgumentParser
import EarmarkKit

@main
struct EarmarkCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "earmark",
        abstract: "Audio fingerprinting and custom-catalog matching",
        discussion: """
        Earmark turns audio files into compact fingerprints, stores them in a catalog file \
        (one SQLite file) and identifies short clips against that catalog.

        Quick start:
          earmark catalog add ~/Music/reference/          # index a folder
          earmark match clip.wav                          # identify a clip
          earmark catalog list                            # what is indexed

        Options follow the subcommand they belong to (earmark match --catalog PATH clip.wav). \
        The catalog is chosen with --catalog PATH; without it: $EARMARK_CATALOG, else \
        $XDG_DATA_HOME/earmark/catalog.earcat, else ~/.local/share/earmark/catalog.earcat.

        Exit codes: 0 success; 1 `match` found no match for some clip; 2 an error \
        (unreadable file, locked/read-only/damaged catalog, …); 64 invalid command-line usage.
        """,
        version: "0.1.0",
        subcommands: [CatalogCommand.self, MatchCommand.self, SignatureCommand.self]
    )
}
