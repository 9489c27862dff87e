import EarmarkCatalog
import EarmarkCatalogPostgres
import EarmarkMatching
import EarmarkSignature
import EarmarkTestSupport
import Foundation
import Testing

/// Every posting of `hashes` in `store` in the order the store gives them, its track named by content hash.
func postingSequence(_ store: any CatalogStore, _ hashes: [UInt32], commonHashes: Double? = nil) throws -> [PGPosting] {
    var raw: [(Int, Int64, UInt32)] = []
    try store.lookup(hashes: hashes, commonHashes: commonHashes) { i, t, f in raw.append((i, t, f)) }
    let names = try store.tracks(ids: Set(raw.map(\.1))).mapValues(\.contentHash)
    return raw.map { PGPosting(hash: hashes[$0.0], track: names[$0.1] ?? "?\($0.1)", frame: $0.2) }
}

/// An index layout as an array, to compare.
func parts(_ l: (segments: Int, postings: Int, pending: Int)) -> [Int] { [l.segments, l.postings, l.pending] }

/// A match with the parts that name a store's own ids (track id, when it was added) left out.
func storeNeutral(_ result: MatchResult) -> MatchResult {
    var r = result
    for i in r.matches.indices {
        r.matches[i].track.id = 0
        r.matches[i].track.addedAt = ""
    }
    return r
}

/// Checks that `pg` holds every posting of `sqlite`'s landmarks; then compacts both into one segment and checks the
/// same layout and the same postings in the same order, common hashes skipped alike (so the same candidates).
/// Returns the hashes looked up.
@discardableResult
func expectSameIndexCompacted(_ sqlite: Catalog, _ pg: PostgresCatalog) throws -> [UInt32] {
    let all = try sqlite.landmarks(ofTracks: Set(try sqlite.tracks().map(\.id)))
    let hashes = Array(Set(all.values.flatMap { $0.map(\.hash) })).sorted()
    #expect(try postingMultiset(pg, hashes) == postingMultiset(sqlite, hashes))
    try sqlite.flushIndex()
    try pg.flushIndex()
    try sqlite.compact()
    try pg.compact()
    #expect(try parts(pg.indexLayout()) == parts(sqlite.indexLayout()))
    for common: Double? in [nil, 2] {
        #expect(try postingSequence(pg, hashes, commonHashes: common) == postingSequence(sqlite, hashes, commonHashes: common))
    }
    return hashes
}

/// `count` synthetic tracks of 3,000 landmarks; hash 7 is in every track at 40 frames (common).
func syntheticTracks(_ count: Int, seed: UInt64 = 100) -> [(NewTrack, [Landmark])] {
    (0..<count).map { k in
        let common = (0..<40).map { Landmark(hash: 7, frame: UInt32(k * 40 + $0)) }
        let landmarks = common + randomLandmarks(seed: seed + UInt64(k), count: 2960, hashes: 0..<(1 << 16))
        return (NewTrack(title: "T\(k)", duration: 200, contentHash: "synthetic-\(seed)-\(k)"), landmarks)
    }
}

@Suite("PostgresCatalog: the hash index in segments", .enabled(if: PostgresServer.testsEnabled))
struct PostgresIndexTests {

    func expectSameLookups(_ sqlite: Catalog, _ pg: PostgresCatalog, _ hashes: [UInt32], _ context: String) throws {
        for common: Double? in [nil, 2, 16, 1e9] {
            let expected = try postingSequence(sqlite, hashes, commonHashes: common)
            let got = try postingSequence(pg, hashes, commonHashes: common)
            #expect(got == expected, "\(context), commonHashes \(String(describing: common)): \(got.count) postings, SQLite \(expected.count)")
        }
    }

