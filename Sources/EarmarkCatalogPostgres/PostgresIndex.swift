import EarmarkCatalog
import Foundation
import PostgresNIO

// The hash index of the PostgreSQL store (schema 2): immutable segments kept as rows of buckets, each bucket in the
// bit-packed encoding of a bucket of the SQLite store's segment files (IndexBucketCodec), and the postings of pending
// tracks held in memory. docs/postgres.md describes the layout.

extension PostgresCatalog {
    /// The advisory lock key that serializes the writers of index segments (and removals) ("ERMKIDX1").
    static let indexLock: Int64 = 0x4552_4D4B_4944_5831

    /// An index segment as its `index_segments` row says.
    struct SegmentRow {
        var id: Int64
        var codec: IndexBucketCodec
        var postings: Int
    }

    /// What lookups hold between changes, all read in one snapshot: the segments (oldest first), the tracks removed
    /// since their segment was written (a bitmap by id), and the pending tracks' postings sorted by key (in track order
    /// within a key), as of change counter `version`.
    struct IndexState {
        var version: Int64
        var segments: [SegmentRow]
        var removed: [UInt64]
        var pending: [Posting]
    }

    static func insert(_ id: UInt32, into bits: inout [UInt64]) {
        let w = Int(id >> 6)
        if w >= bits.count { bits += [UInt64](repeating: 0, count: w + 1 - bits.count) }
        bits[w] |= 1 << UInt64(id & 63)
    }

    @inline(__always)
    static func contains(_ bits: [UInt64], _ id: UInt32) -> Bool {
        let w = Int(id >> 6)
        return w < bits.count && bits[w] & (1 << UInt64(id & 63)) != 0
    }

    // MARK: Reading

    func segmentRow(_ row: PostgresRow) throws -> SegmentRow {
        let (id, keyBits, bucketBits, trackBits, first, last, postings) =
            try decode(row, (Int64, Int32, Int32, Int32, Int64, Int64, Int64).self, "an index_segments row")
        guard Int(keyBits) == configuration.hashBits, let f = UInt32(exactly: first), let l = UInt32(exactly: last), postings >= 0,
              let codec = IndexBucketCodec(keyBits: Int(keyBits), bucketBits: Int(bucketBits), trackBits: Int(trackBits), firstTrack: f, lastTrack: l)
        else { throw damaged("index segment \(id)'s description is not what this build writes") }
        return SegmentRow(id: id, codec: codec, postings: Int(postings))
    }

    /// The index segments, oldest first.
    func segmentRows() throws -> [SegmentRow] {
        try run("SELECT id, key_bits, bucket_bits, track_bits, first_track, last_track, postings FROM index_segments ORDER BY id").map(segmentRow)
    }

    /// Reads what lookups hold; inside a REPEATABLE READ transaction, so that a track is seen pending or indexed,
    /// never both or neither.
    func readIndexState() throws -> IndexState {
        let version = try changes()
        var segments: [SegmentRow] = []
        var removed: [UInt64] = []
        var pendingSQL = "SELECT l.track_id, l.data, t.duration FROM track_landmarks l JOIN tracks t ON t.id = l.track_id"
        var pendingBinds = PostgresBindings()
        if schema >= 2 {
            segments = try segmentRows()
            for row in try run("SELECT track_id FROM index_removed") {
                if let id = UInt32(exactly: try decode(row, Int64.self, "a removed track")) { PostgresCatalog.insert(id, into: &removed) }
            }
            if shards.isEmpty {
                pendingSQL += " WHERE NOT l.indexed"
            } else {
                // The flag is on the coordinator; the shards are asked for the pending tracks' rows only.
                let ids = try run("SELECT id FROM tracks WHERE NOT indexed").map { try decode($0, Int64.self, "a pending track") }
                pendingSQL += " WHERE l.track_id = ANY($1)"
                pendingBinds = PostgresCatalog.binds { $0.append(ids) }
            }
        }
        var postings: [Posting] = []
        for row in try run(pendingSQL + " ORDER BY l.track_id", pendingBinds) {
            let track = try decodeLandmarkRow(row) { id, hash, frame in postings.append(Posting(key: hash, track: UInt32(truncatingIfNeeded: id), frame: frame)) }
            guard UInt32(exactly: track) != nil else {
                throw CatalogError(.invalidArgument, "track id \(track) is beyond what this build's index holds (32 bits)", path: location)
            }
            guard postings.count <= PostgresCatalog.overlayLimit else {
                throw CatalogError(.invalidArgument, "more than \(PostgresCatalog.overlayLimit) postings of this catalog are not in its hash index yet: open it for writing and index them (PostgresCatalog.flushIndex())", path: location)
            }
        }
        // Stable: within a key, postings stay in track order.
        PostingIndex.radixSort(&postings) { $0.key }
        return IndexState(version: version, segments: segments, removed: removed, pending: postings)
    }

