import EarmarkCatalog
import EarmarkCatalogPostgres
import EarmarkMatching
import EarmarkSignature
import EarmarkTestSupport
import Foundation
import Testing

/// A coordinator and two shard servers, and a sharded catalog over them.
struct ShardedServers {
    let coordinator: PostgresServer
    let shards: [PostgresServer]

    init() throws {
        coordinator = try PostgresServer()
        shards = [try PostgresServer(), try PostgresServer()]
    }

    func create() throws -> PostgresCatalog {
        try PostgresCatalog.create(url: coordinator.url, shards: shards.map(\.url))
    }

    /// Rows of `table` on each shard, counted on the shard itself.
    func counts(_ table: String) throws -> [Int] {
        try shards.map { Int(try $0.sql("SELECT count(*) FROM \(table)")) ?? -1 }
    }

    func stop() {
        coordinator.stop()
        for s in shards { s.stop() }
    }
}

@Suite("PostgresCatalog sharded over postgres_fdw: a coordinator and two shards", .enabled(if: PostgresServer.testsEnabled))
struct ShardedCatalogTests {
    @Test("real music: rows on the shards, the same postings and match answers on degraded clips as the SQLite store; lookups pushed down to both shards at once; remove")
    func realMusic() async throws {
        let reference = try await ReferenceCatalog.shared.value()
        let servers = try ShardedServers()
        defer { servers.stop() }
        let dir = try TemporaryDirectory("pg-sharded")
        try Catalog(path: reference.path, readOnly: true).export(to: dir.path("s.earcat"))
        let sqlite = try Catalog(path: dir.path("s.earcat"))
        // The second shard's URL names a server that is not there first (port 1), as a shard's primary and standby
        // would be named: the store and postgres_fdw (libpq) both go on to the next.
        let second = "postgres://postgres@127.0.0.1:1,127.0.0.1:\(servers.shards[1].port)/earmark?sslmode=disable"
        let pg = try PostgresCatalog.create(url: servers.coordinator.url, shards: [servers.shards[0].url, second])
        #expect(pg.shards.map(\.location) == ["127.0.0.1:\(servers.shards[0].port)/earmark", "127.0.0.1:1,127.0.0.1:\(servers.shards[1].port)/earmark"])
        // A second init of the same coordinator is refused.
        #expect(catalogError { _ = try servers.create() }?.code == .invalidArgument)
        pg.flushPostings = 20_000
        _ = try pg.merge(from: sqlite)
        #expect(try pg.indexLayout().segments >= 1)
        let trackCount = try sqlite.tracks().count
        // The bulky rows live on the shards, both of them; the coordinator's partitioned tables hold none themselves.
        let landmarks = try servers.counts("track_landmarks"), peaks = try servers.counts("track_peaks"), buckets = try servers.counts("index_buckets")
        #expect(landmarks.reduce(0, +) == trackCount && peaks.reduce(0, +) == trackCount && landmarks.allSatisfy { $0 > 0 }, "\(landmarks) \(peaks)")
        #expect(buckets.allSatisfy { $0 > 0 }, "\(buckets)")
        #expect(try servers.coordinator.sql("SELECT count(*) FROM ONLY track_landmarks") == "0")
        #expect(try servers.coordinator.sql("SELECT count(*) FROM tracks") == "\(trackCount)")
        let hashes = try expectSameIndexCompacted(sqlite, pg)
        // The merged-away segments' buckets go with the next index write; then every bucket row belongs to a segment.
        try pg.removeOrphans()
        #expect(try servers.counts("index_buckets").reduce(0, +) == Int(servers.coordinator.sql("SELECT count(*) FROM index_buckets")))
        #expect(try servers.coordinator.sql("SELECT count(DISTINCT segment) FROM index_buckets") == "1")
        let reader = try PostgresCatalog(url: servers.coordinator.url, readOnly: true)
        #expect(reader.shards.count == 2)
        for (k, (stem, offset)) in [("pingus-4", 40.0), ("goin_march", 20.0), ("sorcerer", 30.0)].enumerated() {
            let clip = dir.file("\(stem).wav")
            try Fixtures.cut(try reference.audio.reference(stem), start: offset, seconds: 10, to: clip)
            let noisy = Signal.addingNoise(to: try Fixtures.decode(clip), snrDB: 5, seed: UInt64(k + 1))
            let signature = SignatureGenerator.signature(of: noisy)
            let onServer = try Matcher(catalog: reader).match(signature)
            #expect(storeNeutral(onServer) == storeNeutral(try Matcher(catalog: sqlite).match(signature)), "\(stem) at \(offset) s")
            #expect(onServer.matches.first?.track.title == stem)
        }
        // The direct route: the store asks both shards itself (the second through its two-server URL), the same
        // postings and answers. (Without the process's bucket cache, which the reader above has filled.)
        let direct = try PostgresCatalog(url: servers.coordinator.url, readOnly: true)
        direct.shardLookupRoute = .direct
        direct.cachesBuckets = false
        #expect(try postingSequence(direct, hashes) == postingSequence(reader, hashes))
        #expect(direct.bucketReads.server > 0 && direct.shardReaderCount == 2 && reader.shardReaderCount == 0)
        let clip = dir.file("direct.wav")
        try Fixtures.cut(try reference.audio.reference("goin_march"), start: 50, seconds: 10, to: clip)
        let signature = SignatureGenerator.signature(of: Signal.addingNoise(to: try Fixtures.decode(clip), snrDB: 5, seed: 9))
        let directAnswer = try Matcher(catalog: direct).match(signature)
        #expect(storeNeutral(directAnswer) == storeNeutral(try Matcher(catalog: reader).match(signature)) && directAnswer.matches.first?.track.title == "goin_march")
        // The lookup statement: each shard gets the buckets its partition holds (routed by PostgreSQL's hash) as plain
        // conditions (no join that would fetch whole partitions) and aggregates them itself, one row each; the shards
        // are asked at once (async foreign scans).
        let explained = try servers.coordinator.sql("""
            PREPARE bucket_lookup(int8[], int4[]) AS \(PostgresCatalog.bucketFetchSQL(shards: 2));
            EXPLAIN (VERBOSE, COSTS OFF) EXECUTE bucket_lookup('{1}', '{1,2,3,4,5,6,7,8,9,10,11,12}')
            """)
        #expect(explained.components(separatedBy: "Async Foreign Scan").count == 3, "\(explained)")
        #expect(explained.components(separatedBy: "Relations: Aggregate on (public.index_buckets_").count == 3, "\(explained)")
        #expect(explained.components(separatedBy: "satisfies_hash_partition").count == 3, "\(explained)")
        #expect(explained.components(separatedBy: "Remote SQL: SELECT string_agg(").count == 3
                && explained.components(separatedBy: "FROM public.index_buckets WHERE ((bucket = ANY ($").count == 3, "\(explained)")
        // Removing a track takes its rows off its shard; the lookups stay the SQLite store's.
        let doomed = try #require(try pg.tracks().first { $0.title == "sorcerer" })
        try pg.remove(ids: [doomed.id])
        try sqlite.remove(ids: [try #require(try sqlite.tracks().first { $0.title == "sorcerer" }).id])
        #expect(try servers.counts("track_landmarks").reduce(0, +) == trackCount - 1)
        #expect(try servers.counts("track_peaks").reduce(0, +) == trackCount - 1)
        #expect(try postingSequence(reader, hashes) == postingSequence(sqlite, hashes))
        // The direct route sees the change too (the counter moved: state read again, buckets asked again).
        #expect(try postingSequence(direct, hashes) == postingSequence(sqlite, hashes))
        #expect(try reader.check().isEmpty)
        #expect(try pg.peaks(trackID: doomed.id).isEmpty)
    }

    @Test("an interrupted add or flush leaves shard rows nobody reads: check reports them, the next writer deletes them")
    func orphans() throws {
        let servers = try ShardedServers()
        defer { servers.stop() }
        let pg = try servers.create()
        let tracks = syntheticTracks(4, seed: 700)
        for (new, landmarks) in tracks { _ = try pg.add(new, landmarks: landmarks, peaks: randomPeaks(seed: 3, count: 50)) }
        try pg.flushIndex()
        let hashes = Array(Set(tracks.flatMap { $0.1.map(\.hash) }))
        let before = try postingMultiset(pg, hashes)
        #expect(try pg.check().isEmpty)
        // What a coordinator failure between the shards' commit and its own leaves: rows of a track (id 999) and
        // buckets of a segment (id 999) that the coordinator never recorded.
        // Inserted through the coordinator's partitioned tables, so each row is on the shard its key hashes to.
        try servers.coordinator.sql("""
            INSERT INTO track_landmarks SELECT 999, data FROM track_landmarks LIMIT 1;
            INSERT INTO track_peaks SELECT 999, data FROM track_peaks LIMIT 1;
            INSERT INTO index_buckets SELECT 999, bucket, data FROM index_buckets;
            """)
        #expect(try servers.counts("index_buckets WHERE segment = 999").allSatisfy { $0 > 0 })
        let orphanRows = try servers.counts("track_landmarks").reduce(0, +) + servers.counts("track_peaks").reduce(0, +)
            + servers.counts("index_buckets").reduce(0, +)
        let reader = try PostgresCatalog(url: servers.coordinator.url, readOnly: true)
        #expect(try reader.tracks().count == 4)
        #expect(try postingMultiset(reader, hashes) == before)
        #expect(try reader.landmarks(ofTracks: [999]).isEmpty && reader.peaks(trackID: 999).isEmpty)
        let problems = try reader.check()
        #expect(problems.contains { $0.contains("track 999, which does not exist") }, "\(problems)")
        // The next add's close deletes them all (its index flush attempt the buckets, then the track rows).
        let writer = try PostgresCatalog(url: servers.coordinator.url)
        let (new, landmarks) = syntheticTracks(1, seed: 800)[0]
        _ = try writer.add(new, landmarks: landmarks, peaks: randomPeaks(seed: 4, count: 50))
        try writer.close()
        #expect(try servers.shards.map { try $0.sql("SELECT count(*) FROM track_landmarks WHERE track_id = 999") } == ["0", "0"])
        #expect(try servers.shards.map { try $0.sql("SELECT count(*) FROM track_peaks WHERE track_id = 999") } == ["0", "0"])
        #expect(try servers.shards.map { try $0.sql("SELECT count(*) FROM index_buckets WHERE segment = 999") } == ["0", "0"])
        #expect(try reader.check().isEmpty)
        #expect(try writer.removeOrphans() == 0)
        #expect(try postingMultiset(reader, hashes).filter { $0.track != new.contentHash } == before)
        #expect(try reader.tracks().count == 5)
        // removeOrphans (catalog check --repair) does the same at any time.
        try servers.coordinator.sql("""
            INSERT INTO track_peaks SELECT 998, data FROM track_peaks LIMIT 1;
            INSERT INTO index_buckets SELECT 998, bucket, data FROM index_buckets LIMIT 3;
            """)
        let deleted = try writer.removeOrphans()
        #expect(deleted == 4 && deleted < orphanRows, "\(deleted) of \(orphanRows)")
        #expect(try reader.check().isEmpty)
        #expect(try servers.counts("track_peaks").reduce(0, +) == 5)

    }

    @Test("a stopped shard: lookups and adds that need it fail naming it (host:port), quickly; nothing half-added is visible")
    func stoppedShard() throws {
        let servers = try ShardedServers()
        defer { servers.stop() }
        let pg = try servers.create()
        for (new, landmarks) in syntheticTracks(3, seed: 900) { _ = try pg.add(new, landmarks: landmarks, peaks: randomPeaks(seed: 5, count: 50)) }
        try pg.flushIndex()
        let stopped = servers.shards[1]
        stopped.halt()
        let name = "127.0.0.1:\(stopped.port)"
        let started = Date()
        let e = catalogError { try pg.lookup(hashes: Array(0..<4096)) { _, _, _ in } }
        #expect(e?.code == .unavailable && e?.message.contains(name) == true && e?.message.contains("earmark_shard_2") == true, "\(String(describing: e))")
        let reader = try PostgresCatalog(url: servers.coordinator.url, readOnly: true)
        let e2 = catalogError { try reader.lookup(hashes: Array(0..<4096)) { _, _, _ in } }
        #expect(e2?.code == .unavailable && e2?.message.contains(name) == true, "\(String(describing: e2))")
        // The direct route names the shard it cannot reach too.
        let direct = try PostgresCatalog(url: servers.coordinator.url, readOnly: true)
        direct.shardLookupRoute = .direct
        direct.cachesBuckets = false
        let e3 = catalogError { try direct.lookup(hashes: Array(0..<4096)) { _, _, _ in } }
        #expect(e3?.code == .unavailable && e3?.message.contains(name) == true && e3?.message.contains("earmark_shard_2") == true,
                "\(String(describing: e3))")
        // Adds whose track lands on the stopped shard fail naming it; the coordinator keeps nothing of them.
        var failed = 0, messages: [String] = []
        for (new, landmarks) in syntheticTracks(12, seed: 950) {
            do {
                _ = try pg.add(new, landmarks: landmarks, peaks: randomPeaks(seed: 6, count: 50))
            } catch let e as CatalogError {
                #expect(e.message.contains(name), "\(e)")
                failed += 1
                messages.append(e.message)
            }
        }
        #expect(failed > 0 && failed < 12, "\(failed) \(messages) \((try? servers.coordinator.sql("SELECT id, satisfies_hash_partition('track_landmarks'::regclass, 2, 1, id) FROM generate_series(1::int8, 12) id")) ?? "")")

        #expect(try pg.tracks().count == 3 + 12 - failed)

        #expect(Date().timeIntervalSince(started) < 60)
    }