    @Test("segments built past the threshold and merged as a binary counter, as the SQLite store's; the same lookups in the same order (commonHashes too); remove after indexing; compact")
    func segmentsAsSQLite() throws {
        let server = try PostgresServer()
        defer { server.stop() }
        let dir = try TemporaryDirectory("pg-segments")
        let sqlite = try Catalog(path: dir.path("s.earcat"), create: true)
        let pg = try PostgresCatalog(url: server.url, create: true)
        sqlite.flushPostings = 5000
        sqlite.inFilePostings = 1000
        pg.flushPostings = 5000
        pg.pendingPostings = 1000
        let tracks = syntheticTracks(11)
        for (new, landmarks) in tracks {
            _ = try sqlite.add(new, landmarks: landmarks, peaks: [])
            _ = try pg.add(new, landmarks: landmarks, peaks: [])
        }
        let hashes = Array(Set(tracks.flatMap { $0.1.map(\.hash) } + [1 << 20, 5])).sorted()
        // Ten tracks indexed (five flushes, the binary counter merging them into one segment), the last one pending.
        let layout = try pg.indexLayout()
        #expect(try parts(layout) == parts(sqlite.indexLayout()), "\(layout)")
        #expect(layout.segments == 1 && layout.pending == Set(tracks[10].1.map { "\($0.hash)/\($0.frame)" }).count, "\(layout)")
        try expectSameLookups(sqlite, pg, hashes, "after adds")
        // Hash 7 is too common in the segments; the pending track's postings are never skipped.
        let common = try postingSequence(pg, [7], commonHashes: 2)
        #expect(common.count == 40 && common.allSatisfy { $0.track == tracks[10].0.contentHash }, "\(common.count)")
        // A reader sees the same; it skips removed tracks that are in a segment.
        let reader = try PostgresCatalog(url: server.url, readOnly: true)
        try expectSameLookups(sqlite, reader, hashes, "reader")
        let removed = try #require(try pg.tracks().first { $0.title == "T3" })
        try sqlite.remove(ids: [removed.id])
        try pg.remove(ids: [removed.id])
        #expect(try server.sql("SELECT count(*) FROM index_removed") == "1")
        try expectSameLookups(sqlite, reader, hashes, "after remove")
        #expect(try postingSequence(reader, hashes).allSatisfy { $0.track != removed.contentHash })
        #expect(try pg.check().isEmpty)
        // Closing with more than pendingPostings pending indexes them: a second segment, not merged (30,000 > 2 × 3,000).
        try pg.close()
        try sqlite.close()
        let closed = try pg.indexLayout()
        #expect(try closed.segments == 2 && closed.pending == 0 && parts(closed) == parts(sqlite.indexLayout()), "\(closed)")
        try expectSameLookups(sqlite, reader, hashes, "two segments")
        // Compacting merges them into one, without the removed track.
        try sqlite.compact()
        try pg.compact()
        let compacted = try pg.indexLayout()
        #expect(try compacted.segments == 1 && compacted.pending == 0 && parts(compacted) == parts(sqlite.indexLayout()), "\(compacted)")
        #expect(try server.sql("SELECT count(*) FROM index_removed") == "0")
        try expectSameLookups(sqlite, reader, hashes, "compacted")
        #expect(try pg.check().isEmpty)
        #expect(try pg.stats().schemaVersion == 2)
    }

