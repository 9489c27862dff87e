import EarmarkCatalog
import EarmarkSignature
import Foundation
import PostgresNIO

/// A catalog kept in a PostgreSQL database (version 15 or later): the same tracks, peaks, landmarks and analyses as
/// ``Catalog``'s SQLite file, with the same meaning, so every ``CatalogStore`` user answers alike on both.
///
/// Each track's landmarks are one `bytea` row (the varint encoding of ``Catalog``'s pending rows), written in the
/// track's own transaction. As in ``Catalog``, tracks not yet indexed are *pending*: a lookup serves them from an
/// in-memory overlay sorted by hash, reloaded when the catalog changed (a change counter that every write transaction
/// bumps). A writer moves pending postings into immutable index *segments* (``flushIndex()``): when it has added
/// ``flushPostings`` of them, and when it closes with more than ``pendingPostings`` pending. A segment is rows of
/// buckets (`index_buckets`), each in the bit-packed encoding of a bucket of ``Catalog``'s segment files, and a lookup
/// fetches only the buckets of the hashes it asks, in one round trip; segments merge as a binary counter.
///
/// The protocol is synchronous: an instance owns one connection (postgres-nio, on the shared NIO event loop group) and
/// blocks the calling thread while it waits for the server; never call it from an event loop thread. Not thread-safe:
/// open one per task, as with ``Catalog``. Writers from several processes or machines are safe: each write is one
/// transaction, creating the schema takes an advisory lock, and an add of audio that another connection is adding at the
/// same moment waits for it and answers `.duplicate`.
public final class PostgresCatalog: CatalogStore {
    /// The schema version this build writes (`catalog_info.schema_version`).
    public static let schemaVersion = 2
    /// The advisory lock key that serializes migrations ("ERMKCAT1").
    static let migrationLock: Int64 = 0x4552_4D4B_4341_5431

    /// Where the catalog is: the URL without its password.
    public let location: String
    /// The signature algorithm of the catalog: the one asked for, or, when the default was asked for, whichever
    /// released version the catalog was built with.
    public private(set) var configuration: SignatureConfiguration
    /// The parsed URL, narrowed to the server connected to (the first of its servers that answered and suited).
    public let target: PostgresURL
    let readOnly: Bool
    private let connection: PostgresConnection
    let logger: Logger
    /// The segments, removed tracks and pending postings lookups use, as of a change counter.
    var indexState: IndexState?
    /// This catalog's number in the process's ``BucketCache`` (read at the first lookup).
    var bucketCacheNumber: Int32?
    /// Whether lookups keep the index buckets they fetch in the process's cache and read them from there again
    /// (`EARMARK_PG_CACHE_MB` bounds it; docs/postgres.md). A bucket never changes once written, so the cache is
    /// always right; turn it off only to see buckets changed in place on the server (damage tests). Default true.
    public var cachesBuckets = true
    /// Index buckets this store's lookups asked the server for, and found in the process's cache (for tests).
    package internal(set) var bucketReads: (server: Int, cache: Int) = (0, 0)
    private var countedTracks: (count: Int, version: Int64)?
    /// The schema version of the catalog on the server (older than ``schemaVersion`` when opened read-only).
    var schema = 0
    /// The shards of a sharded catalog (``create(url:shards:busyTimeout:configuration:)``); empty for a one-server catalog.
    public private(set) var shards: [PostgresShard] = []
    /// How lookups read a sharded catalog's buckets (default ``ShardLookupRoute/standard``).
    public var shardLookupRoute = ShardLookupRoute.standard
    /// The shards' reading connections of the direct route (opened at its first lookup).
    var shardReaders: [ShardReader]?
    /// Shards to create the catalog over (only while a new sharded catalog is being created).
    private var creatingShards: [PostgresURL] = []
    /// Postings this connection added and has not indexed.
    var unflushed = 0
    /// Pending postings that make a writer move them into an index segment (as ``Catalog/flushPostings``; also the
    /// size of the batches ``flushIndex()`` works in). Default 16 million.
    public var flushPostings = 16_000_000
    /// Pending postings a writer leaves pending when it closes (``close()``): above this, they move into a segment
    /// (as ``Catalog/inFilePostings``). Default 1 million (about 7 h of audio).
    public var pendingPostings = 1_000_000
    /// Seconds a query's reads (index buckets, tracks by id, a track's peaks) may wait for their answer. A shard that
    /// hangs without closing its connections holds the coordinator's statement forever; past this the connection
    /// is closed and the read fails as ``CatalogError/Code/unavailable`` (the next connection may do better).
    /// Default 30.
    public var readTimeout: Double = 30

    /// Opens (or creates) the catalog in the database `url` names (`postgres://user@host:port/db`, see ``PostgresURL``).
    /// The database itself must exist; the catalog's tables are created in it when `create` is set.
    /// - Parameters:
    ///   - create: create the catalog's tables when the database has none; otherwise such a database is ``CatalogError/Code/notFound``.
    ///   - readOnly: open without write access (the session's transactions are read-only).
    ///   - busyTimeout: seconds to wait for another connection's locks (PostgreSQL's `lock_timeout`) before ``CatalogError/Code/locked``.
    public convenience init(url: String, create: Bool = false, readOnly: Bool = false, busyTimeout: Double = 10,
                            configuration: SignatureConfiguration = .current) throws {
        try self.init(url: url, create: create, readOnly: readOnly, busyTimeout: busyTimeout, configuration: configuration, shards: [])
    }

