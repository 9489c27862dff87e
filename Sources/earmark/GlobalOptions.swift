import ArgumentParser
import EarmarkKit
import Foundation

/// Options shared by every command that uses a catalog.
struct GlobalOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp(
        "The catalog: a file, or a catalog on a PostgreSQL server as postgres://user@host:port/database.",
        discussion: """
        Default: $EARMARK_CATALOG, else $XDG_DATA_HOME/earmark/catalog.earcat, \
        else ~/.local/share/earmark/catalog.earcat. A URL takes libpq's forms: the password from the URL, \
        $PGPASSWORD or ~/.pgpass, ?sslmode= for TLS (docs/postgres.md).
        """,
        valueName: "path-or-url"))
    var catalog: String?

    @Flag(name: .long, help: "Print machine-readable JSON on standard output instead of text.")
    var json = false

    @Option(name: .customLong("lock-timeout"), parsing: .unconditional, help: ArgumentHelp(
        "Seconds to wait while another earmark process holds the catalog's write lock.",
        valueName: "seconds"))
    var lockTimeout: Double = 30

    /// The catalog path after applying the defaults and expanding `~`.
    var catalogPath: String {
        let path = catalog.flatMap { $0.isEmpty ? nil : $0 } ?? Catalog.defaultPath
        return (path as NSString).expandingTildeInPath
    }

    func validate() throws {
        guard lockTimeout.isFinite, lockTimeout >= 0 else {
            throw ValidationError("--lock-timeout must be a number of seconds ≥ 0.")
        }
    }

    /// Opens the catalog for reading (never creates it).
    func openReadOnly() throws -> any CatalogStore {
        try CatalogStores.open(catalogPath, access: .read, busyTimeout: lockTimeout)
    }

    /// Opens an existing catalog for writing.
    func openForWriting() throws -> any CatalogStore {
        try CatalogStores.open(catalogPath, access: .write, busyTimeout: lockTimeout)
    }

    /// Opens an existing catalog file for writing, for a command that works on the file and its index folder.
    func openFileForWriting(command: String) throws -> Catalog {
        guard CatalogStores.isFile(catalogPath) else {
            throw CLIError("`earmark \(command)` works on catalog files; \(catalogPath) is a server's catalog")
        }
        return try Catalog(path: catalogPath, busyTimeout: lockTimeout)
    }
}