    /// Buckets fetched for one lookup: their bytes one after another in `bytes` (8 zero bytes after the last, for
    /// the bit reader's last word), each found by segment id and bucket.
    struct FetchedBuckets {
        var bytes: [UInt8] = []
        var ranges: [Int64: Range<Int>] = [:]
        static func key(_ segment: Int64, _ bucket: Int) -> Int64 { segment << 32 | Int64(bucket) }
    }

    /// The statement that fetches index buckets: `$1` segment ids and `$2` buckets, as (segment, bucket) pairs on one
    /// server (`shards` 0), or as two lists (every combination) through a coordinator of `shards` shards. It answers
    /// one row: the change counter and the buckets as one `bytea`, each as segment (int8), bucket (int4), length
    /// (int4) and its bytes. One row of 10,000s of buckets costs the server and the client a fraction of a row per
    /// bucket.
    package static func bucketFetchSQL(shards: Int) -> String {
        let packed = "string_agg(int8send(b.segment) || int4send(b.bucket) || int4send(length(b.data)) || b.data, ''::bytea)"
        guard shards > 0 else {
            let source = "unnest($1::int8[], $2::int4[]) AS u(segment, bucket) JOIN index_buckets b ON b.segment = u.segment AND b.bucket = u.bucket"
            return "SELECT s.changes, q.data FROM catalog_state s LEFT JOIN (SELECT \(packed) AS data FROM \(source)) q ON true"
        }
        // Sharded: each shard's partition gets only the buckets it holds (PostgreSQL's own hash routing, computed on
        // the coordinator) as plain conditions, and aggregates them itself: postgres_fdw sends each partition's
        // aggregate to its shard, all shards at once (async foreign scans under one Append), and each answers one row.
        // (A join with unnest would fetch whole partitions; the exact pairs are picked by the client.)
        let parts = (0..<shards).map { k in
            let mine = "CAST((SELECT array_agg(x) FROM unnest($2::int4[]) x WHERE satisfies_hash_partition('index_buckets'::regclass, \(shards), \(k), x)) AS int4[])"
            return "SELECT \(packed) AS d FROM index_buckets_\(k + 1) b WHERE b.bucket = ANY(\(mine)) AND b.segment = ANY($1::int8[])"
        }
        return "SELECT s.changes, q.data FROM catalog_state s LEFT JOIN (SELECT string_agg(p.d, ''::bytea) AS data FROM ("
            + parts.joined(separator: " UNION ALL ") + ") p) q ON true"
    }