    init(url: String, create: Bool, readOnly: Bool, busyTimeout: Double, configuration: SignatureConfiguration,
         shards: [PostgresURL]) throws {
        let given = try PostgresURL(url)
        self.location = given.redacted
        self.configuration = configuration
        self.readOnly = readOnly
        var logger = Logger(label: "earmark.catalog.postgres")
        logger.logLevel = .critical
        self.logger = logger
        (connection, target) = try PostgresCatalog.connect(given, writer: !readOnly, logger: logger, location: given.redacted)
        creatingShards = shards
        do {
            let ms = max(1, Int((max(0, min(busyTimeout, 86_400)) * 1000).rounded()))
            try run("SET lock_timeout = \(ms)")
            try run("SET client_min_messages = warning")
            // A lookup joins thousands of distinct (segment, bucket) pairs with the index by key; a Memoize node over
            // that join caches none of them and took as long again as the probes (37,000 pairs: 125 ms, 67 without).
            try run("SET enable_memoize = off")
            if readOnly { try run("SET default_transaction_read_only = on") }
            try openSchema(create: create)
            creatingShards = []
            self.shards = try loadShards()
        } catch {
            disconnect()
            throw error
        }
    }

    // postgres-nio requires a connection to be closed before it is released.
    deinit {
        try? close()
        disconnect()
    }

    /// Closes the connection to the server (waiting for it); the instance is unusable afterwards.
    public func disconnect() {
        closeShardReaders()
        let closing: EventLoopFuture<Void> = connection.close()
        try? closing.wait()
    }

    /// Connects to the first of `target`'s servers that answers and has the session attributes it asks for; a writer
    /// given several servers and no attributes takes the first that is not a standby (after a standby's promotion the
    /// same URL finds the new primary). Returns the connection and the URL narrowed to that server. With one server,
    /// its own error; with several, one that names each server's (``CatalogError/Code/unavailable`` when one of them
    /// could not be reached, so that a caller tries again later).
    static func connect(_ target: PostgresURL, writer: Bool, logger: Logger,
                        location: String) throws -> (PostgresConnection, PostgresURL) {
        let servers = target.servers
        var wanted = target.sessionAttributes
        if wanted == .any && writer && servers.count > 1 { wanted = .primary }
        let passes: [PostgresURL.SessionAttributes] = wanted == .preferStandby ? [.standby, .any] : [wanted]
        var failures: [CatalogError] = []
        for (pass, attributes) in passes.enumerated() {
            for server in servers {
                let connection: PostgresConnection
                do {
                    connection = try connectOne(server, logger: logger, location: location)
                } catch {
                    if pass == 0 { failures.append(describe(error, target: server, location: location, connecting: true)) }
                    continue
                }
                if attributes == .any { return (connection, server) }
                var refusal: CatalogError
                do {
                    let query = PostgresQuery(unsafeSQL: "SELECT pg_is_in_recovery(), current_setting('transaction_read_only') = 'on'")
                    let row = try connection.query(query, logger: logger).wait().rows.first
                    let (recovery, readOnly) = try row?.decode((Bool, Bool).self) ?? (false, false)
                    let at = "the PostgreSQL server at \(server.endpoint)"
                    switch attributes {
                    case .readWrite where !recovery && !readOnly, .primary where !recovery, .readOnly where recovery || readOnly,
                         .standby where recovery:
                        return (connection, server)
                    case .readWrite where !recovery:
                        refusal = CatalogError(.readOnly, "\(at) takes no writes (transaction_read_only is on)", path: location)
                    case .readWrite, .primary:
                        refusal = CatalogError(.readOnly, "\(at) is a standby (in recovery)", path: location)
                    default:
                        refusal = CatalogError(.unavailable, "\(at) is not a standby (target_session_attrs=\(attributes.rawValue))", path: location)
                    }
                } catch {
                    refusal = describe(error, target: server, location: location, connecting: false)
                }
                try? connection.close().wait()
                if pass == 0 { failures.append(refusal) }
            }
        }
        if failures.count == 1, let only = failures.first { throw only }
        let code: CatalogError.Code = failures.contains { $0.code == .unavailable } ? .unavailable : failures.first?.code ?? .unavailable
        throw CatalogError(code, "none of the PostgreSQL servers \(target.endpoint) can be used (\(writer ? "for writing" : "target_session_attrs=\(wanted.rawValue)")): "
                           + failures.map(\.message).joined(separator: "; "), path: location)
    }

    private static func connectOne(_ target: PostgresURL, logger: Logger, location: String) throws -> PostgresConnection {
        var config: PostgresConnection.Configuration
        switch target.host {
        case .socket(let folder):
            config = .init(unixSocketPath: "\(folder)/.s.PGSQL.\(target.port)", username: target.user, password: target.password,
                           database: target.database)
        case .tcp(let host):
            let tls: PostgresConnection.Configuration.TLS
            do {
                var tlsConfig = TLSConfiguration.makeClientConfiguration()
                switch target.sslMode {
                case .disable: tls = .disable
                case .prefer, .require:
                    tlsConfig.certificateVerification = .none
                    let context = try NIOSSLContext(configuration: tlsConfig)
                    tls = target.sslMode == .prefer ? .prefer(context) : .require(context)
                case .verifyCA:
                    tlsConfig.certificateVerification = .noHostnameVerification
                    tls = .require(try NIOSSLContext(configuration: tlsConfig))
                case .verifyFull:
                    tls = .require(try NIOSSLContext(configuration: tlsConfig))
                }
            } catch {
                throw CatalogError(.ioError, "cannot set up TLS for \(target.endpoint): \(error)", path: location)
            }
            config = .init(host: host, port: target.port, username: target.user, password: target.password,
                           database: target.database, tls: tls)
        }
        config.options.connectTimeout = .milliseconds(Int64(target.connectTimeout * 1000))
        let future = PostgresConnection.connect(on: MultiThreadedEventLoopGroup.singleton.next(), configuration: config, id: 1,
                                                logger: logger)
        do {
            return try future.wait()
        } catch {
            throw PostgresCatalog.describe(error, target: target, location: location, connecting: true)
        }
    }

    // MARK: Talking to the server