    @Test("real music: the same lookups and the same match answers on degraded clips as the SQLite store")
    func realMusicMatches() async throws {
        let reference = try await ReferenceCatalog.shared.value()
        let server = try PostgresServer()
        defer { server.stop() }
        let dir = try TemporaryDirectory("pg-real-segments")
        try Catalog(path: reference.path, readOnly: true).export(to: dir.path("s.earcat"))
        let sqlite = try Catalog(path: dir.path("s.earcat"))
        let pg = try PostgresCatalog(url: server.url, create: true)
        pg.flushPostings = 20_000
        _ = try pg.merge(from: sqlite)
        #expect(try pg.indexLayout().segments >= 1)
        try expectSameIndexCompacted(sqlite, pg)
        let reader = try PostgresCatalog(url: server.url, readOnly: true)
        var matched = 0
        for (k, (stem, offset)) in [("pingus-4", 40.0), ("goin_march", 20.0), ("sorcerer", 30.0), ("pingus-6", 12.5)].enumerated() {
            let clip = dir.file("\(stem).wav")
            try Fixtures.cut(try reference.audio.reference(stem), start: offset, seconds: 10, to: clip)
            let noisy = Signal.addingNoise(to: try Fixtures.decode(clip), snrDB: 5, seed: UInt64(k + 1))
            let signature = SignatureGenerator.signature(of: noisy)
            let onFile = try Matcher(catalog: sqlite).match(signature)
            let onServer = try Matcher(catalog: reader).match(signature)
            #expect(storeNeutral(onServer) == storeNeutral(onFile), "\(stem) at \(offset) s")
            if onServer.matches.first?.track.title == stem { matched += 1 }
        }
        #expect(matched == 4)
        // A silence-free clip of other music is no match on both, and a sped-up clip is found by the skew trials on
        // both. The server is asked for the trials' hashes in a few batches, where the file answers each trial
        // (one lookup each) as it comes.
        let other = try #require(reference.audio.negative.first)
        let negative = dir.file("negative.wav"), sped = dir.file("sped.wav")
        try Fixtures.cut(other, start: 0, seconds: 10, to: negative)
        try Run.sox([dir.file("pingus-4.wav").path, sped.path, "speed", "1.06"])
        for (name, clip, expected) in [("other music", negative, nil), ("pingus-4 at speed 1.06", sped, "pingus-4")] {
            let signature = SignatureGenerator.signature(of: try Fixtures.decode(clip))
            let onServer = Matcher(catalog: reader), onFile = Matcher(catalog: sqlite)
            let answer = try onServer.match(signature)
            #expect(storeNeutral(answer) == storeNeutral(try onFile.match(signature)), "\(name)")
            #expect(answer.matches.first?.track.title == expected, "\(name)")
            let counts = "\(name): \(onServer.catalogLookups) lookups on the server, \(onFile.catalogLookups) on the file"
            #expect(onServer.catalogLookups <= onFile.catalogLookups, "\(counts)")
            if expected == nil {
                // Every trial ran: about one lookup each on the file, a handful in all on the server.
                #expect(onFile.catalogLookups >= Skew.defaultTrials.count / 2 && onServer.catalogLookups <= 10, "\(counts)")
            }
        }
    }

    @Test("a catalog of schema 1 is read as it is, migrated when opened for writing, and indexed by the next flush")
    func migrationFromVersion1() throws {
        let server = try PostgresServer()
        defer { server.stop() }
        let tracks = syntheticTracks(5, seed: 300)
        var expected: [PGPosting] = []
        do {
            let pg = try PostgresCatalog(url: server.url, create: true)
            for (new, landmarks) in tracks { _ = try pg.add(new, landmarks: landmarks, peaks: randomPeaks(seed: 1, count: 50)) }
            let hashes = Array(Set(tracks.flatMap { $0.1.map(\.hash) }))
            expected = try postingMultiset(pg, hashes)
            #expect(expected.count == tracks.reduce(0) { $0 + Set($1.1.map { "\($0.hash)/\($0.frame)" }).count })
        }
        // What version 1 had: no index tables, no `indexed` column.
        try server.sql("""
            DROP TABLE index_buckets; DROP TABLE index_segments; DROP TABLE index_removed;
            ALTER TABLE track_landmarks DROP COLUMN indexed;
            UPDATE catalog_info SET value = '1' WHERE key = 'schema_version';
            """)
        let hashes = Array(Set(tracks.flatMap { $0.1.map(\.hash) }))
        let old = try PostgresCatalog(url: server.url, readOnly: true)
        #expect(try old.stats().schemaVersion == 1)
        #expect(try postingMultiset(old, hashes) == expected)
        #expect(try old.check().isEmpty)
        let writer = try PostgresCatalog(url: server.url)
        #expect(try writer.stats().schemaVersion == 2)
        #expect(try server.sql("SELECT value FROM catalog_info WHERE key = 'schema_version'") == "2")
        let layout = try writer.indexLayout()
        #expect(layout.segments == 0 && layout.pending == expected.count, "\(layout)")
        #expect(try postingMultiset(writer, hashes) == expected)
        try writer.flushIndex()
        #expect(try writer.indexLayout().pending == 0)
        let reader = try PostgresCatalog(url: server.url, readOnly: true)
        #expect(try postingMultiset(reader, hashes) == expected)
        #expect(try reader.check().isEmpty)
    }

