import EarmarkCatalog
import EarmarkSignature
import EarmarkTestSupport
import Foundation
import Testing

// Catalog unit tests use synthetic landmarks: exact posting sets are easy to state, and no audio
// decoding is needed. Real music goes through the catalog in the matching, kit and CLI tests.

/// `count` landmarks with hashes drawn from `hashes` (or the whole 21-bit space) and frames below `frames`
/// (20,000: a track of 200 s).
func makeLandmarks(seed: UInt64, count: Int, hashes: Range<UInt32> = 0..<(1 << 21), frames: UInt32 = 20_000) -> [Landmark] {
    var rng = SeededRandom(seed: seed)
    return (0..<count).map { _ in
        Landmark(hash: UInt32.random(in: hashes, using: &rng), frame: UInt32.random(in: 0..<frames, using: &rng))
    }
}

func makePeaks(seed: UInt64, count: Int) -> [Peak] {
    var rng = SeededRandom(seed: seed)
    var frame: UInt32 = 0
    return (0..<count).map { _ in
        frame += UInt32.random(in: 0..<5, using: &rng)
        return Peak(frame: frame, bin: UInt16.random(in: 12..<187, using: &rng), rank: 0, level: 10)
    }
}

struct Posting: Hashable { var hash: UInt32; var track: Int64; var frame: UInt32 }

/// Every posting stored for exactly `hashes` (lookup returns whole buckets; callers filter the exact hash).
func postings(_ catalog: Catalog, _ hashes: some Sequence<UInt32>) throws -> Set<Posting> {
    let wanted = Set(hashes)
    var out = Set<Posting>()
    let asked = Array(wanted)
    try catalog.lookup(hashes: asked) { i, t, f in
        out.insert(Posting(hash: asked[i], track: t, frame: f))
    }
    return out
}

func expected(_ landmarks: [Landmark], track: Int64) -> Set<Posting> {
    Set(landmarks.map { Posting(hash: $0.hash, track: track, frame: $0.frame) })
}

func catalogError(_ body: () throws -> Void) -> CatalogError.Code? {
    do {
        try body()
        return nil
    } catch let e as CatalogError {
        return e.code
    } catch {
        Issue.record("unexpected error \(error)")
        return nil
    }
}

/// A catalog file with two tracks, A and B, whose landmarks share many buckets.
struct TwoTrackCatalog {
    let dir: TemporaryDirectory
    let path: String
    let a: Track, b: Track
    /// A's hashes lie in [0, 2^20), B's in [2^19, 2^21): half of A's range overlaps B's.
    let landmarksA = makeLandmarks(seed: 1, count: 3000, hashes: 0..<(1 << 20))
    let landmarksB = makeLandmarks(seed: 2, count: 3000, hashes: (1 << 19)..<(1 << 21), frames: 18_000)

    init() throws {
        dir = try TemporaryDirectory("catalog")
        path = dir.path("test.earcat")
        let catalog = try Catalog(path: path, create: true)
        guard case .added(let a) = try catalog.add(NewTrack(title: "A", artist: "Artist A", duration: 200, contentHash: "hash-a"),
                                                   landmarks: landmarksA, peaks: makePeaks(seed: 1, count: 500)),
              case .added(let b) = try catalog.add(NewTrack(title: "B", duration: 180, contentHash: "hash-b"),
                                                   landmarks: landmarksB, peaks: makePeaks(seed: 2, count: 500))
        else { throw TestSupportError("fresh catalog reported a duplicate") }
        // Into a segment, though small catalogs keep their landmarks in the file: both paths get tested.
        try catalog.flushIndex()
        self.a = a
        self.b = b
    }

    var hashesOnlyInA: Set<UInt32> { Set(landmarksA.map(\.hash)).subtracting(landmarksB.map(\.hash)) }
}

@Suite("Catalog: adding, reopening, removing")
struct CatalogContentTests {
    @Test("tracks and postings survive closing and reopening")
    func survivesReopen() throws {
        let f = try TwoTrackCatalog()
        #expect(f.a.id != f.b.id)
        #expect(f.a.landmarkCount == Set(f.landmarksA.map { "\($0.hash)/\($0.frame)" }).count, "duplicates stored once")
        for readOnly in [false, true] {
            let reopened = try Catalog(path: f.path, readOnly: readOnly)
            let tracks = try reopened.tracks()
            #expect(tracks.map(\.title) == ["A", "B"])
            #expect(tracks.first?.artist == "Artist A")
            #expect(tracks.first?.duration == 200)
            #expect(tracks == [f.a, f.b])
            #expect(try postings(reopened, f.landmarksA.map(\.hash)).filter { $0.track == f.a.id } == expected(f.landmarksA, track: f.a.id))
            #expect(try postings(reopened, f.landmarksB.map(\.hash)).filter { $0.track == f.b.id } == expected(f.landmarksB, track: f.b.id))
            let stats = try reopened.stats()
            #expect(stats.trackCount == 2)
            #expect(stats.totalDuration == 380)
            #expect(try reopened.check().isEmpty)
        }
    }