    /// Runs one statement and returns its rows (all of them, in memory).
    /// `deadline`: seconds to wait for the answer (see ``readTimeout``); nil: as long as it takes.
    @discardableResult
    func run(_ sql: String, _ binds: PostgresBindings = PostgresBindings(), deadline: Double? = nil) throws -> [PostgresRow] {
        guard !connection.isClosed else { throw closedError() }
        do {
            return try answer(connection.query(PostgresQuery(unsafeSQL: sql, binds: binds), logger: logger), deadline: deadline).rows
        } catch let e as CatalogError {
            throw e
        } catch {
            let described = PostgresCatalog.describe(error, target: target, location: location, connecting: false)
            guard !shards.isEmpty else { throw described }
            var raw = String(reflecting: error)
            if let e = error as? PSQLError, let info = e.serverInfo {
                raw = [info[.sqlState], info[.message], info[.detail], info[.locationContext]].compactMap { $0 }.joined(separator: " ")
            }
            throw shardError(described, rawMessage: raw)
        }
    }

    /// The error of a query on a closed connection to the server at `endpoint` (this store's, when nil).
    func closedError(_ endpoint: String? = nil) -> CatalogError {
        CatalogError(.unavailable, "the connection to the PostgreSQL server at \(endpoint ?? target.endpoint) is closed (server stopped or restarted?)",
                     path: location)
    }

    /// Waits for `future`. A query sent just as the server closed the connection can stay unanswered (seen with
    /// postgres-nio 1.33.2 after the server stopped), so a wait that outlasts the connection by a second gives up.
    private func answer<T: Sendable>(_ future: EventLoopFuture<T>, deadline: Double? = nil) throws -> T {
        let waiting = shards.isEmpty ? "" : " (a shard that does not answer holds up the coordinator: \(shards.map(\.location).joined(separator: ", ")))"
        return try wait(for: future, on: connection, endpoint: target.endpoint, deadline: deadline, waiting: waiting)
    }

