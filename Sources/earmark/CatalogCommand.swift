import ArgumentParser

struct CatalogCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "catalog",
        abstract: "Build and manage the catalog of reference tracks.",
        discussion: """
        A catalog is one SQLite file holding the fingerprints (not the audio) and descriptions of \
        reference tracks. Several earmark processes may use it at once: readers never wait, writers \
        wait up to --lock-timeout seconds for each other.

        Which file: --catalog PATH; without it $EARMARK_CATALOG, else \
        $XDG_DATA_HOME/earmark/catalog.earcat, else ~/.local/share/earmark/catalog.earcat.
        """,
        subcommands: [
            CatalogAddCommand.self, CatalogListCommand.self, CatalogInfoCommand.self,
            CatalogRemoveCommand.self, CatalogUpdateCommand.self, CatalogStatsCommand.self,
            CatalogExportCommand.self, CatalogImportCommand.self, CatalogMergeCommand.self, CatalogCopyCommand.self, CatalogCheckCommand.self, CatalogMigrateCommand.self, CatalogInitCommand.self,
        ]
    )
}