    @Test("a shard that hangs without closing its connections: a read gives up after readTimeout as unavailable; a new connection reads again once the shard is back")
    func hungShard() throws {
        let servers = try ShardedServers()
        defer { servers.stop() }
        let pg = try servers.create()
        for (new, landmarks) in syntheticTracks(3, seed: 700) { _ = try pg.add(new, landmarks: landmarks, peaks: randomPeaks(seed: 7, count: 50)) }
        try pg.flushIndex()
        let reader = try PostgresCatalog(url: servers.coordinator.url, readOnly: true)
        // Every lookup has to ask the shards: the few buckets of this small index would all be in the cache.
        reader.cachesBuckets = false
        var before = 0
        try reader.lookup(hashes: Array(0..<4096)) { _, _, _ in before += 1 }
        #expect(before > 0)
        reader.readTimeout = 2
        let hung = servers.shards[0]
        try hung.freeze(true)
        let started = Date()
        let e = catalogError { try reader.lookup(hashes: Array(4096..<8192)) { _, _, _ in } }
        let waited = Date().timeIntervalSince(started)
        try hung.freeze(false)
        #expect(e?.code == .unavailable && e?.message.contains("did not answer within 2") == true
                && e?.message.contains("127.0.0.1:\(hung.port)") == true, "\(String(describing: e))")
        #expect(waited >= 2 && waited < 10, "gave up after \(waited) s")
        // The closed connection stays closed; a new one reads the same postings as before.
        #expect(catalogError { try reader.lookup(hashes: Array(0..<4096)) { _, _, _ in } }?.code == .unavailable)
        var after = 0
        try PostgresCatalog(url: servers.coordinator.url, readOnly: true).lookup(hashes: Array(0..<4096)) { _, _, _ in after += 1 }
        #expect(after == before)
    }
}