    /// ``answer(_:deadline:)`` for a query on `connection` (this store's, or a shard reader's) to the server at
    /// `endpoint`; past the deadline the connection is closed. `waiting`: what the message adds about the wait.
    func wait<T: Sendable>(for future: EventLoopFuture<T>, on connection: PostgresConnection, endpoint: String,
                           deadline: Double?, waiting: String = "") throws -> T {
        let done = DispatchSemaphore(value: 0)
        future.whenComplete { _ in done.signal() }
        let start = DispatchTime.now()
        while done.wait(timeout: .now() + min(1, deadline ?? 1)) == .timedOut {
            if connection.isClosed {
                guard done.wait(timeout: .now() + 1) == .success else { throw closedError(endpoint) }
                break
            }
            if let deadline, Double(DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1e9 >= deadline {
                try? connection.close().wait()
                throw CatalogError(.unavailable, "the PostgreSQL server at \(endpoint) did not answer within \(deadline) s\(waiting); the connection is closed", path: location)
            }
        }
        return try future.wait()
    }

    /// Runs `body` in one transaction; rolls it back when `body` throws.
    func transaction<T>(_ begin: String = "BEGIN", _ body: () throws -> T) throws -> T {
        try run(begin)
        do {
            let result = try body()
            try run("COMMIT")
            return result
        } catch {
            _ = try? run("ROLLBACK")
            throw error
        }
    }

    /// Decodes a row's columns; a row that cannot be what this build wrote is ``CatalogError/Code/damaged``.
    func decode<each C: PostgresDecodable>(_ row: PostgresRow, _ types: (repeat each C).Type, _ what: @autoclosure () -> String) throws -> (repeat each C) {
        do {
            return try row.decode(types)
        } catch {
            throw damaged("\(what()) cannot be read (\(error))")
        }
    }

    /// ``decode(_:_:_:)`` of a single column.
    func decode<C: PostgresDecodable>(_ row: PostgresRow, _ type: C.Type, _ what: @autoclosure () -> String) throws -> C {
        do {
            return try row.decode(type)
        } catch {
            throw damaged("\(what()) cannot be read (\(error))")
        }
    }

    /// The error for stored data that cannot be what this build wrote.
    func damaged(_ what: String) -> CatalogError {
        CatalogError(.damaged, "damaged catalog: \(what); run `earmark catalog check`", path: location)
    }

    func refuseIfReadOnly() throws {
        if readOnly { throw CatalogError(.readOnly, "catalog opened read-only", path: location) }
    }

    /// A ``CatalogError`` for an error of postgres-nio or the server, naming the server.
    static func describe(_ error: any Error, target: PostgresURL, location: String, connecting: Bool) -> CatalogError {
        if let e = error as? CatalogError { return e }
        let at = target.endpoint
        if let e = error as? PSQLError {
            if e.code == .server, let info = e.serverInfo {
                let state = info[.sqlState] ?? "", message = info[.message] ?? "server error"
                let code: CatalogError.Code
                switch state {
                case "55P03", "40001", "40P01": code = .locked
                case "25006", "42501": code = .readOnly
                case "3D000": code = .notFound
                case "42P07", "42P01", "42703": code = .damaged
                default: code = .ioError
                }
                let what = state == "3D000" ? "no database \(target.database) on the PostgreSQL server at \(at) (create it, e.g. `createdb`): \(message)"
                    : code == .damaged ? "not an Earmark catalog, or a damaged one: the database's tables are not what this build wrote (PostgreSQL server at \(at): \(message))"
                    : state == "55P03" ? "another connection holds a lock longer than the busy timeout (PostgreSQL server at \(at): \(message))"
                    : "PostgreSQL server at \(at): \(message) (SQLSTATE \(state))"
                return CatalogError(code, what, path: location)
            }
            if e.code == .authMechanismRequiresPassword {
                return CatalogError(.ioError, "the PostgreSQL server at \(at) asks user \(target.user) for a password: give it in the URL, PGPASSWORD or ~/.pgpass", path: location)
            }
            let cause = e.underlying.map { ": \($0)" } ?? ""
            if connecting {
                return CatalogError(.unavailable, "cannot connect to the PostgreSQL server at \(at): \(e.code)\(cause)", path: location)
            }
            if e.code == .connectionError || e.code == .uncleanShutdown || e.code == .sslUnsupported || e.code == .failedToAddSSLHandler {
                return CatalogError(.unavailable, "lost the connection to the PostgreSQL server at \(at)\(cause)", path: location)
            }
            if e.code == .serverClosedConnection || e.code == .clientClosedConnection {
                return CatalogError(.unavailable, "the connection to the PostgreSQL server at \(at) is closed (server stopped or restarted?)\(cause)", path: location)
            }
            return CatalogError(.ioError, "PostgreSQL server at \(at): \(e.code)\(cause)", path: location)
        }
        if error is PostgresDecodingError {
            return CatalogError(.damaged, "damaged catalog: a row from the PostgreSQL server at \(at) cannot be read (\(error)); run `earmark catalog check`", path: location)
        }
        return CatalogError(connecting ? .unavailable : .ioError,
                            connecting ? "cannot connect to the PostgreSQL server at \(at): \(error)" : "PostgreSQL server at \(at): \(error)", path: location)
    }

    static func binds(_ values: (inout PostgresBindings) throws -> Void) rethrows -> PostgresBindings {
        var b = PostgresBindings()
        try values(&b)
        return b
    }

    // MARK: Schema

    /// Numbered migrations: the SQL statements of each schema version.
    static let migrations: [(version: Int, statements: [String])] = [
        (1, [
            "CREATE TABLE catalog_info(key text PRIMARY KEY, value text NOT NULL)",
            // One row: bumped by every write transaction, so readers know when to reload what they hold.
            "CREATE TABLE catalog_state(id integer PRIMARY KEY CHECK (id = 1), changes bigint NOT NULL)",
            "INSERT INTO catalog_state VALUES (1, 0)",
            """
            CREATE TABLE tracks(
              id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
              title text, artist text, album text,
              metadata jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(metadata) = 'object'),
              duration double precision NOT NULL,
              source_path text, source_size bigint, source_mtime double precision,
              content_hash text NOT NULL UNIQUE,
              landmark_count bigint NOT NULL,
              added_at text NOT NULL)
            """,
            "CREATE INDEX tracks_source ON tracks(source_path)",
            "CREATE TABLE track_landmarks(track_id bigint PRIMARY KEY REFERENCES tracks(id) ON DELETE CASCADE, data bytea NOT NULL)",
            "CREATE TABLE track_peaks(track_id bigint PRIMARY KEY REFERENCES tracks(id) ON DELETE CASCADE, data bytea NOT NULL)",
            // json, not jsonb: an analysis is given back byte for byte as it was stored, as the SQLite store does.
            """
            CREATE TABLE track_analysis(
              track_id bigint NOT NULL REFERENCES tracks(id) ON DELETE CASCADE, kind text NOT NULL,
              version integer NOT NULL, data json NOT NULL, PRIMARY KEY (track_id, kind))
            """,
        ]),
        // The large-catalog layout: tracks already in the catalog stay pending until a writer indexes them.
        (2, [
            "ALTER TABLE track_landmarks ADD COLUMN indexed boolean NOT NULL DEFAULT false",
            "CREATE INDEX track_landmarks_pending ON track_landmarks(track_id) WHERE NOT indexed",
            """
            CREATE TABLE index_segments(
              id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
              key_bits integer NOT NULL, bucket_bits integer NOT NULL, track_bits integer NOT NULL,
              first_track bigint NOT NULL, last_track bigint NOT NULL, postings bigint NOT NULL)
            """,
            """
            CREATE TABLE index_buckets(
              segment bigint NOT NULL REFERENCES index_segments(id) ON DELETE CASCADE, bucket integer NOT NULL,
              data bytea NOT NULL, PRIMARY KEY (segment, bucket))
            """,
            // Tracks removed while their postings are in a segment: lookups skip them, merges drop them.
            "CREATE TABLE index_removed(track_id bigint PRIMARY KEY)",
        ]),
    ]

    private func hasInfoTable() throws -> Bool {
        // pg_class through SQL, not to_regclass: that reads the backend's catalog cache, which after waiting for the
        // advisory lock does not yet know the table another connection has just created.
        let rows = try run("""
            SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                           WHERE c.relname = 'catalog_info' AND n.nspname = current_schema())
            """)
        return try rows.first.map { try decode($0, Bool.self, "the catalog's tables") } ?? false
    }

    func info() throws -> [String: String] {
        var out: [String: String] = [:]
        for row in try run("SELECT key, value FROM catalog_info") {
            let (k, v) = try decode(row, (String, String).self, "catalog_info")
            out[k] = v
        }
        return out
    }

    private func openSchema(create: Bool) throws {
        if !readOnly, let row = try run("SELECT pg_is_in_recovery()").first, try decode(row, Bool.self, "pg_is_in_recovery()") {
            throw CatalogError(.readOnly, "the PostgreSQL server at \(target.endpoint) is a standby (in recovery): it can only be read; write to its primary, or promote it",
                               path: location)
        }
        let exists = try hasInfoTable()
        if !exists {
            guard create, !readOnly else {
                throw CatalogError(.notFound, "no catalog in database \(target.database) on \(target.endpoint); build one with `earmark catalog add`", path: location)
            }
        }
        if !readOnly { try migrate() }
        let info = try self.info()
        try checkFormat(info)
        schema = info["schema_version"].flatMap(Int.init) ?? 0
        let sigVersion = info["signature_version"].flatMap(Int.init) ?? -1
        if sigVersion != Int(configuration.version), configuration == .current,
           let released = UInt16(exactly: sigVersion).flatMap(SignatureConfiguration.released(version:)) {
            configuration = released
        }
        guard sigVersion == Int(configuration.version) else {
            throw CatalogError(.versionMismatch,
                               "catalog was built with signature algorithm \(sigVersion); this build uses \(configuration.version). Build a new catalog from the source files",
                               path: location)
        }
    }

    /// Refuses a `catalog_info` that is not an Earmark catalog's, or one of a newer schema.
    private func checkFormat(_ info: [String: String]) throws {
        guard info["format"] == "earmark-catalog" else {
            throw CatalogError(.damaged, "not an Earmark catalog (catalog_info says format \(info["format"] ?? "nothing"))", path: location)
        }
        guard let schema = info["schema_version"].flatMap(Int.init) else {
            throw CatalogError(.damaged, "not an Earmark catalog (catalog_info has no schema version)", path: location)
        }
        guard schema <= PostgresCatalog.schemaVersion else {
            throw CatalogError(.versionMismatch, "catalog schema \(schema) is newer than this build (\(PostgresCatalog.schemaVersion)); upgrade Earmark", path: location)
        }
    }

    /// Runs the migrations the database lacks, in one transaction under an advisory lock, so that two processes
    /// creating or upgrading the catalog at once take turns (the second finds the work done).
    private func migrate() throws {
        try transaction {
            try run("SELECT pg_advisory_xact_lock($1)", PostgresCatalog.binds { $0.append(PostgresCatalog.migrationLock) })
            var version = 0
            if try hasInfoTable() {
                let info = try self.info()
                try checkFormat(info)
                version = Int(info["schema_version"] ?? "") ?? 0
            }
            if !creatingShards.isEmpty, version > 0 {
                throw CatalogError(.invalidArgument, "database \(target.database) on \(target.endpoint) already holds a catalog; shard a new one (catalog copy moves tracks)", path: location)
            }
            guard version < PostgresCatalog.schemaVersion else { return }
            for (target, statements) in PostgresCatalog.migrations where target > version {
                for sql in statements { try run(sql) }
                if target == 1 {
                    for (k, v) in [("format", "earmark-catalog"), ("signature_version", String(configuration.version)),
                                   ("created_at", PostgresCatalog.now())] {
                        try run("INSERT INTO catalog_info(key, value) VALUES ($1, $2)", PostgresCatalog.binds { $0.append(k); $0.append(v) })
                    }
                }
                try run("""
                    INSERT INTO catalog_info(key, value) VALUES ('schema_version', $1)
                    ON CONFLICT (key) DO UPDATE SET value = excluded.value
                    """, PostgresCatalog.binds { $0.append(String(target)) })
            }
            // A new sharded catalog: the bulky tables become partitioned over the shards (in this transaction).
            if !creatingShards.isEmpty {
                for sql in PostgresCatalog.shardingStatements(creatingShards) { try run(sql) }
            }
            try bumpChanges()
        }
    }

    func bumpChanges() throws {
        try run("UPDATE catalog_state SET changes = changes + 1")
    }

    /// The change counter: differs whenever any connection committed a write since it was read.
    func changes() throws -> Int64 {
        guard let row = try run("SELECT changes FROM catalog_state").first else { throw damaged("catalog_state has no row") }
        return try decode(row, Int64.self, "catalog_state")
    }

    static func now() -> String {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime]
        return f.string(from: Date())
    }

