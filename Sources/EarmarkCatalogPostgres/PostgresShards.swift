import EarmarkCatalog
import EarmarkSignature
import Foundation
import PostgresNIO

// Sharding by PostgreSQL (issue 19, point 3): the bulky tables of a catalog (index buckets, track landmarks and peaks)
// are hash-partitioned tables on the coordinator whose partitions are postgres_fdw foreign tables on the shard
// servers; tracks, analyses, the segment list and catalog_info stay on the coordinator. The store sends its usual
// statements to the coordinator. docs/postgres.md ("Sharding") describes the layout and its visibility rules.

/// One shard of a sharded ``PostgresCatalog``: a `postgres_fdw` foreign server on the coordinator.
public struct PostgresShard: Sendable, Equatable, Codable {
    /// The foreign server's name on the coordinator (`earmark_shard_1`, …).
    public var name: String
    /// Where it is: `host:port/database` as the foreign server's options say.
    public var location: String
}

extension PostgresCatalog {
    /// The advisory lock adds take shared and orphan cleanup exclusive ("ERMKADD1"), so that a cleanup never takes the
    /// shard rows of an add whose coordinator commit is still to come for orphans.
    static let addLock: Int64 = 0x4552_4D4B_4144_4431

    /// Creates a sharded catalog: its bulky tables (index buckets by bucket, track landmarks and peaks by track id)
    /// hash-partitioned over `shards`, each partition a `postgres_fdw` foreign table on one shard server; tracks,
    /// analyses and the index segment list on the coordinator `url`. Each shard database must exist; the store creates
    /// its tables there (refusing a shard that already holds catalog rows), then the catalog on the coordinator, where
    /// the `postgres_fdw` extension is created if missing (that needs a superuser or a trusted-extension owner once).
    /// The coordinator reaches each shard with a user mapping for the current user, from the shard URL's user and
    /// password; its sslmode and connect_timeout go to the foreign server's options.
    /// - Throws: ``CatalogError/Code/invalidArgument`` when the coordinator already holds a catalog or a shard is given twice.
    public static func create(url: String, shards: [String], busyTimeout: Double = 10,
                              configuration: SignatureConfiguration = .current) throws -> PostgresCatalog {
        let targets = try shards.map { try PostgresURL($0) }
        var seen = Set<String>()
        for t in targets where !seen.insert(t.endpoint + "/" + t.database).inserted {
            throw CatalogError(.invalidArgument, "shard \(t.redacted) is given twice", path: t.redacted)
        }
        if let coordinator = try? PostgresURL(url), seen.contains(coordinator.endpoint + "/" + coordinator.database) {
            throw CatalogError(.invalidArgument, "the coordinator \(coordinator.redacted) cannot be its own shard", path: coordinator.redacted)
        }
        for t in targets { try prepareShard(t) }
        return try PostgresCatalog(url: url, create: true, readOnly: false, busyTimeout: busyTimeout, configuration: configuration,
                                   shards: targets)
    }

    /// The statements that create a shard's tables (the partitions' remote sides, with their primary keys).
    static let shardTables = [
        "CREATE TABLE IF NOT EXISTS track_landmarks(track_id bigint PRIMARY KEY, data bytea NOT NULL)",
        "CREATE TABLE IF NOT EXISTS track_peaks(track_id bigint PRIMARY KEY, data bytea NOT NULL)",
        """
        CREATE TABLE IF NOT EXISTS index_buckets(segment bigint NOT NULL, bucket integer NOT NULL, data bytea NOT NULL,
          PRIMARY KEY (segment, bucket))
        """,
    ]

    /// Creates a shard's tables over a direct connection; refuses a shard whose tables hold rows.
    static func prepareShard(_ target: PostgresURL) throws {
        var logger = Logger(label: "earmark.catalog.postgres")
        logger.logLevel = .critical
        let (connection, server) = try connect(target, writer: true, logger: logger, location: target.redacted)
        defer { try? connection.close().wait() }
        func run(_ sql: String) throws -> [PostgresRow] {
            do {
                return try connection.query(PostgresQuery(unsafeSQL: sql), logger: logger).wait().rows
            } catch {
                throw describe(error, target: server, location: target.redacted, connecting: false)
            }
        }
        _ = try run("SET client_min_messages = warning")
        for sql in shardTables { _ = try run(sql) }
        let used = try run("""
            SELECT EXISTS (SELECT 1 FROM track_landmarks) OR EXISTS (SELECT 1 FROM track_peaks) OR EXISTS (SELECT 1 FROM index_buckets)
            """)
        if (try used.first?.decode(Bool.self)) == true {
            throw CatalogError(.invalidArgument, "shard \(target.redacted) already holds a catalog's rows; give each catalog empty shard databases",
                               path: target.redacted)
        }
    }

    /// A SQL string literal.
    static func literal(_ s: String) -> String { "'" + s.replacingOccurrences(of: "'", with: "''") + "'" }