/// A rough timing, run only when asked (EARMARK_SHARD_BENCH=tracks): the same synthetic tracks in a one-server
/// catalog and in one sharded over two servers (all on this machine), one segment each; lookups of 1,000 random
/// hashes (about a 10-s query) timed on each. The one-server figure stands in for the alternative of a matcher
/// asking each shard itself (one shard's query, without the coordinator's hop).
@Suite("sharded lookup timing (EARMARK_SHARD_BENCH)", .enabled(if: PostgresServer.testsEnabled && ProcessInfo.processInfo.environment["EARMARK_SHARD_BENCH"] != nil))
struct ShardedTiming {
    @Test("lookups: one server vs coordinator with two shards")
    func timing() throws {
        let count = Int(ProcessInfo.processInfo.environment["EARMARK_SHARD_BENCH"] ?? "") ?? 1000
        let servers = try ShardedServers()
        let single = try PostgresServer()
        defer {
            servers.stop()
            single.stop()
        }
        let sharded = try servers.create()
        let plain = try PostgresCatalog(url: single.url, create: true)
        var ingest: [String: Double] = [:]
        for (name, store) in [("one server", plain), ("2 shards", sharded)] {
            let start = Date()
            for k in 0..<count {
                _ = try store.add(NewTrack(title: "T\(k)", duration: 200, contentHash: "bench-\(k)"),
                                  landmarks: randomLandmarks(seed: UInt64(k), count: 3000), peaks: randomPeaks(seed: UInt64(k), count: 100))
            }
            try store.flushIndex()
            try store.compact()
            ingest[name] = Date().timeIntervalSince(start)
        }
        var rng = SplitMix(state: 42)
        let queries = (0..<200).map { _ in (0..<1000).map { _ in UInt32.random(in: 0..<(1 << 21), using: &rng) } }
        var report: [String] = []
        for (name, url) in [("one server", single.url), ("2 shards", servers.coordinator.url)] {
            let reader = try PostgresCatalog(url: url, readOnly: true)
            try reader.lookup(hashes: queries[0]) { _, _, _ in }
            var ms: [Double] = [], postings = 0
            for q in queries {
                let t = Date()
                try reader.lookup(hashes: q) { _, _, _ in postings += 1 }
                ms.append(Date().timeIntervalSince(t) * 1000)
            }
            ms.sort()
            report.append(String(format: "%@: ingest+index %.1f s, lookup of 1000 hashes median %.2f ms, p90 %.2f ms, p99 %.2f ms (%d postings)",
                                 name, ingest[name] ?? 0, ms[ms.count / 2], ms[ms.count * 9 / 10], ms[ms.count * 99 / 100], postings))
        }
        print("SHARD-BENCH \(count) tracks: " + report.joined(separator: "; "))
    }
}