    // MARK: Tracks

    private static let trackColumns =
        "id, title, artist, album, metadata::text, duration, source_path, content_hash, landmark_count, added_at"

    private func readTrack(_ row: PostgresRow) throws -> Track {
        let (id, title, artist, album, meta, duration, source, hash, count, added) =
            try decode(row, (Int64, String?, String?, String?, String, Double, String?, String, Int64, String).self, "a track row")
        guard let metadata = try? JSONDecoder().decode([String: JSONValue].self, from: Data(meta.utf8)) else {
            throw damaged("track \(id)'s metadata is not a JSON object")
        }
        return Track(id: id, title: title, artist: artist, album: album, metadata: metadata, duration: duration,
                     sourcePath: source, contentHash: hash, landmarkCount: Int(count), addedAt: added)
    }

    public func tracks() throws -> [Track] {
        try run("SELECT \(PostgresCatalog.trackColumns) FROM tracks ORDER BY id").map(readTrack)
    }

    public func track(id: Int64) throws -> Track? {
        try run("SELECT \(PostgresCatalog.trackColumns) FROM tracks WHERE id = $1", PostgresCatalog.binds { $0.append(id) })
            .first.map(readTrack)
    }

    public func tracks(ids: some Collection<Int64>) throws -> [Int64: Track] {
        guard !ids.isEmpty else { return [:] }
        let rows = try run("SELECT \(PostgresCatalog.trackColumns) FROM tracks WHERE id = ANY($1)", PostgresCatalog.binds { $0.append(Array(ids)) },
                           deadline: readTimeout)
        var out: [Int64: Track] = [:]
        for row in rows {
            let t = try readTrack(row)
            out[t.id] = t
        }
        return out
    }

    public func track(contentHash: String) throws -> Track? {
        try run("SELECT \(PostgresCatalog.trackColumns) FROM tracks WHERE content_hash = $1", PostgresCatalog.binds { $0.append(contentHash) })
            .first.map(readTrack)
    }

    public func unchangedTrack(sourcePath: String, size: Int64, modified: Double) throws -> Track? {
        try run("SELECT \(PostgresCatalog.trackColumns) FROM tracks WHERE source_path = $1 AND source_size = $2 AND source_mtime = $3",
                PostgresCatalog.binds { $0.append(sourcePath); $0.append(size); $0.append(modified) }).first.map(readTrack)
    }

    public func sourceStamp(trackID: Int64) throws -> SourceStamp? {
        guard let row = try run("SELECT source_size, source_mtime FROM tracks WHERE id = $1", PostgresCatalog.binds { $0.append(trackID) }).first
        else { return nil }
        let (size, modified) = try decode(row, (Int64?, Double?).self, "track \(trackID)'s source")
        return size.map { SourceStamp(size: $0, modified: modified) }
    }