    /// The buckets of the keys in `ordered` (``IndexSegment/order(_:bits:)``) in every segment of `state`; nil when
    /// the change counter is no longer `expecting` (`state` is stale). One query: the buckets and the counter come
    /// from one snapshot.
    func fetchBuckets(_ ordered: [UInt64], _ state: IndexState, expecting: Int64?) throws -> FetchedBuckets? {
        var segments: [Int64] = [], buckets: [Int32] = []
        for s in state.segments {
            var last = -1
            for o in ordered {
                let b = s.codec.bucket(ofMixed: UInt32(truncatingIfNeeded: o >> 32))
                if b != last {
                    segments.append(s.id)
                    buckets.append(Int32(b))
                    last = b
                }
            }
        }
        guard !segments.isEmpty else {
            guard let expecting else { return FetchedBuckets() }
            return try changes() == expecting ? FetchedBuckets() : nil
        }
        var out = FetchedBuckets()
        out.ranges.reserveCapacity(segments.count)
        let cache = BucketCache.shared
        var keys: [BucketCache.Key] = []
        if cache.enabled, cachesBuckets {
            let catalog = try cacheNumber()
            keys = zip(segments, buckets).map { BucketCache.Key(catalog: catalog, segment: $0, bucket: $1) }
            let missing = cache.read(keys, into: &out)
            bucketReads.cache += keys.count - missing.count
            if missing.count < keys.count {
                keys = missing.map { keys[$0] }
                segments = missing.map { segments[$0] }
                buckets = missing.map { buckets[$0] }
            }
            if missing.isEmpty {
                out.bytes += repeatElement(0, count: 8)
                guard let expecting else { return out }
                return try changes() == expecting ? out : nil
            }
        }
        var blobs: [ByteBuffer] = []
        let version: Int64
        var wanted: Set<Int64>?
        bucketReads.server += segments.count
        if !shards.isEmpty, shardLookupRoute == .direct {
            // The shards first, then the counter: buckets are deleted only after the change that dropped their segment.
            blobs = try fetchFromShards(segments, buckets)
            version = try changes()
        } else {
            let rows: [PostgresRow]
            if shards.isEmpty {
                rows = try run(PostgresCatalog.bucketFetchSQL(shards: 0), PostgresCatalog.binds { $0.append(segments); $0.append(buckets) },
                               deadline: readTimeout)
            } else {
                let distinctSegments = Array(Set(segments)).sorted(), distinctBuckets = Array(Set(buckets)).sorted()
                rows = try run(PostgresCatalog.bucketFetchSQL(shards: shards.count),
                               PostgresCatalog.binds { $0.append(distinctSegments); $0.append(distinctBuckets) }, deadline: readTimeout)
                if distinctSegments.count > 1 { wanted = Set(zip(segments, buckets).map { FetchedBuckets.key($0.0, Int($0.1)) }) }
            }
            guard rows.count == 1 else { throw damaged("the index's change counter is missing") }
            let (counter, packed) = try decode(rows[0], (Int64, ByteBuffer?).self, "the index buckets")
            version = counter
            if let packed { blobs = [packed] }
        }
        if let expecting, version != expecting { return nil }
        for packed in blobs {
            out.bytes.reserveCapacity(out.bytes.count + packed.readableBytes + 8)
            try packed.withUnsafeReadableBytes { raw in
                var at = 0
                while at < raw.count {
                    guard raw.count - at >= 16 else { throw damaged("an index bucket's header is cut short") }
                    let segment = Int64(bigEndian: raw.loadUnaligned(fromByteOffset: at, as: Int64.self))
                    let bucket = Int32(bigEndian: raw.loadUnaligned(fromByteOffset: at + 8, as: Int32.self))
                    let length = Int(Int32(bigEndian: raw.loadUnaligned(fromByteOffset: at + 12, as: Int32.self)))
                    at += 16
                    guard bucket >= 0, length >= 0, length <= raw.count - at else { throw damaged("index segment \(segment)'s bucket \(bucket) is cut short") }
                    let key = FetchedBuckets.key(segment, Int(bucket))
                    if wanted?.contains(key) ?? true {
                        let start = out.bytes.count
                        out.bytes.append(contentsOf: UnsafeRawBufferPointer(rebasing: raw[at..<at + length]))
                        out.ranges[key] = start..<out.bytes.count
                    }
                    at += length
                }
            }
        }
        // `keys` are the buckets just fetched; those the server did not have hold no postings: kept as such, so that
        // they are not asked for again.
        if !keys.isEmpty {
            cache.store(keys.map { k in (k, out.ranges[FetchedBuckets.key(k.segment, Int(k.bucket))].map { Array(out.bytes[$0]) } ?? []) })
        }
        out.bytes += repeatElement(0, count: 8)
        return out
    }

    /// This catalog's number in the process's ``BucketCache``: its location, the database's oid and the catalog's
    /// creation time, so that a database dropped and made again under the same name shares no cached buckets.
    func cacheNumber() throws -> Int32 {
        if let n = bucketCacheNumber { return n }
        let row = try run("SELECT (SELECT oid::int8 FROM pg_database WHERE datname = current_database()), (SELECT value FROM catalog_info WHERE key = 'created_at')").first
        let (oid, created) = try row.map { try decode($0, (Int64?, String?).self, "the catalog's identity") } ?? (nil, nil)
        let n = BucketCache.shared.catalogNumber("\(location)|\(oid ?? -1)|\(created ?? "")")
        bucketCacheNumber = n
        return n
    }

