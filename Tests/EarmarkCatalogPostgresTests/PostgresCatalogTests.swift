import EarmarkCatalog
import EarmarkCatalogPostgres
import EarmarkSignature
import EarmarkTestSupport
import Foundation
import Testing

// Every test of the store runs against its own throwaway PostgreSQL 15 server (PostgresServer: initdb in a temporary
// folder, a free loopback port). Without PostgreSQL they are skipped, except in CI (CI=true), where they fail saying
// what to install.

struct SplitMix: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// `count` landmarks with hashes drawn from `hashes` and frames below `frames` (20,000: a 200-s track).
func randomLandmarks(seed: UInt64, count: Int, hashes: Range<UInt32> = 0..<(1 << 21), frames: UInt32 = 20_000) -> [Landmark] {
    var rng = SplitMix(state: seed)
    return (0..<count).map { _ in Landmark(hash: UInt32.random(in: hashes, using: &rng), frame: UInt32.random(in: 0..<frames, using: &rng)) }
}

func randomPeaks(seed: UInt64, count: Int) -> [Peak] {
    var rng = SplitMix(state: seed)
    var frame: UInt32 = 0
    return (0..<count).map { _ in
        frame += UInt32.random(in: 0..<5, using: &rng)
        return Peak(frame: frame, bin: UInt16.random(in: 12..<187, using: &rng), rank: 0, level: 10)
    }
}

struct PGPosting: Hashable, Comparable {
    var hash: UInt32
    var track: String
    var frame: UInt32
    static func < (a: Self, b: Self) -> Bool { (a.hash, a.track, a.frame) < (b.hash, b.track, b.frame) }
}

/// Every posting of `hashes` in `store`, its track named by content hash (ids differ between stores), sorted: a multiset.
func postingMultiset(_ store: any CatalogStore, _ hashes: [UInt32], commonHashes: Double? = nil) throws -> [PGPosting] {
    let asked = Array(Set(hashes)).sorted()
    var ids: [Int64] = []
    var raw: [(Int, Int64, UInt32)] = []
    try store.lookup(hashes: asked, commonHashes: commonHashes) { i, t, f in raw.append((i, t, f)); ids.append(t) }
    let names = try store.tracks(ids: Set(ids)).mapValues(\.contentHash)
    return raw.map { PGPosting(hash: asked[$0.0], track: names[$0.1] ?? "?\($0.1)", frame: $0.2) }.sorted()
}

func catalogError(_ body: () throws -> Void) -> CatalogError? {
    do {
        try body()
        return nil
    } catch let e as CatalogError {
        return e
    } catch {
        Issue.record("unexpected error \(error)")
        return nil
    }
}

final class Collected<T>: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [T] = []
    func append(_ e: T) { lock.withLock { items.append(e) } }
    var all: [T] { lock.withLock { items } }
}

/// Starts `parties` threads at (nearly) the same instant and waits for them all.
func race(_ parties: Int, _ body: @escaping @Sendable (Int) -> Void) {
    let arrived = Collected<Int>()
    let group = DispatchGroup()
    for i in 0..<parties {
        group.enter()
        Thread.detachNewThread {
            arrived.append(i)
            while arrived.all.count < parties {}
            body(i)
            group.leave()
        }
    }
    group.wait()
}

@Suite("PostgresCatalog: opening, versions, errors", .enabled(if: PostgresServer.testsEnabled))
struct PostgresOpeningTests {
    @Test("a database without a catalog is .notFound unless asked to create it; created, it opens over TCP and the unix socket, read-only too")
    func createAndOpen() throws {
        let server = try PostgresServer()
        defer { server.stop() }
        #expect(catalogError { _ = try PostgresCatalog(url: server.url) }?.code == .notFound)
        #expect(catalogError { _ = try PostgresCatalog(url: server.url, create: true, readOnly: true) }?.code == .notFound)
        let created = try PostgresCatalog(url: server.url, create: true)
        #expect(try created.tracks().isEmpty && created.trackCount() == 0)
        #expect(created.location == server.url)
        let stats = try created.stats()
        #expect(stats.schemaVersion == PostgresCatalog.schemaVersion && stats.signatureVersion == Int(SignatureConfiguration.current.version))
        let viaSocket = try PostgresCatalog(url: server.socketURL)
        #expect(try viaSocket.check().isEmpty)
        let reader = try PostgresCatalog(url: server.url, readOnly: true)
        #expect(try reader.tracks().isEmpty)
        #expect(catalogError { _ = try reader.add(NewTrack(duration: 10, contentHash: "x"), landmarks: [], peaks: []) }?.code == .readOnly)
        #expect(try server.sql("SELECT value FROM catalog_info WHERE key = 'format'") == "earmark-catalog")
        // Two connections creating the catalog in a fresh database at once: the advisory lock makes them take turns.
        try server.sql("CREATE DATABASE racing", database: "postgres")
        let racingURL = server.url.replacingOccurrences(of: "/earmark?", with: "/racing?")
        let errors = Collected<String>()
        race(3) { _ in
            do { _ = try PostgresCatalog(url: racingURL, create: true) } catch { errors.append("\(error)") }
        }
        #expect(errors.all.isEmpty, "\(errors.all)")
        #expect(try server.sql("SELECT count(*) FROM catalog_info WHERE key = 'format'", database: "racing") == "1")
    }