    public func trackCount() throws -> Int {
        let version = try changes()
        if let c = countedTracks, c.version == version { return c.count }
        guard let row = try run("SELECT count(*) FROM tracks").first else { return 0 }
        let n = Int(try decode(row, Int64.self, "the track count"))
        countedTracks = (n, version)
        return n
    }

    // MARK: Adding

    /// Adds a track in one transaction: the track, its landmarks (one `bytea` row), its peaks and its analyses.
    /// Identical audio (same content hash), also when another connection is adding it at this moment, is a no-op
    /// that returns the track already there.
    public func add(_ new: NewTrack, landmarks: [Landmark], peaks: [Peak], analyses: [TrackAnalysis]) throws -> CatalogAddResult {
        try refuseIfReadOnly()
        try validateAddition(new, landmarks: landmarks, peaks: peaks)
        let metaJSON = String(decoding: try JSONEncoder().encode(new.metadata), as: UTF8.self)
        let unique = Catalog.uniqueSorted(landmarks)
        let landmarkBlob = ByteBuffer(bytes: Catalog.encodeLandmarks(unique))
        let peakBlob = ByteBuffer(bytes: Catalog.encodePeaks(peaks, configuration: configuration))
        // The last analysis of each kind wins, as with SQLite's INSERT OR REPLACE.
        var byKind: [String: TrackAnalysis] = [:]
        for a in analyses { byKind[a.kind] = a }
        let kinds = byKind.values.sorted { $0.kind < $1.kind }
        enum Outcome { case added(Track), duplicate }
        let outcome: Outcome = try transaction {
            // Sharded: an orphan cleanup waits until this add has committed on the coordinator too.
            if !shards.isEmpty { try run("SELECT pg_advisory_xact_lock_shared($1)", PostgresCatalog.binds { $0.append(PostgresCatalog.addLock) }) }
            // A concurrent insert of the same content hash makes this one wait for it, then do nothing.
            let inserted = try run("""
                INSERT INTO tracks(title, artist, album, metadata, duration, source_path, source_size, source_mtime,
                                   content_hash, landmark_count, added_at)
                VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7, $8, $9, $10, $11)
                ON CONFLICT (content_hash) DO NOTHING
                RETURNING \(PostgresCatalog.trackColumns)
                """, PostgresCatalog.binds {
                    $0.append(new.title); $0.append(new.artist); $0.append(new.album); $0.append(metaJSON)
                    $0.append(new.duration); $0.append(new.sourcePath); $0.append(new.sourceSize); $0.append(new.sourceModified)
                    $0.append(new.contentHash); $0.append(Int64(unique.count)); $0.append(PostgresCatalog.now())
                })
            guard let row = inserted.first else { return .duplicate }
            let t = try readTrack(row)
            try run("INSERT INTO track_landmarks(track_id, data) VALUES ($1, $2)", PostgresCatalog.binds { $0.append(t.id); $0.append(landmarkBlob) })
            try run("INSERT INTO track_peaks(track_id, data) VALUES ($1, $2)", PostgresCatalog.binds { $0.append(t.id); $0.append(peakBlob) })
            if !kinds.isEmpty {
                try run("""
                    INSERT INTO track_analysis(track_id, kind, version, data)
                    SELECT $1, k, v, d::json FROM unnest($2::text[], $3::int8[], $4::text[]) AS a(k, v, d)
                    """, PostgresCatalog.binds {
                        $0.append(t.id); $0.append(kinds.map(\.kind)); $0.append(kinds.map { Int64($0.version) })
                        $0.append(kinds.map { String(decoding: $0.json, as: UTF8.self) })
                    })
            }
            try bumpChanges()
            return .added(t)
        }
        switch outcome {
        case .added(let t):
            unflushed += t.landmarkCount + 1
            if unflushed >= flushPostings { try flushIndex(ifMoreThan: nil, wait: false) }
            return .added(t)
        case .duplicate:
            guard let existing = try track(contentHash: new.contentHash) else {
                throw CatalogError(.ioError, "track with content hash \(new.contentHash) was removed while this one was added; add it again", path: location)
            }
            return .duplicate(existing)
        }
    }

    // MARK: Changing

    public func update(id: Int64, _ change: TrackChange) throws -> Track {
        try refuseIfReadOnly()
        return try transaction {
            guard let row = try run("SELECT \(PostgresCatalog.trackColumns) FROM tracks WHERE id = $1 FOR UPDATE",
                                    PostgresCatalog.binds { $0.append(id) }).first else {
                throw CatalogError(.noSuchTrack, "no track with id \(id)", path: location)
            }
            let t = try readTrack(row)
            if let missing = change.removingKeys.sorted().first(where: { t.metadata[$0] == nil }) {
                throw CatalogError(.invalidArgument, "track \(id) has no metadata key '\(missing)'", path: location)
            }
            var meta = change.metadata.map { t.metadata.merging($0) { _, new in new } } ?? t.metadata
            for key in change.removingKeys { meta[key] = nil }
            let metaJSON = String(decoding: try JSONEncoder().encode(meta), as: UTF8.self)
            let updated = try run("""
                UPDATE tracks SET title = $2, artist = $3, album = $4, metadata = $5::jsonb WHERE id = $1
                RETURNING \(PostgresCatalog.trackColumns)
                """, PostgresCatalog.binds {
                    $0.append(id); $0.append(change.title ?? t.title); $0.append(change.artist ?? t.artist)
                    $0.append(change.album ?? t.album); $0.append(metaJSON)
                })
            guard let u = updated.first else { throw CatalogError(.noSuchTrack, "no track with id \(id)", path: location) }
            try bumpChanges()
            return try readTrack(u)
        }
    }