    /// The index state and the buckets of `ordered` in the direct route: the state in one snapshot, then the buckets
    /// from the shards, again while the counter moved between the two (a writer committed meanwhile).
    private func directLoad(_ ordered: [UInt64]) throws -> (IndexState, FetchedBuckets) {
        for _ in 0..<8 {
            let fresh = try transaction("BEGIN ISOLATION LEVEL REPEATABLE READ") { try readIndexState() }
            if let found = try fetchBuckets(ordered, fresh, expecting: fresh.version) { return (fresh, found) }
        }
        throw CatalogError(.locked, "the index changed during each of 8 lookups in a row; try again", path: location)
    }

    /// Every lookup waits for the server (and through a coordinator, for its shards).
    public var lookupsAreRemote: Bool { true }

    /// Calls `body(i, trackID, frame)` for every posting of each hash `hashes[i]` (distinct hashes): from the index
    /// segments (only the buckets of these hashes are read, in one round trip), then from tracks still pending.
    /// `commonHashes` is judged as ``Catalog`` judges it: against the segments, each by its share of the limit
    /// (a hash with more than max(64, `commonHashes` × postings / 2^hash bits) postings in the index gives none);
    /// pending postings are never skipped. Tracks removed since their segment was written are skipped.
    public func lookup(hashes: [UInt32], commonHashes: Double?, _ body: (Int, Int64, UInt32) -> Void) throws {
        guard !hashes.isEmpty else { return }
        let keyBits = configuration.hashBits
        let ordered = IndexSegment.order(hashes, bits: keyBits)
        let state: IndexState
        let buckets: FetchedBuckets
        if let cached = indexState, let found = try fetchBuckets(ordered, cached, expecting: cached.version) {
            state = cached
            buckets = found
        } else {
            // The counter moved (or nothing is held yet): read everything again, the buckets in the same snapshot
            // (from the shards directly: after the snapshot, checked against the counter as it is then).
            indexState = nil
            let loaded = try shards.isEmpty || shardLookupRoute == .coordinator
                ? transaction("BEGIN ISOLATION LEVEL REPEATABLE READ") {
                    let fresh = try readIndexState()
                    return (fresh, try fetchBuckets(ordered, fresh, expecting: nil) ?? FetchedBuckets())
                }
                : directLoad(ordered)
            state = loaded.0
            buckets = loaded.1
            indexState = state
        }
        let limits = PostingIndex.segmentLimits(commonKeys: commonHashes, postings: state.segments.map(\.postings), keyBits: keyBits)
        let filter = !state.removed.isEmpty
        try buckets.bytes.withUnsafeBytes { raw in
            for (segment, limit) in zip(state.segments, limits) {
                for o in ordered {
                    let m = UInt32(truncatingIfNeeded: o >> 32)
                    let bucket = segment.codec.bucket(ofMixed: m)
                    guard let range = buckets.ranges[FetchedBuckets.key(segment.id, bucket)] else { continue }
                    let i = Int(truncatingIfNeeded: o & 0xFFFF_FFFF)
                    do {
                        try segment.codec.scan(raw.baseAddress!, lo: range.lowerBound, hi: range.upperBound, mixed: m, limit: limit) { track, frame in
                            if filter, PostgresCatalog.contains(state.removed, track) { return }
                            body(i, Int64(track), frame)
                        }
                    } catch let d as IndexBucketDamage {
                        throw damaged("index segment \(segment.id)'s bucket \(bucket): \(d)")
                    }
                }
            }
        }
        PostingIndex.lookup(sorted: state.pending, keys: hashes) { i, track, frame in body(i, Int64(track), frame) }
    }

    /// Calls `body` with every posting (mixed key) of bucket `bucket` of `segment`, stored as `data`; returns how many.
    @discardableResult
    func decodeBucket(_ segment: SegmentRow, _ bucket: Int, _ data: ByteBuffer, _ body: (Posting) throws -> Void) throws -> Int {
        guard bucket >= 0, bucket < 1 << segment.codec.bucketBits else {
            throw damaged("index segment \(segment.id) holds a bucket \(bucket), outside its \(1 << segment.codec.bucketBits)")
        }
        let bytes = Array(data.readableBytesView) + [UInt8](repeating: 0, count: 8)
        do {
            return try bytes.withUnsafeBytes { try segment.codec.forEach($0.baseAddress!, lo: 0, hi: $0.count - 8, bucket: bucket, body) }
        } catch let d as IndexBucketDamage {
            throw damaged("index segment \(segment.id)'s bucket \(bucket): \(d)")
        }
    }