    @Test("another signature version is .versionMismatch, a newer schema too; a catalog_info of another format or foreign tables are .damaged")
    func versions() throws {
        let server = try PostgresServer()
        defer { server.stop() }
        _ = try PostgresCatalog(url: server.url, create: true)
        try server.sql("UPDATE catalog_info SET value = '999' WHERE key = 'signature_version'")
        #expect(catalogError { _ = try PostgresCatalog(url: server.url) }?.code == .versionMismatch)
        #expect(catalogError { _ = try PostgresCatalog(url: server.url, readOnly: true) }?.code == .versionMismatch)
        try server.sql("UPDATE catalog_info SET value = '\(SignatureConfiguration.current.version)' WHERE key = 'signature_version'")
        try server.sql("UPDATE catalog_info SET value = '99' WHERE key = 'schema_version'")
        let newer = catalogError { _ = try PostgresCatalog(url: server.url) }
        #expect(newer?.code == .versionMismatch && newer?.message.contains("upgrade Earmark") == true)
        try server.sql("UPDATE catalog_info SET value = '1' WHERE key = 'schema_version'; UPDATE catalog_info SET value = 'photo-album' WHERE key = 'format'")
        let foreign = catalogError { _ = try PostgresCatalog(url: server.url, create: true) }
        #expect(foreign?.code == .damaged && foreign?.message.contains("not an Earmark catalog") == true)
        // A database holding another application's `tracks` table.
        try server.sql("CREATE DATABASE other", database: "postgres")
        try server.sql("CREATE TABLE tracks(name text)", database: "other")
        let otherURL = server.url.replacingOccurrences(of: "/earmark?", with: "/other?")
        #expect(catalogError { _ = try PostgresCatalog(url: otherURL, create: true) }?.code == .damaged)
        #expect(try server.sql("SELECT to_regclass('catalog_info') IS NULL", database: "other") == "t")
    }

    @Test("a server that cannot be reached, or stops, gives an error naming host:port; a missing database is .notFound")
    func unreachable() throws {
        let server = try PostgresServer()
        defer { server.stop() }
        let catalog = try PostgresCatalog(url: server.url, create: true)
        _ = try catalog.trackCount()
        let noDatabase = catalogError { _ = try PostgresCatalog(url: server.url.replacingOccurrences(of: "/earmark?", with: "/nothere?"), create: true) }
        #expect(noDatabase?.code == .notFound && noDatabase?.message.contains("nothere") == true, "\(String(describing: noDatabase))")
        server.halt()
        let lost = catalogError { _ = try catalog.tracks() }
        #expect(lost?.code == .unavailable)
        #expect(lost?.message.contains("127.0.0.1:\(server.port)") == true, "\(String(describing: lost))")
        let refused = catalogError { _ = try PostgresCatalog(url: server.url) }
        #expect(refused?.code == .unavailable)
        #expect(refused?.message.contains("cannot connect to the PostgreSQL server at 127.0.0.1:\(server.port)") == true, "\(String(describing: refused))")
    }
}

