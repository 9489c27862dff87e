import ArgumentParser
import EarmarkCatalogPostgres
import EarmarkKit
import Foundation

struct CatalogInitCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "init",
        abstract: "Create an empty catalog: a file, a PostgreSQL database, or a PostgreSQL catalog sharded over several servers.",
        discussion: """
        LOCATION is a file path (an SQLite catalog) or postgres://user@host:port/database (the database must \
        exist; the catalog's tables are created in it). Other commands create a missing catalog themselves \
        (`catalog add`); init is needed for a sharded one.

        With --shard URL (twice or more), the catalog is sharded by PostgreSQL: LOCATION is the coordinator, \
        which keeps the tracks, analyses and the list of index segments; the bulky tables (the index buckets, \
        by bucket, and the tracks' landmarks and peaks, by track) are hash-partitioned over the shards, each \
        partition a postgres_fdw foreign table on one shard database. Each shard database must exist and hold \
        no catalog rows; its tables are created over a direct connection. The coordinator creates the \
        postgres_fdw extension when missing (a superuser's right, once), one foreign server per shard \
        (async_capable, so a lookup asks every shard at once; the URL's sslmode and connect_timeout) and a \
        user mapping for the current user from the shard URL's user and password. Every command then works \
        on the coordinator's URL as on any catalog; a stopped shard makes it fail naming the shard (exit 2). \
        Adding a shard later means re-partitioning: copy the catalog into a new sharded one (`catalog copy`). \
        docs/postgres.md describes the layout, what an interrupted write leaves and how it is cleaned.

        With --json: {location, backend ("sqlite" or "postgres"), schemaVersion, signatureVersion, shards: \
        [{name, location}]}.

        Exit codes: 0 created; 2 not created (it exists already, a server cannot be reached, a shard holds rows).
        """
    )

    @Argument(help: ArgumentHelp("Where the catalog goes: a file path or postgres://… (default: as --catalog elsewhere).",
                                 valueName: "location"))
    var location: String?

    @Option(name: .customLong("shard"), help: ArgumentHelp("A shard's database, postgres://user:password@host:port/database (repeat for each shard).",
                                                           valueName: "url"))
    var shards: [String] = []

    @Flag(name: .long, help: "Print machine-readable JSON on standard output instead of text.")
    var json = false

    @Option(name: .customLong("lock-timeout"), help: ArgumentHelp("Seconds to wait for another process's lock.", valueName: "seconds"))
    var lockTimeout: Double = 30

    func validate() throws {
        guard lockTimeout.isFinite, lockTimeout >= 0 else { throw ValidationError("--lock-timeout must be a number of seconds ≥ 0.") }
        let target = location.flatMap { $0.isEmpty ? nil : $0 } ?? Catalog.defaultPath
        if !shards.isEmpty, CatalogStores.isFile(target) {
            throw ValidationError("--shard needs a postgres:// coordinator, not a file.")
        }
        if let bad = shards.first(where: { !PostgresURL.isPostgresURL($0) }) {
            throw ValidationError("--shard \(bad): a shard is a postgres:// URL.")
        }
        if shards.count == 1 { throw ValidationError("one --shard is not sharding: give two or more, or none for a one-server catalog.") }
    }

    mutating func run() async throws {
        let (json, lockTimeout, shards) = (json, lockTimeout, shards)
        let location = ((location.flatMap { $0.isEmpty ? nil : $0 } ?? Catalog.defaultPath) as NSString).expandingTildeInPath
        try await reportingErrors {
            let report: InitReport
            if CatalogStores.isFile(location) {
                if FileManager.default.fileExists(atPath: location) { throw CLIError("\(location) exists already") }
                let catalog = try Catalog(path: location, create: true, busyTimeout: lockTimeout)
                let s = try catalog.stats()
                report = InitReport(location: catalog.location, backend: "sqlite", schemaVersion: s.schemaVersion,
                                    signatureVersion: s.signatureVersion, shards: [])
            } else {
                let catalog: PostgresCatalog
                if shards.isEmpty {
                    if let existing = try? PostgresCatalog(url: location, readOnly: true, busyTimeout: lockTimeout) {
                        throw CLIError("\(existing.location) holds a catalog already")
                    }
                    catalog = try PostgresCatalog(url: location, create: true, busyTimeout: lockTimeout)
                } else {
                    catalog = try PostgresCatalog.create(url: location, shards: shards, busyTimeout: lockTimeout)
                }
                let s = try catalog.stats()
                report = InitReport(location: catalog.location, backend: "postgres", schemaVersion: s.schemaVersion,
                                    signatureVersion: s.signatureVersion, shards: catalog.shards)
            }
            if json {
                try printJSON(report)
            } else {
                print("\(report.location): created an empty catalog (schema \(report.schemaVersion), signature algorithm \(report.signatureVersion))"
                      + (report.shards.isEmpty ? "" : ", sharded over \(report.shards.count) servers:"))
                for s in report.shards { print("  \(s.name): \(s.location)") }
            }
        }
    }
}

struct InitReport: Encodable {
    var location: String
    var backend: String
    var schemaVersion: Int
    var signatureVersion: Int
    var shards: [PostgresShard]
}
