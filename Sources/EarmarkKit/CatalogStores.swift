import EarmarkCatalog
import EarmarkCatalogPostgres
import EarmarkSignature

/// What a catalog is opened for.
public enum CatalogAccess: Sendable {
    /// Reading only (matching, listing); a missing catalog is ``CatalogError/Code/notFound``.
    case read
    /// Reading and writing an existing catalog.
    case write
    /// Reading and writing, creating the catalog when it is missing.
    case create
}

/// Opens catalogs by location, whichever store keeps them.
public enum CatalogStores {
    /// Opens the catalog at `location`: a file path (an embedded SQLite ``Catalog``), or a `postgres://` (or
    /// `postgresql://`) URL (a ``PostgresCatalog``); ``CatalogError/Code/invalidArgument`` for another scheme.
    /// - Parameters:
    ///   - busyTimeout: seconds to wait for another writer's lock.
    ///   - configuration: the signature algorithm of a catalog being created (an existing one keeps its own).
    public static func open(_ location: String, access: CatalogAccess, busyTimeout: Double = 10,
                            configuration: SignatureConfiguration = .current) throws -> any CatalogStore {
        if PostgresURL.isPostgresURL(location) {
            return try PostgresCatalog(url: location, create: access == .create, readOnly: access == .read, busyTimeout: busyTimeout,
                                       configuration: configuration)
        }
        return try Catalog(path: location, create: access == .create, readOnly: access == .read, busyTimeout: busyTimeout,
                           configuration: configuration)
    }

    /// `location` as it may be shown or logged: a server's URL without its password.
    public static func shown(_ location: String) -> String {
        PostgresURL.isPostgresURL(location) ? (try? PostgresURL(location).redacted) ?? "postgres://…" : location
    }

    /// Whether `location` is a file path (an embedded SQLite catalog) rather than a server's URL.
    public static func isFile(_ location: String) -> Bool { Catalog.urlScheme(location) == nil }
}