    @Test("a track keeps its peaks ranked below queryRankLimit; a signature's deeper peaks are not stored")
    func storedPeakRanks() throws {
        let dir = try TemporaryDirectory("peak-ranks")
        let catalog = try Catalog(path: dir.path("ranks.earcat"), create: true)
        let limit = catalog.configuration.queryRankLimit
        var rng = SeededRandom(seed: 3)
        let peaks = makePeaks(seed: 3, count: 800).map { p in
            var q = p
            q.rank = UInt16.random(in: 0..<UInt16(catalog.configuration.deepRankLimit), using: &rng)
            return q
        }
        guard case .added(let t) = try catalog.add(NewTrack(title: "R", duration: 30, contentHash: "r"),
                                                   landmarks: makeLandmarks(seed: 3, count: 100, frames: 3000), peaks: peaks)
        else { throw TestSupportError("not added") }
        let kept = peaks.filter { Int($0.rank) < limit }
        #expect(kept.count > 100 && kept.count < peaks.count - 100)
        let stored = try catalog.peaks(trackID: t.id)
        #expect(stored.map(\.frame) == kept.map(\.frame))
        #expect(stored.map(\.bin) == kept.map(\.bin))
    }

    @Test("lookup returns exactly the postings of the asked hashes")
    func lookupReturnsExactHashes() throws {
        let f = try TwoTrackCatalog()
        let catalog = try Catalog(path: f.path, readOnly: true)
        let askedLandmarks = Array(f.landmarksA.prefix(50))
        let asked = Array(Set(askedLandmarks.map(\.hash)))
        var raw: [Posting] = []
        try catalog.lookup(hashes: asked) { i, t, fr in raw.append(Posting(hash: asked[i], track: t, frame: fr)) }
        let stored = expected(f.landmarksA, track: f.a.id).union(expected(f.landmarksB, track: f.b.id))
        #expect(raw.count == Set(raw).count, "each posting once")
        #expect(Set(raw) == stored.filter { Set(asked).contains($0.hash) })
        // Hashes nobody stored return nothing.
        let used = Set(stored.map(\.hash))
        let absent = (0..<UInt32(1 << 21)).lazy.filter { !used.contains($0) }.prefix(200)
        var none = 0
        try catalog.lookup(hashes: Array(absent)) { _, _, _ in none += 1 }
        #expect(none == 0)
    }

    @Test("a reader follows another connection's adds, before and after they are flushed into a segment, and its removals; a writer its own")
    func readerFollowsWriters() throws {
        let f = try TwoTrackCatalog()
        let reader = try Catalog(path: f.path, readOnly: true)
        let hashes = f.landmarksA.map(\.hash) + f.landmarksB.map(\.hash)
        let before = try postings(reader, hashes)
        #expect(before == expected(f.landmarksA, track: f.a.id).union(expected(f.landmarksB, track: f.b.id)))

        // Another connection adds a track: the reader sees it while it is pending, and after the flush.
        let writer = try Catalog(path: f.path)
        let c = makeLandmarks(seed: 77, count: 300, frames: 3000)
        guard case .added(let trackC) = try writer.add(NewTrack(title: "C", duration: 30, contentHash: "hash-c"),
                                                       landmarks: c, peaks: []) else {
            Issue.record("C was not added")
            return
        }
        #expect(try writer.indexLayout().segments == 1, "C is pending, not yet in a segment")
        #expect(try postings(reader, c.map(\.hash)).filter { $0.track == trackC.id } == expected(c, track: trackC.id))
        try writer.flushIndex()
        #expect(try writer.indexLayout().postings == before.count + Set(c.map { "\($0.hash) \($0.frame)" }).count)
        #expect(try postings(reader, c.map(\.hash)).filter { $0.track == trackC.id } == expected(c, track: trackC.id))
        try writer.remove(ids: [f.a.id])
        #expect(try postings(reader, f.hashesOnlyInA).isEmpty)

        // Its own writes too.
        try writer.remove(ids: [trackC.id])
        #expect(try postings(writer, c.map(\.hash)).allSatisfy { $0.track != trackC.id })
        #expect(try postings(writer, f.landmarksB.map(\.hash)) == expected(f.landmarksB, track: f.b.id))
        #expect(try reader.check().isEmpty)
    }