    public func relink(id: Int64, sourcePath: String, size: Int64?, modified: Double?) throws -> Track {
        try refuseIfReadOnly()
        return try transaction {
            guard let row = try run("""
                UPDATE tracks SET source_path = $2, source_size = $3, source_mtime = $4 WHERE id = $1
                RETURNING \(PostgresCatalog.trackColumns)
                """, PostgresCatalog.binds { $0.append(id); $0.append(sourcePath); $0.append(size); $0.append(modified) }).first else {
                throw CatalogError(.noSuchTrack, "no track with id \(id)", path: location)
            }
            try bumpChanges()
            return try readTrack(row)
        }
    }

    /// Removes tracks and everything stored with them (their landmarks, peaks and analyses) in one transaction.
    /// Postings already in index segments are skipped by lookups from then on and dropped when their segment is next
    /// merged (``compact()`` merges them all).
    public func remove(ids: [Int64]) throws {
        let doomed = Array(Set(ids)).sorted()
        guard !doomed.isEmpty else { return }
        try refuseIfReadOnly()
        try transaction {
            // Not while a writer builds segments: it could index a track this removes.
            if schema >= 2 { try run("SELECT pg_advisory_xact_lock($1)", PostgresCatalog.binds { $0.append(PostgresCatalog.indexLock) }) }
            let found = try run("SELECT id FROM tracks WHERE id = ANY($1) FOR UPDATE", PostgresCatalog.binds { $0.append(doomed) })
            let known = Set(try found.map { try decode($0, Int64.self, "a track id") })
            if let missing = doomed.first(where: { !known.contains($0) }) {
                throw CatalogError(.noSuchTrack, "no track with id \(missing)", path: location)
            }
            if !shards.isEmpty {
                // No foreign keys across servers: the shard rows go explicitly (committed just before the tracks rows).
                try run("INSERT INTO index_removed(track_id) SELECT id FROM tracks WHERE id = ANY($1) AND indexed ON CONFLICT DO NOTHING",
                        PostgresCatalog.binds { $0.append(doomed) })
                try run("DELETE FROM track_landmarks WHERE track_id = ANY($1)", PostgresCatalog.binds { $0.append(doomed) })
                try run("DELETE FROM track_peaks WHERE track_id = ANY($1)", PostgresCatalog.binds { $0.append(doomed) })
            } else if schema >= 2 {
                try run("""
                    INSERT INTO index_removed(track_id) SELECT track_id FROM track_landmarks WHERE track_id = ANY($1) AND indexed
                    ON CONFLICT DO NOTHING
                    """, PostgresCatalog.binds { $0.append(doomed) })
            }
            try run("DELETE FROM tracks WHERE id = ANY($1)", PostgresCatalog.binds { $0.append(doomed) })
            try bumpChanges()
        }
    }

    public func setAnalysis(_ a: TrackAnalysis, trackID: Int64) throws {
        try refuseIfReadOnly()
        try transaction {
            guard try !run("SELECT 1 FROM tracks WHERE id = $1 FOR KEY SHARE", PostgresCatalog.binds { $0.append(trackID) }).isEmpty else {
                throw CatalogError(.noSuchTrack, "no track \(trackID)", path: location)
            }
            try run("""
                INSERT INTO track_analysis(track_id, kind, version, data) VALUES ($1, $2, $3, $4::json)
                ON CONFLICT (track_id, kind) DO UPDATE SET version = excluded.version, data = excluded.data
                """, PostgresCatalog.binds {
                    $0.append(trackID); $0.append(a.kind); $0.append(Int64(a.version)); $0.append(String(decoding: a.json, as: UTF8.self))
                })
            try bumpChanges()
        }
    }

    /// Ends a connection's writing: when more than ``pendingPostings`` landmarks are pending, they move into an index
    /// segment (``flushIndex()``). Errors here lose nothing: the landmarks stay pending, and the next writer indexes them.
    /// A writer of a sharded catalog then deletes what interrupted adds left on the shards (``removeOrphans()``).
    public func close() throws {
        guard !readOnly, unflushed > 0 else { return }
        unflushed = 0
        try flushIndex(ifMoreThan: pendingPostings, wait: false)
        _ = try removeOrphans(buckets: false)
    }


    public func export(to destination: String) throws {
        try Catalog.create(copyOf: self, at: destination)
    }

    public func analyses(trackID: Int64) throws -> [TrackAnalysis] {
        try run("SELECT kind, version, data::text FROM track_analysis WHERE track_id = $1 ORDER BY kind COLLATE \"C\"",
                PostgresCatalog.binds { $0.append(trackID) }).map { row in
            let (kind, version, data) = try decode(row, (String, Int32, String).self, "an analysis of track \(trackID)")
            return TrackAnalysis(kind: kind, version: Int(version), json: Data(data.utf8))
        }
    }

    // MARK: Peaks and landmarks

    /// The last frame a stored peak or posting of a track of `duration` s can have (a damaged duration is clamped).
    func lastStoredFrame(duration: Double) -> Int {
        configuration.lastFrame(duration: duration.isNaN ? 0 : min(max(0, duration), Signature.maximumDuration))
    }

    public func peaks(trackID: Int64) throws -> [(frame: UInt32, bin: UInt16)] {
        guard let row = try run("SELECT p.data, t.duration FROM track_peaks p JOIN tracks t ON t.id = p.track_id WHERE p.track_id = $1",
                                PostgresCatalog.binds { $0.append(trackID) }, deadline: readTimeout).first else { return [] }
        let (data, duration) = try decode(row, (ByteBuffer, Double).self, "track \(trackID)'s stored peaks")
        let lastFrame = lastStoredFrame(duration: duration)
        guard let peaks = data.withUnsafeReadableBytes({ Catalog.decodePeaks($0, lastFrame: lastFrame, configuration: configuration) }) else {
            throw damaged("track \(trackID)'s stored peaks are invalid")
        }
        return peaks
    }