@Suite("PostgresCatalog: writing and reading", .enabled(if: PostgresServer.testsEnabled))
struct PostgresWritingTests {
    @Test("add, duplicate, update, relink, analyses, remove: the SQLite store's meanings; a reader follows a writer")
    func writes() throws {
        let server = try PostgresServer()
        defer { server.stop() }
        let catalog = try PostgresCatalog(url: server.url, create: true)
        let reader = try PostgresCatalog(url: server.url, readOnly: true)
        #expect(try reader.trackCount() == 0)
        let la = randomLandmarks(seed: 1, count: 3000, hashes: 0..<(1 << 20))
        let lb = randomLandmarks(seed: 2, count: 3000, hashes: (1 << 19)..<(1 << 21), frames: 18_000)
        let loud = TrackAnalysis(kind: "loudness", version: 1, json: Data(#"{"integrated": -14.5, "range":6}"#.utf8))
        guard case .added(let a) = try catalog.add(NewTrack(title: "A", artist: "Artist A", metadata: ["year": .number(1999)], duration: 200,
                                                            sourcePath: "/music/a.flac", sourceSize: 1234, sourceModified: 1.5e9, contentHash: "hash-a"),
                                                   landmarks: la + la.prefix(10), peaks: randomPeaks(seed: 1, count: 500), analyses: [loud]),
              case .added(let b) = try catalog.add(NewTrack(title: "B", duration: 180, contentHash: "hash-b"),
                                                   landmarks: lb, peaks: randomPeaks(seed: 2, count: 500))
        else { Issue.record("fresh catalog reported a duplicate"); return }
        #expect(a.landmarkCount == Set(la.map { "\($0.hash)/\($0.frame)" }).count)
        #expect(a.metadata == ["year": .number(1999)] && a.sourcePath == "/music/a.flac" && b.id > a.id)
        #expect(try catalog.sourceStamp(trackID: a.id) == SourceStamp(size: 1234, modified: 1.5e9))
        #expect(try catalog.sourceStamp(trackID: b.id) == nil)
        #expect(try catalog.unchangedTrack(sourcePath: "/music/a.flac", size: 1234, modified: 1.5e9)?.id == a.id)
        #expect(try catalog.unchangedTrack(sourcePath: "/music/a.flac", size: 1235, modified: 1.5e9) == nil)
        // The reader's caches follow the writer's commits.
        #expect(try reader.trackCount() == 2)
        let expectedA = Set(la.map { PGPosting(hash: $0.hash, track: "hash-a", frame: $0.frame) })
        #expect(try Set(postingMultiset(reader, la.map(\.hash)).filter { $0.track == "hash-a" }) == expectedA)
        #expect(try reader.analyses(trackID: a.id) == [loud])
        #expect(try catalog.peaks(trackID: a.id).map(\.frame) == randomPeaks(seed: 1, count: 500).map(\.frame))
        #expect(try catalog.landmarks(ofTracks: [b.id])[b.id].map { Set($0.map { "\($0.hash)/\($0.frame)" }) } == Set(lb.map { "\($0.hash)/\($0.frame)" }))
        // Identical audio is stored once.
        guard case .duplicate(let dupe) = try catalog.add(NewTrack(title: "A again", duration: 200, contentHash: "hash-a"), landmarks: lb, peaks: [])
        else { Issue.record("a second add of hash-a was not a duplicate"); return }
        #expect(dupe == a)
        // Data no track of its duration can hold is refused, writing nothing.
        #expect(catalogError { _ = try catalog.add(NewTrack(duration: 10, contentHash: "late"), landmarks: [Landmark(hash: 5, frame: 20_000)], peaks: []) }?.code == .invalidArgument)
        #expect(catalogError { _ = try catalog.add(NewTrack(duration: .nan, contentHash: "nan"), landmarks: [], peaks: []) }?.code == .invalidArgument)
        // Updates.
        let u = try catalog.update(id: a.id, title: "A2", metadata: ["mood": .string("calm")])
        #expect(u.title == "A2" && u.artist == "Artist A" && u.metadata == ["year": .number(1999), "mood": .string("calm")])
        #expect(catalogError { _ = try catalog.update(id: a.id, title: "X", removingKeys: ["nope"]) }?.code == .invalidArgument)
        #expect(try catalog.track(id: a.id)?.title == "A2")
        #expect(try catalog.update(id: a.id, removingKeys: ["year"]).metadata == ["mood": .string("calm")])
        #expect(catalogError { _ = try catalog.update(id: 999, title: "X") }?.code == .noSuchTrack)
        let moved = try catalog.relink(id: b.id, sourcePath: "/new/b.flac", size: 99, modified: nil)
        #expect(try moved.sourcePath == "/new/b.flac" && catalog.sourceStamp(trackID: b.id) == SourceStamp(size: 99, modified: nil))
        #expect(catalogError { _ = try catalog.relink(id: 999, sourcePath: "/x", size: nil, modified: nil) }?.code == .noSuchTrack)
        let key = TrackAnalysis(kind: "key", version: 1, json: Data(#"{"tonic":"F","mode":"major"}"#.utf8))
        let loud2 = TrackAnalysis(kind: "loudness", version: 2, json: Data(#"{"integrated":-10}"#.utf8))
        try catalog.setAnalysis(key, trackID: a.id)
        try catalog.setAnalysis(loud2, trackID: a.id)
        #expect(try catalog.analyses(trackID: a.id) == [key, loud2])
        #expect(catalogError { try catalog.setAnalysis(key, trackID: 999) }?.code == .noSuchTrack)
        // Removing: all or nothing.
        #expect(catalogError { try catalog.remove(ids: [a.id, 999]) }?.code == .noSuchTrack)
        #expect(try catalog.trackCount() == 2)
        try catalog.remove(ids: [a.id])
        #expect(try catalog.track(id: a.id) == nil && catalog.analyses(trackID: a.id).isEmpty && catalog.peaks(trackID: a.id).isEmpty)
        #expect(try reader.trackCount() == 1)
        #expect(try postingMultiset(reader, la.map(\.hash)).allSatisfy { $0.track == "hash-b" })
        // Ids are never reused.
        guard case .added(let c) = try catalog.add(NewTrack(title: "C", duration: 100, contentHash: "hash-c"), landmarks: [], peaks: [])
        else { Issue.record("C not added"); return }
        #expect(c.id > b.id)
        #expect(try catalog.check().isEmpty)
        let stats = try catalog.stats()
        #expect(stats.trackCount == 2 && stats.landmarkCount == b.landmarkCount && stats.totalDuration == 280 && stats.fileBytes > 0)
    }

    @Test("commonHashes skips a hash as the SQLite store's index does: more than max(64, c × mean postings) postings in the segments")
    func commonHashes() throws {
        let server = try PostgresServer()
        defer { server.stop() }
        let dir = try TemporaryDirectory("pg-common")
        let sqlite = try Catalog(path: dir.path("common.earcat"), create: true)
        let pg = try PostgresCatalog(url: server.url, create: true)
        // Hash 7 at 100 frames of one track and 30 of another: common; the rest spread out.
        let a = (0..<100).map { Landmark(hash: 7, frame: UInt32($0 * 3)) } + randomLandmarks(seed: 5, count: 2000)
        let b = (0..<30).map { Landmark(hash: 7, frame: UInt32($0 * 5)) } + (0..<60).map { Landmark(hash: 9, frame: UInt32($0)) }
        for store in [sqlite as any CatalogStore, pg] {
            _ = try store.add(NewTrack(title: "A", duration: 200, contentHash: "a"), landmarks: a, peaks: [])
            _ = try store.add(NewTrack(title: "B", duration: 200, contentHash: "b"), landmarks: b, peaks: [])
        }
        // Into a segment: where both stores judge common hashes (pending postings are never skipped).
        try sqlite.flushIndex()
        try pg.flushIndex()
        let hashes = [7, 9] + a.suffix(50).map(\.hash)
        for common: Double? in [nil, 16, 1e9] {
            let expected = try postingMultiset(sqlite, hashes, commonHashes: common)
            #expect(try postingMultiset(pg, hashes, commonHashes: common) == expected, "commonHashes \(String(describing: common))")
        }
        #expect(try postingMultiset(pg, [7], commonHashes: 16).isEmpty)
        #expect(try postingMultiset(pg, [9], commonHashes: 16).count == 60)
    }

    @Test("two connections adding at once on two threads lose nothing; audio both add is stored once")
    func concurrentAdders() throws {
        let server = try PostgresServer()
        defer { server.stop() }
        _ = try PostgresCatalog(url: server.url, create: true)
        let url = server.url
        let results = Collected<(thread: Int, hash: String, added: Bool)>()
        let errors = Collected<String>()
        race(2) { thread in
            do {
                let catalog = try PostgresCatalog(url: url)
                for i in 0..<20 {
                    // Each thread's own tracks, and five both add, interleaved.
                    let hash = i % 4 == 0 ? "shared-\(i / 4)" : "own-\(thread)-\(i)"
                    let seed = UInt64(truncatingIfNeeded: hash.hashValue) | 1
                    let r = try catalog.add(NewTrack(title: hash, duration: 200, contentHash: hash),
                                            landmarks: randomLandmarks(seed: seed, count: 500), peaks: randomPeaks(seed: seed, count: 50))
                    if case .added = r { results.append((thread, hash, true)) } else { results.append((thread, hash, false)) }
                }
            } catch { errors.append("thread \(thread): \(error)") }
        }
        #expect(errors.all.isEmpty, "\(errors.all)")
        let catalog = try PostgresCatalog(url: url, readOnly: true)
        let tracks = try catalog.tracks()
        #expect(tracks.count == 35)
        #expect(Set(tracks.map(\.contentHash)).count == 35)
        for s in 0..<5 {
            let adds = results.all.filter { $0.hash == "shared-\(s)" }
            #expect(adds.count == 2 && adds.filter(\.added).count == 1, "shared-\(s): \(adds)")
        }
        #expect(try catalog.check().isEmpty)
        // Every track's postings are found.
        let all = try catalog.landmarks(ofTracks: Set(tracks.map(\.id)))
        for t in tracks { #expect(all[t.id]?.count == t.landmarkCount && t.landmarkCount > 0) }
        let probe = tracks.prefix(3).flatMap { all[$0.id]!.prefix(20).map(\.hash) }
        let found = try postingMultiset(catalog, probe)
        for t in tracks.prefix(3) { #expect(found.contains { $0.track == t.contentHash }) }
    }

    @Test("damaged rows written with raw SQL give .damaged, never a crash; check lists them")
    func damagedRows() throws {
        let server = try PostgresServer()
        defer { server.stop() }
        let catalog = try PostgresCatalog(url: server.url, create: true)
        var ids: [Int64] = []
        for i in 0..<4 {
            guard case .added(let t) = try catalog.add(NewTrack(title: "T\(i)", duration: 200, contentHash: "h\(i)"),
                                                       landmarks: randomLandmarks(seed: UInt64(i + 10), count: 400), peaks: randomPeaks(seed: UInt64(i), count: 100))
            else { Issue.record("not added"); return }
            ids.append(t.id)
        }
        #expect(try catalog.check().isEmpty)
        try server.sql("""
            UPDATE track_peaks SET data = '\\xffff' WHERE track_id = \(ids[0]);
            UPDATE track_landmarks SET data = '\\x80' WHERE track_id = \(ids[1]);
            UPDATE track_landmarks SET data = '\\x05ffff7f' WHERE track_id = \(ids[2]);
            UPDATE tracks SET landmark_count = 3 WHERE id = \(ids[3]);
            """)
        let fresh = try PostgresCatalog(url: server.url, readOnly: true)
        #expect(catalogError { _ = try fresh.peaks(trackID: ids[0]) }?.code == .damaged)
        #expect(catalogError { _ = try fresh.lookup(hashes: [1, 2, 3]) { _, _, _ in } }?.code == .damaged)
        #expect(catalogError { _ = try fresh.landmarks(ofTracks: [ids[1]]) }?.code == .damaged)
        #expect(catalogError { _ = try fresh.landmarks(ofTracks: [ids[2]]) }?.code == .damaged)
        #expect(try fresh.peaks(trackID: ids[1]).count == 100)
        let problems = try fresh.check()
        #expect(problems.contains { $0.contains("track \(ids[0]): stored peaks are invalid") }, "\(problems)")
        #expect(problems.contains { $0.contains("track \(ids[1]): landmarks are invalid") }, "\(problems)")
        #expect(problems.contains { $0.contains("track \(ids[2]): landmarks are invalid") }, "\(problems)")
        #expect(problems.contains { $0.contains("track \(ids[3]): 400 landmarks stored, 3 recorded") || $0.contains("track \(ids[3]):") }, "\(problems)")
        #expect(problems.count == 4, "\(problems)")
        // A row of the wrong shape: a duration that is not a number PostgreSQL can hold as this build wrote it.
        try server.sql("DELETE FROM track_peaks WHERE track_id = \(ids[3]); UPDATE tracks SET duration = 'NaN' WHERE id = \(ids[1])")
        let again = try fresh.check()
        #expect(again.contains { $0.contains("track \(ids[3]) has no stored peaks") }, "\(again)")
        #expect(again.contains { $0.contains("track \(ids[1]): invalid duration") }, "\(again)")
        // A catalog_info that lost its format.
        try server.sql("DELETE FROM catalog_info WHERE key = 'format'")
        #expect(try fresh.check().first?.contains("not an Earmark catalog") == true)
        #expect(catalogError { _ = try PostgresCatalog(url: server.url) }?.code == .damaged)
    }
}

@Suite("PostgresCatalog: real music, against the SQLite store", .enabled(if: PostgresServer.testsEnabled))
struct PostgresRealMusicTests {
    @Test("merge SQLite → PostgreSQL → SQLite keeps every track, posting, peak and analysis; lookups answer as SQLite's")
    func roundTrip() async throws {
        let reference = try await ReferenceCatalog.shared.value()
        let server = try PostgresServer()
        defer { server.stop() }
        let dir = try TemporaryDirectory("pg-round-trip")
        // A copy of the shared reference catalog, with analyses added.
        let sqlitePath = dir.path("source.earcat")
        try Catalog(path: reference.path, readOnly: true).export(to: sqlitePath)
        let sqlite = try Catalog(path: sqlitePath)
        let sourceTracks = try sqlite.tracks()
        #expect(sourceTracks.count >= 4)
        let loud = TrackAnalysis(kind: "loudness", version: 1, json: Data(#"{"integrated":-13.5,"range":6.0}"#.utf8))
        try sqlite.setAnalysis(loud, trackID: sourceTracks[0].id)
        try sqlite.setAnalysis(TrackAnalysis(kind: "key", version: 1, json: Data(#"{"tonic":"F"}"#.utf8)), trackID: sourceTracks[1].id)

        let pg = try PostgresCatalog(url: server.url, create: true)
        let merged = try pg.merge(from: sqlite)
        #expect(merged.count == sourceTracks.count)
        #expect(merged.allSatisfy { if case .added = $0.result { true } else { false } })
        try expectSame(sqlite, pg)
        // Again: every track is a duplicate, nothing changes.
        let again = try pg.merge(from: sqlite)
        #expect(again.allSatisfy { if case .duplicate = $0.result { true } else { false } })
        #expect(try pg.trackCount() == sourceTracks.count)
        #expect(try pg.check().isEmpty)

        let back = try Catalog(path: dir.path("back.earcat"), create: true)
        _ = try back.merge(from: pg)
        try expectSame(sqlite, back)
        try expectSame(pg, back)
        let s = try sqlite.stats(), p = try pg.stats()
        #expect(s.trackCount == p.trackCount && s.landmarkCount == p.landmarkCount && abs(s.totalDuration - p.totalDuration) < 1e-9)
    }

    /// The same tracks (by content hash: fields, source stamps, analyses, peaks, landmarks) and the same lookups.
    func expectSame(_ x: any CatalogStore, _ y: any CatalogStore) throws {
        let xt = try x.tracks(), yt = try y.tracks()
        #expect(xt.count == yt.count)
        let yByHash = Dictionary(uniqueKeysWithValues: yt.map { ($0.contentHash, $0) })
        let xLandmarks = try x.landmarks(ofTracks: Set(xt.map(\.id))), yLandmarks = try y.landmarks(ofTracks: Set(yt.map(\.id)))
        var allHashes = Set<UInt32>()
        for t in xt {
            guard let u = yByHash[t.contentHash] else { Issue.record("\(t.contentHash) missing"); continue }
            #expect(t.title == u.title && t.artist == u.artist && t.album == u.album && t.metadata == u.metadata)
            #expect(t.duration == u.duration && t.sourcePath == u.sourcePath && t.landmarkCount == u.landmarkCount)
            #expect(try x.sourceStamp(trackID: t.id) == y.sourceStamp(trackID: u.id))
            #expect(try x.analyses(trackID: t.id) == y.analyses(trackID: u.id))
            let xp = try x.peaks(trackID: t.id), yp = try y.peaks(trackID: u.id)
            #expect(xp.map(\.frame) == yp.map(\.frame) && xp.map(\.bin) == yp.map(\.bin) && !xp.isEmpty)
            let xl = (xLandmarks[t.id] ?? []).map { [$0.hash, $0.frame] }.sorted { $0.lexicographicallyPrecedes($1) }
            let yl = (yLandmarks[u.id] ?? []).map { [$0.hash, $0.frame] }.sorted { $0.lexicographicallyPrecedes($1) }
            #expect(xl == yl && xl.count == t.landmarkCount)
            allHashes.formUnion(xl.map { $0[0] })
        }
        let hashes = Array(allHashes)
        let xs = try postingMultiset(x, hashes), ys = try postingMultiset(y, hashes)
        #expect(xs.count == xt.reduce(0) { $0 + $1.landmarkCount })
        #expect(xs == ys)
    }
}