    @Test("adding identical audio (same content hash) is a no-op")
    func duplicateContentHash() throws {
        let f = try TwoTrackCatalog()
        let catalog = try Catalog(path: f.path)
        let other = makeLandmarks(seed: 99, count: 500, frames: 1000)
        let result = try catalog.add(NewTrack(title: "A again", duration: 10, contentHash: "hash-a"),
                                     landmarks: other, peaks: [])
        #expect(result == .duplicate(f.a))
        #expect(try catalog.tracks() == [f.a, f.b])
        let found = try postings(catalog, other.map(\.hash))
        #expect(!found.contains { !Set([f.a.id, f.b.id]).contains($0.track) }, "no new track id")
        #expect(found.isSubset(of: expected(f.landmarksA, track: f.a.id).union(expected(f.landmarksB, track: f.b.id))),
                "no new postings")
    }

    @Test("remove deletes the track and all its postings, and leaves the other track intact")
    func removeTrack() throws {
        let f = try TwoTrackCatalog()
        let catalog = try Catalog(path: f.path)
        try catalog.remove(ids: [f.a.id])
        #expect(try catalog.tracks() == [f.b])
        #expect(try catalog.track(id: f.a.id) == nil)
        #expect(try postings(catalog, f.landmarksA.map(\.hash)).allSatisfy { $0.track == f.b.id })
        #expect(try postings(catalog, f.hashesOnlyInA).isEmpty)
        #expect(try postings(catalog, f.landmarksB.map(\.hash)) == expected(f.landmarksB, track: f.b.id))
        #expect(try catalog.check().isEmpty)

        // Ids are never reused.
        guard case .added(let c) = try catalog.add(NewTrack(title: "C", duration: 5, contentHash: "hash-c"),
                                                   landmarks: makeLandmarks(seed: 3, count: 10, frames: 500), peaks: []) else {
            Issue.record("C was not added")
            return
        }
        #expect(c.id > f.b.id)
        // The removal was committed: another connection sees it.
        #expect(try Catalog(path: f.path, readOnly: true).tracks().map(\.title) == ["B", "C"])
    }

    @Test("removing an unknown id throws .noSuchTrack and removes nothing, not even the known ids")
    func removeUnknown() throws {
        let f = try TwoTrackCatalog()
        let catalog = try Catalog(path: f.path)
        #expect(catalogError { try catalog.remove(ids: [f.a.id, 9_999]) } == .noSuchTrack)
        #expect(try catalog.tracks() == [f.a, f.b])
        #expect(try postings(catalog, f.landmarksA.map(\.hash)).filter { $0.track == f.a.id } == expected(f.landmarksA, track: f.a.id))
    }

    @Test("merge copies every track with new ids, its postings, peaks and analyses; the same audio is not copied twice; small batches give the same result")
    func merge() throws {
        for batch in [16_000_000, 1] {
            let f = try TwoTrackCatalog()
            let source = try Catalog(path: f.path)
            try source.setAnalysis(TrackAnalysis(kind: "loudness", version: 1, json: Data(#"{"integrated":-14}"#.utf8)), trackID: f.b.id)
            let dir = try TemporaryDirectory("merge")
            let dest = try Catalog(path: dir.path("dest.earcat"), create: true)
            let cLandmarks = makeLandmarks(seed: 31, count: 800)
            guard case .added(let c) = try dest.add(NewTrack(title: "C", duration: 200, contentHash: "hash-c"),
                                                     landmarks: cLandmarks, peaks: makePeaks(seed: 31, count: 300)),
                  case .added = try dest.add(NewTrack(title: "A here", duration: 200, contentHash: "hash-a"),
                                             landmarks: makeLandmarks(seed: 32, count: 10), peaks: [])
            else { throw TestSupportError("fixture not added") }
            let merged = try dest.merge(from: source, batchPostings: batch)
            #expect(merged.map(\.source.id) == [f.a.id, f.b.id])
            guard merged.count == 2, case .duplicate(let dupe) = merged[0].result, case .added(let b) = merged[1].result else {
                Issue.record("expected A duplicate, B added: \(merged)")
                continue
            }
            #expect(dupe.title == "A here")
            #expect(b.id > c.id && b.title == "B" && b.duration == 180 && b.contentHash == "hash-b")
            #expect(b.landmarkCount == f.b.landmarkCount)
            #expect(try postings(dest, f.landmarksB.map(\.hash)).filter { $0.track == b.id } == expected(f.landmarksB, track: b.id))
            #expect(try postings(dest, cLandmarks.map(\.hash)).filter { $0.track == c.id } == expected(cLandmarks, track: c.id))
            #expect(try dest.peaks(trackID: b.id).map(\.frame) == source.peaks(trackID: f.b.id).map(\.frame))
            #expect(try dest.peaks(trackID: b.id).map(\.bin) == source.peaks(trackID: f.b.id).map(\.bin))
            #expect(try dest.analyses(trackID: b.id).map(\.kind) == ["loudness"])
            #expect(try dest.check().isEmpty)
        }
    }

    @Test("a copy made through the store interface (Catalog.create(copyOf:at:)) is one file with every track, posting and source stamp, and verifies whole")
    func createCopy() throws {
        let f = try TwoTrackCatalog()
        let source = try Catalog(path: f.path)
        _ = try source.relink(id: f.b.id, sourcePath: "/music/b.flac", size: 1234, modified: 1_700_000_000.5)
        let dir = try TemporaryDirectory("copy")
        let path = dir.path("copy.earcat")
        try Catalog.create(copyOf: source, at: path)
        #expect(!FileManager.default.fileExists(atPath: path + "-index"))
        let copy = try Catalog(path: path, readOnly: true)
        #expect(try copy.tracks().map(\.contentHash) == [f.a, f.b].map(\.contentHash))
        let b = try #require(try copy.track(contentHash: f.b.contentHash))
        #expect(try copy.sourceStamp(trackID: b.id) == SourceStamp(size: 1234, modified: 1_700_000_000.5))
        #expect(try postings(copy, f.landmarksB.map(\.hash)).filter { $0.track == b.id } == expected(f.landmarksB, track: b.id))
        #expect(catalogError { try Catalog.create(copyOf: source, at: path) } == .invalidArgument)

        let merged = try source.tracks().map { t in (source: t, result: CatalogAddResult.duplicate(try copy.track(contentHash: t.contentHash)!)) }
        let whole = try copy.verifyCopy(merged, from: source, sample: 2)
        #expect(whole.problems.isEmpty && whole.tracks == 2 && whole.landmarks == f.a.landmarkCount + f.b.landmarkCount, "\(whole)")
        // Pointing a source track at the wrong copy is found by both checks.
        let crossed = [(source: merged[0].source, result: merged[1].result), merged[1]]
        #expect(try copy.verifyCopy(crossed, from: source, sample: 2).problems.count == 2)
    }

    @Test("update deletes metadata keys; a key that is not there is .invalidArgument and changes nothing")
    func removeMetadataKeys() throws {
        let f = try TwoTrackCatalog()
        let catalog = try Catalog(path: f.path)
        _ = try catalog.update(id: f.a.id, metadata: ["isrc": .string("X1"), "year": .string("1999"), "mood": .string("calm")])
        let t = try catalog.update(id: f.a.id, metadata: ["mood": .string("bright")], removingKeys: ["year"])
        #expect(t.metadata == ["isrc": .string("X1"), "mood": .string("bright")])
        #expect(catalogError { _ = try catalog.update(id: f.a.id, title: "changed", removingKeys: ["isrc", "nope"]) } == .invalidArgument)
        #expect(try catalog.track(id: f.a.id)?.title == "A", "nothing changed")
        #expect(try catalog.track(id: f.a.id)?.metadata["isrc"] == .string("X1"))
    }

    @Test("update changes the given fields only")
    func updateTrack() throws {
        let f = try TwoTrackCatalog()
        let catalog = try Catalog(path: f.path)
        let t = try catalog.update(id: f.a.id, title: "New title", metadata: ["year": .number(1999)])
        #expect(t.title == "New title")
        #expect(t.artist == "Artist A")
        #expect(t.metadata["year"] == .number(1999))
        #expect(try Catalog(path: f.path, readOnly: true).track(id: f.a.id) == t)
        #expect(catalogError { _ = try catalog.update(id: 12_345, title: "x") } == .noSuchTrack)
    }

    @Test("export writes a catalog that opens with the same tracks and postings")
    func export() throws {
        let f = try TwoTrackCatalog()
        let catalog = try Catalog(path: f.path)
        let copy = f.dir.path("copy.earcat")
        try catalog.export(to: copy)
        let exported = try Catalog(path: copy, readOnly: true)
        #expect(try exported.tracks() == [f.a, f.b])
        let hashes = f.landmarksA.map(\.hash) + f.landmarksB.map(\.hash)
        #expect(try postings(exported, hashes) == postings(catalog, hashes))
        #expect(catalogError { try catalog.export(to: copy) } == .invalidArgument, "never overwrites")
    }

    @Test("a catalog's header (an export's too) is told from other SQLite files, other bytes and a cut-short header")
    func catalogHeader() throws {
        let f = try TwoTrackCatalog()
        let copy = f.dir.path("copy.earcat")
        try Catalog(path: f.path).export(to: copy)
        func head(_ path: String) throws -> [UInt8] { [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)).prefix(100)) }
        #expect(Catalog.hasCatalogHeader(try head(f.path)))
        #expect(Catalog.hasCatalogHeader(try head(copy)))
        #expect(!Catalog.hasCatalogHeader(Array(try head(copy).prefix(71))))
        let other = f.dir.path("other.sqlite")
        try Run.sqlite(other, "CREATE TABLE t(x)")
        #expect(!Catalog.hasCatalogHeader(try head(other)))
        #expect(!Catalog.hasCatalogHeader(Array("RIFF\u{0}\u{0}\u{0}\u{0}WAVEfmt ".utf8) + [UInt8](repeating: 0, count: 80)))
    }
}