    /// How the hash index is laid out now: segments, the postings in them, and the postings of tracks still pending.
    public func indexLayout() throws -> (segments: Int, postings: Int, pending: Int) {
        guard schema >= 2 else {
            let row = try run("SELECT coalesce(sum(landmark_count), 0)::int8 FROM tracks").first
            return (0, 0, Int(try row.map { try decode($0, Int64.self, "the landmark total") } ?? 0))
        }
        let pendingSQL = shards.isEmpty
            ? "SELECT coalesce(sum(t.landmark_count), 0)::int8 FROM track_landmarks l JOIN tracks t ON t.id = l.track_id WHERE NOT l.indexed"
            : "SELECT coalesce(sum(landmark_count), 0)::int8 FROM tracks WHERE NOT indexed"
        guard let row = try run("""
            SELECT (SELECT count(*) FROM index_segments), (SELECT coalesce(sum(postings), 0)::int8 FROM index_segments),
                   (\(pendingSQL))
            """).first else { throw damaged("no index totals") }
        let (segments, postings, pending) = try decode(row, (Int64, Int64, Int64).self, "the index totals")
        return (Int(segments), Int(postings), Int(pending))
    }

    // MARK: Writing

    /// Moves the landmarks of pending tracks (this connection's, another's, or those of a writer that stopped early)
    /// into new index segments, in batches of about ``flushPostings``, then merges segments of similar size: all in
    /// one transaction under an advisory lock, so a reader sees each track pending or indexed, never both or neither.
    /// ``add(_:landmarks:peaks:analyses:)`` calls it every ``flushPostings`` postings, ``close()`` when more than
    /// ``pendingPostings`` are pending; those two leave the work to another writer that holds the lock at that moment
    /// (what it does not take stays pending, and the next flush takes it), this one waits for it (up to the busy timeout).
    public func flushIndex() throws {
        try refuseIfReadOnly()
        try flushIndex(ifMoreThan: nil, wait: true)
    }

    /// ``flushIndex()`` when more than `threshold` postings are pending; `wait`: for another writer's lock, else
    /// leave the work when another writer holds it.
    func flushIndex(ifMoreThan threshold: Int?, wait: Bool) throws {
        guard !readOnly, schema >= 2 else { return }
        let done: Bool = try transaction {
            if wait {
                try run("SELECT pg_advisory_xact_lock($1)", PostgresCatalog.binds { $0.append(PostgresCatalog.indexLock) })
            } else {
                let row = try run("SELECT pg_try_advisory_xact_lock($1)", PostgresCatalog.binds { $0.append(PostgresCatalog.indexLock) }).first
                guard try row.map({ try decode($0, Bool.self, "the index lock") }) == true else { return false }
            }
            // Sharded: buckets that earlier writers left (merged away, or of a flush that did not commit) go first.
            _ = try deleteDroppedBuckets()
            let pending = try run(shards.isEmpty ? """
                SELECT l.track_id, t.landmark_count FROM track_landmarks l JOIN tracks t ON t.id = l.track_id
                WHERE NOT l.indexed ORDER BY l.track_id
                """ : "SELECT id, landmark_count FROM tracks WHERE NOT indexed ORDER BY id").map { try decode($0, (Int64, Int64).self, "a pending track") }
            let total = pending.reduce(0) { $0 + max(0, Int($1.1)) }
            guard !pending.isEmpty, total > (threshold ?? -1) else { return true }
            if let large = pending.first(where: { UInt32(exactly: $0.0) == nil }) {
                throw CatalogError(.invalidArgument, "track id \(large.0) is beyond what an index segment holds (32 bits)", path: location)
            }
            var start = 0
            while start < pending.count {
                // Tracks until the batch holds flushPostings, as the SQLite store's batches (so both build alike).
                var end = start, budget = 0
                while end < pending.count, budget < flushPostings {
                    budget += max(0, Int(pending[end].1))
                    end += 1
                }
                let ids = pending[start..<end].map(\.0)
                var postings: [Posting] = []
                postings.reserveCapacity(budget)
                let rows = try run("""
                    SELECT l.track_id, l.data, t.duration FROM track_landmarks l JOIN tracks t ON t.id = l.track_id
                    WHERE l.track_id = ANY($1) ORDER BY l.track_id
                    """, PostgresCatalog.binds { $0.append(ids) })
                for row in rows {
                    _ = try decodeLandmarkRow(row) { id, hash, frame in postings.append(Posting(key: hash, track: UInt32(truncatingIfNeeded: id), frame: frame)) }
                }
                if !postings.isEmpty {
                    let keyBits = configuration.hashBits
                    PostingIndex.sortByMixedKey(&postings, keyBits: keyBits)
                    let lo = postings.lazy.map(\.track).min()!, hi = postings.lazy.map(\.track).max()!
                    var writer = try SegmentRowWriter(self, postingCount: postings.count, tracks: lo...hi)
                    for p in postings { try writer.append(Posting(key: IndexSegment.mix(p.key, bits: keyBits), track: p.track, frame: p.frame)) }
                    try writer.finish()
                }
                try run(shards.isEmpty ? "UPDATE track_landmarks SET indexed = true WHERE track_id = ANY($1)" : "UPDATE tracks SET indexed = true WHERE id = ANY($1)",
                        PostgresCatalog.binds { $0.append(ids) })
                try mergeSimilarSegments()
                start = end
            }
            try bumpChanges()
            return true
        }
        guard done else { return }
        unflushed = 0
        indexState = nil
    }