    /// The statements that make a new catalog (migrated to the current schema in the same transaction) sharded over
    /// `shards`: the foreign servers and user mappings, then the bulky tables replaced by partitioned ones. In sharded
    /// catalogs a track's `indexed` flag is a column of `tracks` (on the coordinator, committed last), not of
    /// `track_landmarks`.
    static func shardingStatements(_ shards: [PostgresURL]) -> [String] {
        var out = ["CREATE EXTENSION IF NOT EXISTS postgres_fdw"]
        for (i, s) in shards.enumerated() {
            let name = "earmark_shard_\(i + 1)"
            // libpq's lists: several servers of a shard (its primary and standbys) are tried in order.
            let hosts = s.endpoints.map { e in
                switch e.host {
                case .tcp(let h): h
                case .socket(let folder): folder
                }
            }
            var options: [(String, String)] = [("host", hosts.joined(separator: ",")),
                                               ("port", s.endpoints.map { String($0.port) }.joined(separator: ","))]
            if s.sessionAttributes != .any { options.append(("target_session_attrs", s.sessionAttributes.rawValue)) }
            options += [("dbname", s.database), ("sslmode", s.sslMode.rawValue),
                        ("connect_timeout", String(max(1, Int(s.connectTimeout.rounded())))), ("application_name", "earmark-coordinator"),
                        // One lookup fans out to every shard at once; big fetches, batched inserts.
                        ("async_capable", "true"), ("fetch_size", "10000"), ("batch_size", "1000")]
            out.append("CREATE SERVER \(name) FOREIGN DATA WRAPPER postgres_fdw OPTIONS ("
                       + options.map { "\($0.0) \(literal($0.1))" }.joined(separator: ", ") + ")")
            var mapping = [("user", s.user)]
            if let pw = s.password { mapping.append(("password", pw)) }
            out.append("CREATE USER MAPPING FOR CURRENT_USER SERVER \(name) OPTIONS ("
                       + mapping.map { "\($0.0) \(literal($0.1))" }.joined(separator: ", ") + ")")
        }
        out += [
            "DROP TABLE track_landmarks, track_peaks, index_buckets",
            "ALTER TABLE tracks ADD COLUMN indexed boolean NOT NULL DEFAULT false",
            "CREATE INDEX tracks_pending ON tracks(id) WHERE NOT indexed",
            "CREATE TABLE track_landmarks(track_id bigint NOT NULL, data bytea NOT NULL) PARTITION BY HASH (track_id)",
            "CREATE TABLE track_peaks(track_id bigint NOT NULL, data bytea NOT NULL) PARTITION BY HASH (track_id)",
            "CREATE TABLE index_buckets(segment bigint NOT NULL, bucket integer NOT NULL, data bytea NOT NULL) PARTITION BY HASH (bucket)",
        ]
        for table in ["track_landmarks", "track_peaks", "index_buckets"] {
            for i in shards.indices {
                out.append("""
                    CREATE FOREIGN TABLE \(table)_\(i + 1) PARTITION OF \(table) FOR VALUES WITH (MODULUS \(shards.count), REMAINDER \(i))
                    SERVER earmark_shard_\(i + 1) OPTIONS (table_name '\(table)')
                    """)
            }
        }
        out.append("INSERT INTO catalog_info(key, value) VALUES ('shards', '\(shards.count)')")
        return out
    }

    /// Reads the shards of a sharded catalog from the coordinator's foreign servers.
    func loadShards() throws -> [PostgresShard] {
        guard try info()["shards"] != nil else { return [] }
        return try foreignServers().map { name, o, _ in
            // libpq's lists (a shard's primary and standbys): one port for all hosts, or one each.
            let hosts = (o["host"] ?? "?").split(separator: ",", omittingEmptySubsequences: false).map(String.init)
            let ports = (o["port"] ?? "5432").split(separator: ",", omittingEmptySubsequences: false).map(String.init)
            let endpoints = hosts.enumerated().map { i, host in
                let port = Int(ports.count == hosts.count ? ports[i] : ports.first ?? "") ?? 5432
                return PostgresURL.Endpoint(host: host.hasPrefix("/") ? .socket(folder: host) : .tcp(host), port: port).description
            }
            return PostgresShard(name: name, location: "\(endpoints.joined(separator: ","))/\(o["dbname"] ?? "?")")
        }
    }