@Suite("Catalog: opening bad or missing files")
struct CatalogOpenTests {
    @Test("a missing catalog is .notFound unless asked to create it")
    func missing() throws {
        let dir = try TemporaryDirectory("missing")
        let path = dir.path("sub/none.earcat")
        #expect(catalogError { _ = try Catalog(path: path) } == .notFound)
        #expect(catalogError { _ = try Catalog(path: path, readOnly: true) } == .notFound)
        #expect(!FileManager.default.fileExists(atPath: path))
        _ = try Catalog(path: path, create: true)
        #expect(FileManager.default.fileExists(atPath: path), "create: true makes the file and its folder")
    }

    @Test("a text file is .damaged and is left untouched", arguments: [false, true])
    func textFile(readOnly: Bool) throws {
        let dir = try TemporaryDirectory("text")
        let path = dir.path("notes.earcat")
        let text = Data(String(repeating: "shopping list: milk, eggs, bread\n", count: 200).utf8)
        try text.write(to: URL(fileURLWithPath: path))
        #expect(catalogError { _ = try Catalog(path: path, readOnly: readOnly) } == .damaged)
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == text)
    }

    @Test("another application's SQLite database is .damaged")
    func foreignDatabase() throws {
        let dir = try TemporaryDirectory("foreign")
        let path = dir.path("other.db")
        try Run.sqlite(path, "CREATE TABLE notes(x TEXT); INSERT INTO notes VALUES ('hello');")
        #expect(catalogError { _ = try Catalog(path: path) } == .damaged)
        #expect(try Run.sqlite(path, "SELECT x FROM notes").trimmingCharacters(in: .whitespacesAndNewlines) == "hello")
    }

    @Test("a catalog built with another signature_version is .versionMismatch")
    func otherSignatureVersion() throws {
        let f = try TwoTrackCatalog()
        try Run.sqlite(f.path, "UPDATE catalog_info SET value = '99' WHERE key = 'signature_version'")
        #expect(catalogError { _ = try Catalog(path: f.path) } == .versionMismatch)
        #expect(catalogError { _ = try Catalog(path: f.path, readOnly: true) } == .versionMismatch)
        #expect(try Run.sqlite(f.path, "SELECT count(*) FROM tracks").trimmingCharacters(in: .whitespacesAndNewlines) == "2")
    }

    @Test("a catalog with a newer schema is .versionMismatch")
    func newerSchema() throws {
        let f = try TwoTrackCatalog()
        try Run.sqlite(f.path, "PRAGMA user_version = \(Catalog.schemaVersion + 1)")
        #expect(catalogError { _ = try Catalog(path: f.path) } == .versionMismatch)
        #expect(catalogError { _ = try Catalog(path: f.path, readOnly: true) } == .versionMismatch)
    }
}