    /// Indexes the pending tracks when more than ``pendingPostings`` landmarks are pending, then merges all segments
    /// into one, dropping the postings of removed tracks (as ``Catalog/compact()`` does for the file's index): lookups
    /// then read one bucket per hash. Then, on one server, rewrites the index's table without the rows of the merged
    /// segments (`VACUUM (FULL)`, as the file is vacuumed): readers wait for that rewrite. A sharded catalog's
    /// buckets are on its shards, which vacuum them themselves (autovacuum, or `vacuumdb --full`).
    public func compact() throws {
        try refuseIfReadOnly()
        guard schema >= 2 else { return }
        try flushIndex(ifMoreThan: pendingPostings, wait: true)
        let merged = try transaction { () -> Bool in
            try run("SELECT pg_advisory_xact_lock($1)", PostgresCatalog.binds { $0.append(PostgresCatalog.indexLock) })
            _ = try deleteDroppedBuckets()
            let segments = try segmentRows()

            let removed = try run("SELECT 1 FROM index_removed LIMIT 1")
            guard segments.count > 1 || (segments.count == 1 && !removed.isEmpty) else { return false }
            try mergeSegments(segments, all: true)
            try bumpChanges()
            return true
        }
        indexState = nil
        // Every bulk ingest merged segments over and over (a binary counter): at 1,000 h, 2.2 million dead bucket rows
        // beside 2.1 million live ones, 3.0 GB for the table.
        if merged, shards.isEmpty { try run("VACUUM (FULL, ANALYZE) index_buckets") }
    }

    /// Merges the newest two segments while the older is at most twice the newer (a binary counter, as ``Catalog``'s
    /// index: each posting is rewritten about log₂(total / first segment) times). In a transaction holding the index lock.
    func mergeSimilarSegments() throws {
        while true {
            let segments = try segmentRows()
            let n = segments.count
            guard n >= 2, segments[n - 2].postings <= 2 * segments[n - 1].postings else { return }
            try mergeSegments(Array(segments[(n - 2)...]), all: n == 2)
        }
    }

