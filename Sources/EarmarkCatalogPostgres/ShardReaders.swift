import EarmarkCatalog
import Foundation
import NIOCore
import PostgresNIO

/// How a sharded catalog's lookups read the index buckets.
public enum ShardLookupRoute: String, Sendable, CaseIterable {
    /// One statement on the coordinator, which postgres_fdw sends on to every shard at once (asynchronous foreign
    /// scans under one Append); the buckets and the change counter come from one snapshot.
    case coordinator
    /// The store connects to every shard itself (the coordinator's foreign servers and the user's mapping say where
    /// and as whom), sends each the lookup at once, and then reads the coordinator's change counter: a segment's
    /// buckets are deleted only in a transaction after the one that dropped the segment, so a counter that has not
    /// moved means every bucket asked for was there.
    case direct

    /// `EARMARK_PG_SHARD_LOOKUPS` (`coordinator` or `direct`), else ``coordinator``.
    public static var standard: ShardLookupRoute {
        ProcessInfo.processInfo.environment["EARMARK_PG_SHARD_LOOKUPS"].flatMap(ShardLookupRoute.init(rawValue:)) ?? .coordinator
    }
}

/// A reading connection to one shard server.
struct ShardReader {
    var shard: PostgresShard
    var url: PostgresURL
    var connection: PostgresConnection
}

extension PostgresCatalog {
    /// The statement a shard answers in the direct route: its buckets of the (segment, bucket) pairs `$1`, `$2`, packed
    /// as the coordinator's statement packs them (``bucketFetchSQL(shards:)``).
    static let shardBucketSQL = """
        SELECT string_agg(int8send(b.segment) || int4send(b.bucket) || int4send(length(b.data)) || b.data, ''::bytea)
        FROM unnest($1::int8[], $2::int4[]) AS u(segment, bucket) JOIN index_buckets b ON b.segment = u.segment AND b.bucket = u.bucket
        """

    /// Where each shard is and as whom to connect, from the coordinator's foreign servers and the current user's
    /// mappings of them (user and password; without a mapping, this connection's user, its password from
    /// `PGPASSWORD` or the password file).
    func shardURLs() throws -> [(PostgresShard, PostgresURL)] {
        func escaped(_ s: String) -> String { s.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? s }
        return try foreignServers().map { name, o, m in
            guard let shard = shards.first(where: { $0.name == name }) else { throw damaged("foreign server \(name) is not one of the catalog's shards") }
            var text = "postgres://" + escaped(m["user"] ?? target.user)
            if let password = m["password"] { text += ":" + escaped(password) }
            text += "@/" + escaped(o["dbname"] ?? target.database) + "?host=" + escaped(o["host"] ?? "")
            for key in ["port", "sslmode", "connect_timeout", "target_session_attrs"] {
                if let value = o[key] { text += "&\(key)=" + escaped(value) }
            }
            return (shard, try PostgresURL(text))
        }
    }

    /// The shards' reading connections, opened at the first direct lookup and again after one was lost.
    func openShardReaders() throws -> [ShardReader] {
        if let readers = shardReaders, readers.allSatisfy({ !$0.connection.isClosed }) { return readers }
        closeShardReaders()
        var opened: [ShardReader] = []
        do {
            for (shard, url) in try shardURLs() {
                do {
                    let (connection, server) = try PostgresCatalog.connect(url, writer: false, logger: logger, location: location)
                    opened.append(ShardReader(shard: shard, url: server, connection: connection))
                } catch let e as CatalogError {
                    throw CatalogError(e.code, "shard \(shard.name) at \(shard.location) cannot be used: \(e.message)", path: location)
                }
            }
        } catch {
            for r in opened { try? r.connection.close().wait() }
            throw error
        }
        shardReaders = opened
        return opened
    }

    /// The shard connections the direct route holds open (for tests).
    package var shardReaderCount: Int { shardReaders?.count ?? 0 }

    func closeShardReaders() {
        for r in shardReaders ?? [] { try? r.connection.close().wait() }
        shardReaders = nil
    }

    /// The buckets of the (segment, bucket) pairs from every shard at once (the direct route): one packed buffer a
    /// shard that holds any.
    func fetchFromShards(_ segments: [Int64], _ buckets: [Int32]) throws -> [ByteBuffer] {
        let readers = try openShardReaders()
        let binds = PostgresCatalog.binds { $0.append(segments); $0.append(buckets) }
        let futures = readers.map { $0.connection.query(PostgresQuery(unsafeSQL: PostgresCatalog.shardBucketSQL, binds: binds), logger: logger) }
        var out: [ByteBuffer] = []
        var failure: CatalogError?
        for (reader, future) in zip(readers, futures) {
            do {
                let rows = try wait(for: future, on: reader.connection, endpoint: reader.url.endpoint, deadline: readTimeout).rows
                if let row = rows.first, let packed = try decode(row, ByteBuffer?.self, "shard \(reader.shard.name)'s buckets") { out.append(packed) }
            } catch {
                let e = PostgresCatalog.describe(error, target: reader.url, location: location, connecting: false)
                failure = failure ?? CatalogError(e.code == .damaged ? .damaged : .unavailable,
                                                  "shard \(reader.shard.name) at \(reader.shard.location) cannot be used: \(e.message)", path: location)
            }
        }
        if let failure {
            closeShardReaders()
            throw failure
        }
        return out
    }
}