@Suite("Catalog: read-only access")
struct CatalogReadOnlyTests {
    @Test("a catalog opened read-only refuses writes with .readOnly and keeps its data")
    func readOnlyMode() throws {
        let f = try TwoTrackCatalog()
        let catalog = try Catalog(path: f.path, readOnly: true)
        #expect(catalogError {
            _ = try catalog.add(NewTrack(title: "C", duration: 1, contentHash: "hash-c"), landmarks: makeLandmarks(seed: 5, count: 10, frames: 100), peaks: [])
        } == .readOnly)
        #expect(catalogError { try catalog.remove(ids: [f.a.id]) } == .readOnly)
        #expect(try Catalog(path: f.path, readOnly: true).tracks() == [f.a, f.b])
    }

    @Test("a catalog whose folder cannot be created is .readOnly")
    func uncreatableFolder() throws {
        let dir = try TemporaryDirectory("nofolder")
        let file = dir.file("plain-file")
        try Data("x".utf8).write(to: file)
        // A regular file cannot hold a folder, whoever we are (root included).
        #expect(catalogError { _ = try Catalog(path: file.path + "/sub/catalog.earcat", create: true) } == .readOnly)
    }

    @Test("a write-protected catalog file opens for writing as .readOnly")
    func writeProtectedFile() throws {
        let f = try TwoTrackCatalog()
        if geteuid() != 0 {
            try FileManager.default.setAttributes([.posixPermissions: 0o444], ofItemAtPath: f.path)
            defer { try? FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: f.path) }
            #expect(catalogError { _ = try Catalog(path: f.path) } == .readOnly)
        } else {
            // Root ignores permission bits, but not the immutable attribute (when the file system has it).
            guard (try? Run.checked("chattr", ["+i", f.path])) != nil else {
                // No immutable attribute here: the folder test above covers .readOnly for root.
                return
            }
            defer { _ = try? Run.checked("chattr", ["-i", f.path]) }
            #expect(catalogError { _ = try Catalog(path: f.path) } == .readOnly)
        }
        #expect(try Catalog(path: f.path, readOnly: true).tracks() == [f.a, f.b], "still readable")
    }
}