    /// Merges `inputs` (oldest first) into one new segment, dropping postings of tracks that no longer exist; `all`:
    /// they are every segment, so no removed track has postings left. Works through the key space in chunks (the
    /// buckets of a range of mixed keys in every input), so memory follows the chunk, not the segments.
    func mergeSegments(_ inputs: [SegmentRow], all: Bool) throws {
        guard !inputs.isEmpty else { return }
        var live: [UInt64] = []
        for row in try run("SELECT id FROM tracks") {
            if let id = UInt32(exactly: try decode(row, Int64.self, "a track id")) { PostgresCatalog.insert(id, into: &live) }
        }
        let total = inputs.reduce(0) { $0 + $1.postings }
        let lo = inputs.map(\.codec.firstTrack).min()!, hi = inputs.map(\.codec.lastTrack).max()!
        // The new segment is laid out for every input posting; those of removed tracks are left out.
        var writer = try SegmentRowWriter(self, postingCount: total, tracks: lo...hi)
        var chunkBits = 0
        while chunkBits < 8, total >> chunkBits > 4_000_000 { chunkBits += 1 }
        var seen = [Int](repeating: 0, count: inputs.count)
        for chunk in 0..<(1 << chunkBits) {
            var heads: [[Posting]] = []
            for (k, s) in inputs.enumerated() {
                let shift = s.codec.bucketBits - chunkBits
                var postings: [Posting] = []
                let rows = try run("SELECT bucket, data FROM index_buckets WHERE segment = $1 AND bucket >= $2 AND bucket < $3 ORDER BY bucket",
                                   PostgresCatalog.binds { $0.append(s.id); $0.append(Int32(chunk << shift)); $0.append(Int32((chunk + 1) << shift)) })
                for row in rows {
                    let (bucket, data) = try decode(row, (Int32, ByteBuffer).self, "an index bucket")
                    seen[k] += try decodeBucket(s, Int(bucket), data) { postings.append($0) }
                }
                heads.append(postings)
            }
            // By mixed key; a tie goes to the older segment, so a key's postings stay in the order they came.
            var next = [Int](repeating: 0, count: heads.count)
            while true {
                var best = -1
                for i in heads.indices where next[i] < heads[i].count {
                    if best < 0 || heads[i][next[i]].key < heads[best][next[best]].key { best = i }
                }
                guard best >= 0 else { break }
                let p = heads[best][next[best]]
                next[best] += 1
                if PostgresCatalog.contains(live, p.track) { try writer.append(p) }
            }
        }
        for (k, s) in inputs.enumerated() where seen[k] != s.postings {
            throw damaged("index segment \(s.id) holds \(seen[k]) postings, its description says \(s.postings)")
        }
        try writer.finish()
        try run("DELETE FROM index_segments WHERE id = ANY($1)", PostgresCatalog.binds { $0.append(inputs.map(\.id)) })
        if all { try run("DELETE FROM index_removed") }
    }

    /// Checks every index segment (``check()``): its description, its buckets, the tracks and frames they name, its
    /// posting count, and each indexed track's postings against its landmark count.
    func checkIndex(lastFrames: [Int64: Int], counts: [Int64: Int], _ problem: (String) -> Void) throws {
        var removed = Set<Int64>()
        for row in try run("SELECT track_id FROM index_removed") { if let id = try? row.decode(Int64.self) { removed.insert(id) } }
        var perTrack: [Int64: Int] = [:]
        for row in try run("SELECT id, key_bits, bucket_bits, track_bits, first_track, last_track, postings FROM index_segments ORDER BY id") {
            let segment: SegmentRow
            do { segment = try segmentRow(row) } catch let e as CatalogError {
                problem(e.message)
                continue
            }
            var seen = 0, after: Int32 = -1, bad = 0
            while true {
                let rows = try run("SELECT bucket, data FROM index_buckets WHERE segment = $1 AND bucket > $2 ORDER BY bucket LIMIT 8192",
                                   PostgresCatalog.binds { $0.append(segment.id); $0.append(after) })
                guard !rows.isEmpty else { break }
                for row in rows {
                    guard let (bucket, data) = try? row.decode((Int32, ByteBuffer).self) else { problem("a bucket row of index segment \(segment.id) cannot be read"); continue }
                    after = bucket
                    do {
                        seen += try decodeBucket(segment, Int(bucket), data) { p in
                            let track = Int64(p.track)
                            if let last = lastFrames[track] {
                                if Int(p.frame) > last { bad += 1 }
                                perTrack[track, default: 0] += 1
                            } else if !removed.contains(track) {
                                bad += 1
                            }
                        }
                    } catch let e as CatalogError {
                        problem(e.message)
                    }
                }
            }
            if bad > 0 { problem("index segment \(segment.id): \(bad) postings name a track that does not exist or a frame past its end") }
            if seen != segment.postings { problem("index segment \(segment.id) holds \(seen) postings, its description says \(segment.postings)") }
        }
        for row in try run(shards.isEmpty ? "SELECT track_id FROM track_landmarks WHERE indexed ORDER BY track_id" : "SELECT id FROM tracks WHERE indexed ORDER BY id") {
            guard let id = try? row.decode(Int64.self), let count = counts[id] else { continue }
            let n = perTrack[id] ?? 0
            if n != count { problem("track \(id): \(n) postings in the hash index, \(count) recorded") }
        }
    }
}