    @Test("the process's bucket cache: a lookup again reads no bucket from the server; after adds, merges, a remove and compaction the lookups are still the SQLite store's")
    func bucketCache() throws {
        let server = try PostgresServer()
        defer { server.stop() }
        let dir = try TemporaryDirectory("pg-cache")
        let sqlite = try Catalog(path: dir.path("s.earcat"), create: true)
        let pg = try PostgresCatalog(url: server.url, create: true)
        sqlite.flushPostings = 5000
        pg.flushPostings = 5000
        let tracks = syntheticTracks(8, seed: 900)
        for (new, landmarks) in tracks.prefix(4) {
            _ = try sqlite.add(new, landmarks: landmarks, peaks: [])
            _ = try pg.add(new, landmarks: landmarks, peaks: [])
        }
        try sqlite.flushIndex()
        try pg.flushIndex()
        let hashes = Array(Set(tracks.flatMap { $0.1.map(\.hash) } + [1 << 20, 5])).sorted()
        let reader = try PostgresCatalog(url: server.url, readOnly: true)
        try expectSameLookups(sqlite, reader, hashes, "first reads")
        #expect(reader.bucketReads.server > 0)
        // A second store of the process (another serve worker) finds every bucket in the cache, empty ones too.
        let other = try PostgresCatalog(url: server.url, readOnly: true)
        try expectSameLookups(sqlite, other, hashes, "from the cache")
        #expect(other.bucketReads.server == 0 && other.bucketReads.cache > 0, "\(other.bucketReads)")
        // New segments (then merged with the cached one) are read from the server; the answers follow them.
        for (new, landmarks) in tracks.suffix(4) {
            _ = try sqlite.add(new, landmarks: landmarks, peaks: [])
            _ = try pg.add(new, landmarks: landmarks, peaks: [])
        }
        try sqlite.flushIndex()
        try pg.flushIndex()
        try expectSameLookups(sqlite, other, hashes, "after more adds")
        #expect(other.bucketReads.server > 0)
        let removed = try #require(try pg.tracks().first { $0.title == "T2" })
        try sqlite.remove(ids: [removed.id])
        try pg.remove(ids: [removed.id])
        try sqlite.compact()
        try pg.compact()
        try expectSameLookups(sqlite, other, hashes, "after remove and compaction")
        #expect(try postingSequence(other, hashes).allSatisfy { $0.track != removed.contentHash })
        // Off: every bucket from the server.
        let uncached = try PostgresCatalog(url: server.url, readOnly: true)
        uncached.cachesBuckets = false
        try expectSameLookups(sqlite, uncached, hashes, "without the cache")
        #expect(uncached.bucketReads.cache == 0)
    }