@Suite("Catalog: locking")
struct CatalogLockTests {
    @Test("a write while another process holds the write lock fails with .locked after busyTimeout, and nothing is lost")
    func lockedByAnotherProcess() throws {
        let f = try TwoTrackCatalog()
        let catalog = try Catalog(path: f.path, busyTimeout: 0.5)
        let shell = try SQLiteShell(database: f.path)
        defer { shell.close() }
        try shell.execute("BEGIN IMMEDIATE; INSERT INTO catalog_info(key, value) VALUES ('held-by', 'test');")

        let clock = ContinuousClock()
        let start = clock.now
        #expect(catalogError {
            _ = try catalog.add(NewTrack(title: "C", duration: 1, contentHash: "hash-c"),
                                landmarks: makeLandmarks(seed: 5, count: 10, frames: 100), peaks: [])
        } == .locked)
        let waited = clock.now - start
        #expect(waited >= .milliseconds(400), "gave up after \(waited), before the busy timeout")
        #expect(waited < .seconds(5), "waited \(waited) for a 0.5-s busy timeout")
        #expect(catalogError { try catalog.remove(ids: [f.a.id]) } == .locked)

        // Readers are not blocked by a writer (WAL).
        let reader = try Catalog(path: f.path, readOnly: true, busyTimeout: 0.5)
        #expect(try reader.tracks() == [f.a, f.b])
        #expect(!(try postings(reader, f.landmarksA.prefix(10).map(\.hash))).isEmpty)

        try shell.execute("ROLLBACK;")
        shell.close()
        #expect(try catalog.tracks() == [f.a, f.b], "the failed writes changed nothing")
        #expect(try postings(catalog, f.landmarksA.map(\.hash)).filter { $0.track == f.a.id } == expected(f.landmarksA, track: f.a.id))
        // Once the lock is gone, the same connection writes again.
        let result = try catalog.add(NewTrack(title: "C", duration: 1, contentHash: "hash-c"),
                                     landmarks: makeLandmarks(seed: 5, count: 10, frames: 100), peaks: [])
        guard case .added = result else {
            Issue.record("expected .added, got \(result)")
            return
        }
        #expect(try catalog.tracks().count == 3)
    }
}