/// Writes one index segment as rows: its `index_segments` row, then its buckets (postings given in mixed-key order,
/// grouped by bucket and encoded by ``IndexBucketCodec``), inserted in batches of about 8 MB as one multi-row INSERT
/// each (binary arrays through `unnest`).
struct SegmentRowWriter {
    let catalog: PostgresCatalog
    let codec: IndexBucketCodec
    let id: Int64
    private var bucket: [Posting] = []
    private var currentBucket = -1
    private var lastMixed: UInt32?
    private var numbers: [Int32] = []
    private var blobs: [ByteBuffer] = []
    private var batchBytes = 0
    private(set) var count = 0

    /// Starts a segment laid out for `postingCount` postings of `tracks`.
    init(_ catalog: PostgresCatalog, postingCount: Int, tracks: ClosedRange<UInt32>) throws {
        let codec = IndexBucketCodec(keyBits: catalog.configuration.hashBits, postingCount: postingCount, tracks: tracks)
        self.codec = codec
        self.catalog = catalog
        guard let row = try catalog.run("""
            INSERT INTO index_segments(key_bits, bucket_bits, track_bits, first_track, last_track, postings)
            VALUES ($1, $2, $3, $4, $5, $6) RETURNING id
            """, PostgresCatalog.binds {
                $0.append(Int32(codec.keyBits)); $0.append(Int32(codec.bucketBits)); $0.append(Int32(codec.trackBits))
                $0.append(Int64(codec.firstTrack)); $0.append(Int64(codec.lastTrack)); $0.append(Int64(postingCount))
            }).first else { throw catalog.damaged("a new index segment has no id") }
        id = try catalog.decode(row, Int64.self, "a new index segment's id")
    }

    /// Appends a posting whose key is mixed (``IndexSegment/mix(_:bits:)``), in mixed-key order.
    mutating func append(_ p: Posting) throws {
        guard UInt64(p.key) >> UInt64(codec.keyBits) == 0, p.track >= codec.firstTrack, p.track <= codec.lastTrack,
              lastMixed.map({ $0 <= p.key }) ?? true else {
            throw CatalogError(.invalidArgument, "index segment \(id): a posting out of order or out of its range", path: catalog.location)
        }
        lastMixed = p.key
        let b = codec.bucket(ofMixed: p.key)
        if b != currentBucket {
            try flushBucket()
            currentBucket = b
        }
        bucket.append(p)
        count += 1
    }

    private mutating func flushBucket() throws {
        guard !bucket.isEmpty else { return }
        var bytes: [UInt8] = []
        codec.encode(bucket, into: &bytes)
        numbers.append(Int32(currentBucket))
        blobs.append(ByteBuffer(bytes: bytes))
        batchBytes += bytes.count
        bucket.removeAll(keepingCapacity: true)
        if batchBytes >= 8 << 20 { try insertBatch() }
    }

    private mutating func insertBatch() throws {
        guard !numbers.isEmpty else { return }
        let (id, numbers, blobs) = (self.id, self.numbers, self.blobs)
        try catalog.run("INSERT INTO index_buckets(segment, bucket, data) SELECT $1, b, d FROM unnest($2::int4[], $3::bytea[]) AS u(b, d)",
                        PostgresCatalog.binds { $0.append(id); $0.append(numbers); $0.append(blobs) })
        self.numbers.removeAll(keepingCapacity: true)
        self.blobs.removeAll(keepingCapacity: true)
        batchBytes = 0
    }

    /// Writes the last buckets and records the segment's posting count (removing the segment when it holds none).
    mutating func finish() throws {
        try flushBucket()
        try insertBatch()
        if count == 0 {
            try catalog.run("DELETE FROM index_segments WHERE id = $1", PostgresCatalog.binds { $0.append(id) })
        } else {
            try catalog.run("UPDATE index_segments SET postings = $2 WHERE id = $1", PostgresCatalog.binds { $0.append(id); $0.append(Int64(count)) })
        }
    }
}