    @Test("a damaged bucket or segment description gives .damaged, never a crash; check lists it")
    func damagedIndex() throws {
        let server = try PostgresServer()
        defer { server.stop() }
        let pg = try PostgresCatalog(url: server.url, create: true)
        let tracks = syntheticTracks(4, seed: 500)
        for (new, landmarks) in tracks { _ = try pg.add(new, landmarks: landmarks, peaks: randomPeaks(seed: 2, count: 50)) }
        try pg.flushIndex()
        #expect(try pg.check().isEmpty)
        let hashes = Array(Set(tracks.flatMap { $0.1.map(\.hash) }))
        for (blob, what) in [("\\xff", "frame width 255"), ("\\x00", "frame width 0"), ("\\x10", "")] {
            try server.sql("UPDATE index_buckets SET data = '\(blob)' WHERE bucket = (SELECT min(bucket) FROM index_buckets)")
            let reader = try PostgresCatalog(url: server.url, readOnly: true)
            // Buckets never change in place but here: the process's cache would still hold the last damage.
            reader.cachesBuckets = false
            if !what.isEmpty {
                let e = catalogError { try reader.lookup(hashes: hashes) { _, _, _ in } }
                #expect(e?.code == .damaged && e?.message.contains(what) == true, "\(String(describing: e))")
            } else {
                try reader.lookup(hashes: hashes) { _, _, _ in }
            }
            let problems = try reader.check()
            #expect(problems.contains { $0.contains("index segment") }, "\(problems)")
        }
        try server.sql("UPDATE index_segments SET bucket_bits = 40")
        let reader = try PostgresCatalog(url: server.url, readOnly: true)
        #expect(catalogError { try reader.lookup(hashes: hashes) { _, _, _ in } }?.code == .damaged)
        #expect(try reader.check().contains { $0.contains("description") })
    }

    @Test("writers adding and indexing at once: every track whole, pending or indexed, never both or neither")
    func concurrentIndexers() throws {
        let server = try PostgresServer()
        defer { server.stop() }
        _ = try PostgresCatalog(url: server.url, create: true)
        let url = server.url
        let errors = Collected<String>()
        let tracksPerThread = 12
        let reading = Collected<Int>()
        race(3) { thread in
            do {
                let catalog = try PostgresCatalog(url: url, readOnly: thread == 2)
                guard thread < 2 else {
                    // A reader looking up one hash of every track while the others write: a track's postings are
                    // all there or none.
                    for _ in 0..<40 {
                        var perTrack: [Int64: Int] = [:]
                        try catalog.lookup(hashes: [7]) { _, t, _ in perTrack[t, default: 0] += 1 }
                        // 40 each, and one more where a track's random landmarks drew hash 7 too (seed 1000's fourth).
                        let stored = try catalog.landmarks(ofTracks: Set(perTrack.keys)).mapValues { $0.filter { $0.hash == 7 }.count }
                        if let bad = perTrack.first(where: { $0.value != stored[$0.key] }) {
                            errors.append("track \(bad.key) has \(bad.value) postings of hash 7, \(stored[bad.key] ?? 0) stored")
                        }

                        reading.append(perTrack.count)
                    }
                    return
                }
                catalog.flushPostings = 7000
                for (new, landmarks) in syntheticTracks(tracksPerThread, seed: 1000 + UInt64(thread) * 100) {
                    _ = try catalog.add(new, landmarks: landmarks, peaks: [])
                }
                try catalog.close()
            } catch { errors.append("thread \(thread): \(error)") }
        }
        #expect(errors.all.isEmpty, "\(errors.all)")
        let catalog = try PostgresCatalog(url: url, readOnly: true)
        let tracks = try catalog.tracks()
        #expect(tracks.count == 2 * tracksPerThread)
        #expect(try catalog.check().isEmpty)
        #expect(try catalog.indexLayout().segments >= 1)
        let all = try catalog.landmarks(ofTracks: Set(tracks.map(\.id)))
        var expected: [PGPosting] = []
        for t in tracks { expected += (all[t.id] ?? []).map { PGPosting(hash: $0.hash, track: t.contentHash, frame: $0.frame) } }
        let hashes = Array(Set(expected.map(\.hash)))
        #expect(try postingMultiset(catalog, hashes) == expected.sorted())
    }
}