@Suite("Catalog: concurrent creation")
struct CatalogCreationRaceTests {
    @Test("two connections creating the same new catalog at the same moment both succeed (5 rounds)")
    func createRace() throws {
        let dir = try TemporaryDirectory("create-race")
        for round in 0..<5 {
            let path = dir.path("race-\(round).earcat")
            let errors = Box<String>()
            let barrier = SpinBarrier(parties: 2)
            let group = DispatchGroup()
            for _ in 0..<2 {
                group.enter()
                Thread.detachNewThread {
                    barrier.arriveAndWait()
                    do { _ = try Catalog(path: path, create: true) } catch { errors.append("\(error)") }
                    group.leave()
                }
            }
            group.wait()
            #expect(errors.all.isEmpty, "round \(round): \(errors.all)")
            #expect(try Catalog(path: path, readOnly: true).tracks().isEmpty)
        }
    }
}

/// Lets threads start a racy step at (nearly) the same instant.
final class SpinBarrier: @unchecked Sendable {
    private let lock = NSLock()
    private var arrived = 0
    private let parties: Int
    init(parties: Int) { self.parties = parties }
    func arriveAndWait() {
        lock.withLock { arrived += 1 }
        while lock.withLock({ arrived < parties }) {}
    }
}

final class Box<T>: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [T] = []
    func append(_ e: T) { lock.withLock { items.append(e) } }
    var all: [T] { lock.withLock { items } }
}

/// Mounts for the storage tests: a read-only view of a folder, and a small file system that fills up.
/// Both need root and a kernel that lets this process mount (true on CI machines; not inside every container).
enum TestMounts {
    static let available: Bool = {
        guard geteuid() == 0, let dir = try? TemporaryDirectory("mount-probe") else { return false }
        let target = dir.path("m")
        try? FileManager.default.createDirectory(atPath: target, withIntermediateDirectories: true)
        guard (try? Run.checked("mount", ["-t", "tmpfs", "-o", "size=64k", "tmpfs", target])) != nil else { return false }
        _ = try? Run.checked("umount", [target])
        return true
    }()

    /// `folder` seen read-only at a new mount point, until `body` returns.
    static func readOnlyView<T>(of folder: String, in dir: TemporaryDirectory, _ body: (String) throws -> T) throws -> T {
        let view = dir.path("read-only-view")
        try FileManager.default.createDirectory(atPath: view, withIntermediateDirectories: true)
        try Run.checked("mount", ["--bind", folder, view])
        defer { _ = try? Run.checked("umount", [view]) }
        try Run.checked("mount", ["-o", "remount,ro,bind", view])
        return try body(view)
    }

    /// A tmpfs of `kilobytes` at a new mount point, until `body` returns.
    static func smallDisk<T>(kilobytes: Int, in dir: TemporaryDirectory, _ body: (String) throws -> T) throws -> T {
        let disk = dir.path("small-disk")
        try FileManager.default.createDirectory(atPath: disk, withIntermediateDirectories: true)
        try Run.checked("mount", ["-t", "tmpfs", "-o", "size=\(kilobytes)k", "tmpfs", disk])
        defer { _ = try? Run.checked("umount", ["-l", disk]) }
        return try body(disk)
    }
}