    /// The shards' foreign servers on the coordinator, in shard order: each one's name, its options (host, port,
    /// dbname, …) and the options of the current user's mapping of it (user, password; empty without one).
    func foreignServers() throws -> [(name: String, server: [String: String], mapping: [String: String])] {
        func options(_ text: String?) -> [String: String] {
            var o: [String: String] = [:]
            for part in (text ?? "").split(separator: "\u{1}") {
                guard let eq = part.firstIndex(of: "=") else { continue }
                o[String(part[..<eq])] = String(part[part.index(after: eq)...])
            }
            return o
        }
        return try run("""
            SELECT s.srvname::text, array_to_string(s.srvoptions, chr(1)), array_to_string(u.umoptions, chr(1))
            FROM pg_foreign_server s LEFT JOIN pg_user_mappings u ON u.srvid = s.oid AND u.usename = current_user
            WHERE s.srvname LIKE 'earmark\\_shard\\_%' ORDER BY length(s.srvname), s.srvname
            """).map { row in
            let (name, server, mapping) = try decode(row, (String, String?, String?).self, "a shard's foreign server")
            return (name, options(server), options(mapping))
        }
    }

    /// An error of a statement on a sharded catalog, naming the shard when the server names its foreign server, else
    /// listing the shards (a shard that went away mid-statement is reported by its remote SQL only). `rawMessage`:
    /// the server's SQLSTATE, message, detail and context, in that order.
    func shardError(_ e: CatalogError, rawMessage: String) -> CatalogError {
        guard !shards.isEmpty, e.code != .locked else { return e }
        // SQLSTATE class 08 (connection exception): the shard cannot be reached now (``CatalogError/Code/unavailable``).
        let lost = rawMessage.hasPrefix("08") || ["could not connect", "connection"].contains { rawMessage.contains($0) }
        if let s = shards.first(where: { rawMessage.contains("\"\($0.name)\"") }) {
            return CatalogError(lost ? .unavailable : .ioError, "shard \(s.name) at \(s.location) cannot be used: \(e.message)", path: location)
        }
        // Or postgres_fdw's context naming the remote statement.
        guard lost || rawMessage.contains("remote SQL") else { return e }
        return CatalogError(lost ? .unavailable : .ioError,
                            "\(e.message) (one of the shards: \(shards.map { "\($0.name) at \($0.location)" }.joined(separator: ", ")))",
                            path: location)
    }

    /// Deletes what an interrupted write left on the shards that no query reads: landmarks and peaks of tracks that
    /// have no `tracks` row (an add whose coordinator commit did not happen), and, with `buckets`, the buckets of
    /// segments that no longer exist (a flush whose coordinator commit did not happen, or segments merged away).
    /// Leaves the work when an add or an index writer is busy (it is done next time). Returns the rows deleted.
    /// A catalog that is not sharded has nothing to clean (its rows reference their track or segment).
    @discardableResult
    public func removeOrphans() throws -> Int {
        try refuseIfReadOnly()
        return try removeOrphans(buckets: true)
    }

    func removeOrphans(buckets: Bool) throws -> Int {
        guard !shards.isEmpty, !readOnly else { return 0 }
        return try transaction { () throws -> Int in
            for lock in buckets ? [PostgresCatalog.addLock, PostgresCatalog.indexLock] : [PostgresCatalog.addLock] {
                let row = try run("SELECT pg_try_advisory_xact_lock($1)", PostgresCatalog.binds { $0.append(lock) }).first
                guard try row.map({ try decode($0, Bool.self, "a lock") }) == true else { return 0 }
            }
            var deleted = 0
            if buckets { deleted += try deleteDroppedBuckets() }
            for table in ["track_landmarks", "track_peaks"] {
                let ids = try run("SELECT l.track_id FROM \(table) l WHERE NOT EXISTS (SELECT 1 FROM tracks t WHERE t.id = l.track_id)")
                    .map { try decode($0, Int64.self, "a track id") }
                guard !ids.isEmpty else { continue }
                try run("DELETE FROM \(table) WHERE track_id = ANY($1)", PostgresCatalog.binds { $0.append(ids) })
                deleted += ids.count
            }
            return deleted
        }
    }

    /// Deletes the bucket rows of segments that no longer exist; in a transaction holding the index lock.
    func deleteDroppedBuckets() throws -> Int {
        guard !shards.isEmpty else { return 0 }
        let live = try run("SELECT id FROM index_segments").map { try decode($0, Int64.self, "a segment id") }
        let binds = PostgresCatalog.binds { $0.append(live) }
        let rows = try run("SELECT count(*) FROM index_buckets WHERE NOT (segment = ANY($1))", binds)
        let n = Int(try rows.first.map { try decode($0, Int64.self, "a count") } ?? 0)
        if n > 0 { try run("DELETE FROM index_buckets WHERE NOT (segment = ANY($1))", binds) }
        return n

    }

    /// Rows of each shard's tables (landmarks, peaks, buckets), counted through the coordinator.
    public func shardRowCounts() throws -> [String: [String: Int]] {
        var out: [String: [String: Int]] = [:]
        for (i, s) in shards.enumerated() {
            for table in ["track_landmarks", "track_peaks", "index_buckets"] {
                let row = try run("SELECT count(*) FROM \(table)_\(i + 1)").first
                out[s.name, default: [:]][table] = Int(try row.map { try decode($0, Int64.self, "a count") } ?? 0)
            }
        }
        return out
    }
}
