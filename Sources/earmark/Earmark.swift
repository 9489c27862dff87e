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
          earmark analyze song.flac                       # key, BPM, loudness, sections, …
          earmark classify talk.flac                      # speech, music, noises over time

        For the commands that use a catalog (catalog …, match, listen) the shared options --catalog, \
        --json and --lock-timeout may stand before or after the subcommand (earmark --catalog PATH \
        match clip.wav). The catalog is chosen with --catalog PATH; without it: $EARMARK_CATALOG, else \
        $XDG_DATA_HOME/earmark/catalog.earcat, else ~/.local/share/earmark/catalog.earcat.

        Exit codes: 0 success; 1 `match` found no match for some clip; 2 an error \
        (unreadable file, locked/read-only/damaged catalog, …); 64 invalid command-line usage.
        """,
        version: "0.1.0",
        subcommands: [CatalogCommand.self, MatchCommand.self, ListenCommand.self, ServeCommand.self, AnalyzeCommand.self, ClassifyCommand.self, TranscribeCommand.self, TrainClassifierCommand.self, SignatureCommand.self]
    )

    static func main() async {
        await main(hoistingSharedOptions(Array(CommandLine.arguments.dropFirst())))
    }

    /// Moves --catalog, --json and --lock-timeout given before the subcommand to just after it, where
    /// the subcommands declare them (`earmark --json catalog list` → `earmark catalog list --json`).
    static func hoistingSharedOptions(_ args: [String]) -> [String] {
        var shared: [String] = []
        var i = 0
        while i < args.count {
            let a = args[i]
            if a == "--json" {
                shared.append(a)
            } else if a == "--catalog" || a == "--lock-timeout", i + 1 < args.count {
                shared += [a, args[i + 1]]
                i += 1
            } else if a.hasPrefix("--catalog=") || a.hasPrefix("--lock-timeout=") {
                shared.append(a)
            } else {
                break
            }
            i += 1
        }
        guard !shared.isEmpty else { return args }
        let rest = Array(args[i...])
        let pathLength = rest.first == "catalog" && rest.count > 1 && !rest[1].hasPrefix("-") ? 2 : min(1, rest.count)
        return Array(rest[..<pathLength]) + shared + Array(rest[pathLength...])
    }
}