@Suite("Catalog: damage and hostile storage")
struct CatalogDamageTests {
    /// Overwrites page `page` (1-based) of the file with a pattern, as a bad sector or a stray write would.
    func overwrite(page: Int, of path: String) throws {
        let pageSize = Int(try Run.sqlite(path, "PRAGMA page_size").trimmingCharacters(in: .whitespacesAndNewlines))!
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: path))
        defer { try? handle.close() }
        try handle.seek(toOffset: UInt64((page - 1) * pageSize))
        try handle.write(contentsOf: Data((0..<pageSize).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }))
    }

    @Test("with one page overwritten, every write is refused naming `catalog check` and the file is left as it was; reads and check tell the truth")
    func overwrittenPage() throws {
        let f = try TwoTrackCatalog()
        let root = Int(try Run.sqlite(f.path, "SELECT rootpage FROM sqlite_master WHERE name = 'postings'")
            .trimmingCharacters(in: .whitespacesAndNewlines))!
        try overwrite(page: root, of: f.path)
        let before = try Data(contentsOf: URL(fileURLWithPath: f.path))
        for create in [false, true] {
            do {
                _ = try Catalog(path: f.path, create: create)
                Issue.record("a damaged catalog opened for writing")
            } catch let e as CatalogError {
                #expect(e.code == .damaged)
                #expect(e.message.contains("earmark catalog check"), "\(e)")
            }
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: f.path)) == before, "not a byte written")
        let reader = try Catalog(path: f.path, readOnly: true)
        #expect(!(try reader.check()).isEmpty, "check reports the damage")
        // A read either returns what is stored or says the catalog is damaged.
        do { #expect(try reader.tracks() == [f.a, f.b]) } catch let e as CatalogError { #expect(e.code == .damaged) }
    }

    @Test("a truncated catalog file is refused for writing and reported by check")
    func truncatedFile() throws {
        let f = try TwoTrackCatalog()
        let data = try Data(contentsOf: URL(fileURLWithPath: f.path))
        try data.prefix(data.count / 2).write(to: URL(fileURLWithPath: f.path))
        let before = try Data(contentsOf: URL(fileURLWithPath: f.path))
        #expect(catalogError { _ = try Catalog(path: f.path) } == .damaged)
        #expect(try Data(contentsOf: URL(fileURLWithPath: f.path)) == before)
        let problems = (try? Catalog(path: f.path, readOnly: true).check()) ?? ["cannot open"]
        #expect(!problems.isEmpty)
    }

    @Test("a catalog path of one non-ASCII character after a double slash opens (Foundation's NSString path methods trap on it)")
    func oddPath() throws {
        let dir = try TemporaryDirectory("odd")
        let path = dir.path + "//\u{04A8}"
        _ = try Catalog(path: path, create: true)
        #expect(try Catalog(path: path, readOnly: true).tracks().isEmpty)
        #expect(FileManager.default.fileExists(atPath: dir.path("\u{04A8}")))
    }

    @Test("a URL or a folder given as the catalog is refused with a clear error and creates nothing")
    func urlAndFolder() throws {
        let dir = try TemporaryDirectory("url")
        do {
            _ = try Catalog(path: "postgres://user@db.example:5432/music", create: true)
            Issue.record("a URL was accepted")
        } catch let e as CatalogError {
            #expect(e.code == .invalidArgument)
            #expect(e.message.contains("postgres://"), "\(e)")
        }
        #expect(!FileManager.default.fileExists(atPath: "postgres:"), "no folder named after the scheme")
        do {
            _ = try Catalog(path: dir.path, readOnly: true)
            Issue.record("a folder was accepted")
        } catch let e as CatalogError {
            #expect(e.code == .invalidArgument)
            #expect(e.message.contains("folder"), "\(e)")
        }
    }

    @Test("a catalog made by adds (WAL mode) reads from read-only storage: tracks, lookups and check; writes are .readOnly",
          .enabled(if: TestMounts.available, "needs root and permission to mount"))
    func readOnlyStorage() throws {
        let f = try TwoTrackCatalog()
        #expect(try Run.sqlite(f.path, "PRAGMA journal_mode").contains("wal"))
        try TestMounts.readOnlyView(of: f.dir.path, in: try TemporaryDirectory("ro")) { view in
            let path = (view as NSString).appendingPathComponent("test.earcat")
            let catalog = try Catalog(path: path, readOnly: true)
            #expect(try catalog.tracks() == [f.a, f.b])
            #expect(try postings(catalog, f.landmarksA.map(\.hash)).filter { $0.track == f.a.id } == expected(f.landmarksA, track: f.a.id))
            #expect(try catalog.check().isEmpty)
            #expect(try catalog.peaks(trackID: f.b.id).count == 500)
            #expect(catalogError { _ = try Catalog(path: path) } == .readOnly)
        }
    }

    @Test("a full disk fails the add that does not fit with .ioError; the tracks before it stay whole",
          .enabled(if: TestMounts.available, "needs root and permission to mount"))
    func fullDisk() throws {
        try TestMounts.smallDisk(kilobytes: 512, in: try TemporaryDirectory("full")) { disk in
            let path = (disk as NSString).appendingPathComponent("full.earcat")
            var added = 0
            var failure: CatalogError?
            do {
                let catalog = try Catalog(path: path, create: true)
                for k in 0..<200 {
                    let landmarks = makeLandmarks(seed: UInt64(100 + k), count: 4000)
                    _ = try catalog.add(NewTrack(title: "T\(k)", duration: 200, contentHash: "full-\(k)"),
                                        landmarks: landmarks, peaks: makePeaks(seed: UInt64(k), count: 2000))
                    added += 1
                }
            } catch let e as CatalogError {
                failure = e
            }
            #expect(failure?.code == .ioError, "\(String(describing: failure))")
            #expect(failure?.message.contains("disk full") == true, "\(String(describing: failure))")
            #expect(added > 0)
            let reader = try Catalog(path: path, readOnly: true)
            #expect(try reader.tracks().map(\.title) == (0..<added).map { "T\($0)" })
            #expect(try reader.check().isEmpty)
        }
    }
}