    /// Decodes one landmarks row (track id, blob, duration), calling `body(hash, frame)`; ``CatalogError/Code/damaged`` when
    /// it cannot be what this build wrote.
    func decodeLandmarkRow(_ row: PostgresRow, _ body: (Int64, UInt32, UInt32) -> Void) throws -> Int64 {
        let (id, data, duration) = try decode(row, (Int64, ByteBuffer, Double).self, "a landmarks row")
        let lastFrame = lastStoredFrame(duration: duration)
        let whole = data.withUnsafeReadableBytes { raw in
            Catalog.decodeLandmarks(raw, lastFrame: lastFrame, hashBits: configuration.hashBits) { body(id, $0, $1) }
        }
        guard whole else { throw damaged("track \(id)'s landmarks are invalid") }
        return id
    }

    public func landmarks(ofTracks ids: Set<Int64>) throws -> [Int64: [Landmark]] {
        var out: [Int64: [Landmark]] = [:]
        guard !ids.isEmpty else { return out }
        let rows = try run("SELECT l.track_id, l.data, t.duration FROM track_landmarks l JOIN tracks t ON t.id = l.track_id WHERE l.track_id = ANY($1)",
                           PostgresCatalog.binds { $0.append(Array(ids)) })
        for row in rows {
            _ = try decodeLandmarkRow(row) { id, hash, frame in out[id, default: []].append(Landmark(hash: hash, frame: frame)) }
        }
        return out
    }

    /// Most postings a connection holds in memory for lookups (as ``Catalog``'s pending overlay).
    static let overlayLimit = 64_000_000

    // MARK: Totals and checks

    public func stats() throws -> CatalogStats {
        guard let row = try run("""
            SELECT count(*), coalesce(sum(duration), 0)::float8, coalesce(sum(landmark_count), 0)::int8,
                   (SELECT coalesce(sum(pg_total_relation_size(c)), 0)::int8 FROM unnest(ARRAY['catalog_info', 'catalog_state', 'tracks',
                     'track_landmarks', 'track_peaks', 'track_analysis'\(schema >= 2 ? ", 'index_segments', 'index_buckets', 'index_removed'" : "")]::regclass[]) AS c)
            FROM tracks
            """).first else { throw damaged("no totals") }
        let (count, duration, landmarks, bytes) = try decode(row, (Int64, Double, Int64, Int64).self, "the totals")
        let schema = try info()["schema_version"].flatMap(Int.init) ?? 0
        let hours = duration / 3600
        return CatalogStats(path: location, schemaVersion: schema, signatureVersion: Int(configuration.version),
                            trackCount: Int(count), totalDuration: duration, landmarkCount: Int(landmarks), fileBytes: bytes,
                            bytesPerHour: hours > 0 ? Double(bytes) / hours : 0)
    }

    /// Reads everything back and checks what the server sees as opaque bytes: every track's duration, peaks and
    /// landmarks decode within the track's duration and band, every track has both, each track's landmarks add up to
    /// its recorded count, and its metadata is a JSON object; every index segment's buckets decode, name tracks that
    /// exist (or were removed) at frames within their duration, and add up to the segment's posting count, and each
    /// indexed track's postings there to its landmark count. Returns the problems found (at most about 100).
    public func check() throws -> [String] {
        var out: [String] = []
        let limit = 100
        func problem(_ text: String) { if out.count < limit { out.append(text) } }
        do {
            try checkFormat(try info())
        } catch let e as CatalogError {
            return [e.message]
        }
        var lastFrames: [Int64: Int] = [:], counts: [Int64: Int] = [:]
        for row in try run("SELECT id, duration, landmark_count, metadata::text FROM tracks ORDER BY id") {
            let id: Int64, duration: Double, count: Int64, meta: String
            do { (id, duration, count, meta) = try row.decode((Int64, Double, Int64, String).self) } catch {
                problem("a track row cannot be read (\(error))")
                continue
            }
            if !(duration >= 0 && duration <= Signature.maximumDuration) { problem("track \(id): invalid duration \(duration)") }
            if (try? JSONDecoder().decode([String: JSONValue].self, from: Data(meta.utf8))) == nil { problem("track \(id): metadata is not a JSON object") }
            lastFrames[id] = lastStoredFrame(duration: duration)
            counts[id] = Int(count)
        }
        var withPeaks = Set<Int64>()
        for row in try run("SELECT track_id, data FROM track_peaks ORDER BY track_id") {
            guard let (id, data) = try? row.decode((Int64, ByteBuffer).self) else { problem("a peaks row cannot be read"); continue }
            withPeaks.insert(id)
            guard let last = lastFrames[id] else { problem("stored peaks of track \(id), which does not exist"); continue }
            if data.withUnsafeReadableBytes({ Catalog.decodePeaks($0, lastFrame: last, configuration: configuration) }) == nil {
                problem("track \(id): stored peaks are invalid (cut short, a bin outside the band or a frame past its end)")
            }
        }
        for id in lastFrames.keys.sorted() where !withPeaks.contains(id) { problem("track \(id) has no stored peaks") }
        var withLandmarks = Set<Int64>()
        for row in try run("SELECT track_id, data FROM track_landmarks ORDER BY track_id") {
            guard let (id, data) = try? row.decode((Int64, ByteBuffer).self) else { problem("a landmarks row cannot be read"); continue }
            withLandmarks.insert(id)
            guard let last = lastFrames[id] else { problem("landmarks of track \(id), which does not exist"); continue }
            var n = 0
            if !data.withUnsafeReadableBytes({ Catalog.decodeLandmarks($0, lastFrame: last, hashBits: configuration.hashBits) { _, _ in n += 1 } }) {
                problem("track \(id): landmarks are invalid (cut short, out of order or past its end)")
            } else if n != counts[id] {
                problem("track \(id): \(n) landmarks stored, \(counts[id] ?? 0) recorded")
            }
        }
        for id in lastFrames.keys.sorted() where !withLandmarks.contains(id) { problem("track \(id) has no landmarks row") }
        if schema >= 2 { try checkIndex(lastFrames: lastFrames, counts: counts, problem) }
        return out
    }
}
