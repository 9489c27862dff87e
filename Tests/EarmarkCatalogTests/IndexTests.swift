@testable import EarmarkCatalog
import EarmarkSignature
import EarmarkTestSupport
import Foundation
import Testing

// The segment index with synthetic postings: exact answers are easy to state. Real music goes through it in
// the matching, kit and CLI tests.

/// `count` random postings: keys over the whole 32-bit space or `keys`, tracks in `tracks`, frames below `frames`.
func randomPostings(seed: UInt64, count: Int, keys: ClosedRange<UInt32> = 0...UInt32.max,
                    tracks: ClosedRange<UInt32> = 1...500, frames: UInt32 = 1 << 20) -> [EarmarkCatalog.Posting] {
    var rng = SeededRandom(seed: seed)
    return (0..<count).map { _ in
        EarmarkCatalog.Posting(key: UInt32.random(in: keys, using: &rng), track: UInt32.random(in: tracks, using: &rng),
                               frame: UInt32.random(in: 0..<frames, using: &rng))
    }
}

func writeSegment(_ postings: [EarmarkCatalog.Posting], to path: String, keyBits: Int = 32) throws -> IndexSegment {
    var sorted = postings
    PostingIndex.sortByMixedKey(&sorted, keyBits: keyBits)
    let lo = sorted.map(\.track).min() ?? 0, hi = sorted.map(\.track).max() ?? 0
    var w = try IndexSegmentWriter(path: path, postingCount: sorted.count, tracks: lo...hi, keyBits: keyBits)
    for p in sorted { try w.append(p) }
    try w.finish()
    return try IndexSegment(path: path)
}

struct Found: Hashable { var key: UInt32; var track: UInt32; var frame: UInt32 }

@Suite("Index segments")
struct IndexSegmentTests {
    @Test("mix is a bijection within the key's bits: unmix undoes it, and 13-bit keys fill all 8,192 values", arguments: [8, 13, 21, 32])
    func mixRoundTrip(bits: Int) {
        var rng = SeededRandom(seed: 5)
        let top = UInt32(truncatingIfNeeded: (UInt64(1) << UInt64(bits)) - 1)
        for _ in 0..<100_000 {
            let k = UInt32.random(in: 0...top, using: &rng)
            let m = IndexSegment.mix(k, bits: bits)
            #expect(m <= top && IndexSegment.unmix(m, bits: bits) == k)
        }
        #expect(IndexSegment.unmix(IndexSegment.mix(0, bits: bits), bits: bits) == 0)
        #expect(IndexSegment.unmix(IndexSegment.mix(top, bits: bits), bits: bits) == top)
        if bits == 13 { #expect(Set((0...top).map { IndexSegment.mix($0, bits: bits) }).count == 8_192) }
    }

    @Test("a segment returns exactly the postings of each key, at sizes from one posting to 300,000, for 32- and 21-bit keys",
          arguments: [1, 70, 5_000, 300_000], [32, 21])
    func roundTrip(count: Int, keyBits: Int) throws {
        let dir = try TemporaryDirectory("segment")
        // Few distinct keys among many postings, so that keys repeat within buckets.
        let top = UInt32(truncatingIfNeeded: (UInt64(1) << UInt64(keyBits)) - 1)
        let postings = randomPostings(seed: UInt64(count), count: count, keys: 0...UInt32(max(1, count / 3)) &* 7919)
            .map { EarmarkCatalog.Posting(key: $0.key & top, track: $0.track, frame: $0.frame) }
        let segment = try writeSegment(postings, to: dir.path("s.seg"), keyBits: keyBits)
        #expect(segment.postingCount == count && segment.keyBits == keyBits)
        #expect(segment.bucketBits == IndexSegment.bucketBits(for: count, keyBits: keyBits))
        var byKey: [UInt32: [Found]] = [:]
        for p in postings { byKey[p.key, default: []].append(Found(key: p.key, track: p.track, frame: p.frame)) }
        for (key, want) in byKey.prefix(2_000) {
            var got: [Found] = []
            try segment.lookup(key) { got.append(Found(key: key, track: $0, frame: $1)) }
            #expect(got.sorted { ($0.track, $0.frame) < ($1.track, $1.frame) } == want.sorted { ($0.track, $0.frame) < ($1.track, $1.frame) })
        }
        var rng = SeededRandom(seed: 9)
        var strays = 0
        for _ in 0..<2_000 {
            let k = UInt32.random(in: 0...UInt32.max, using: &rng)  // above 2^keyBits too: nothing there
            guard byKey[k] == nil else { continue }
            try segment.lookup(k) { _, _ in strays += 1 }
        }
        #expect(strays == 0)
        var all: [Found] = []
        try segment.forEach { all.append(Found(key: $0.key, track: $0.track, frame: $0.frame)) }
        #expect(all.count == count)
        #expect(Set(all) == Set(postings.map { Found(key: $0.key, track: $0.track, frame: $0.frame) }))
    }

    @Test("a batch of keys (any order, repeats, keys wider than the segment's, with a limit) answers as one lookup per key",
          arguments: [21, 32])
    func batchedLookup(keyBits: Int) throws {
        let dir = try TemporaryDirectory("segment-batch")
        let top = UInt32(truncatingIfNeeded: (UInt64(1) << UInt64(keyBits)) - 1)
        let postings = randomPostings(seed: 17, count: 60_000, keys: 0...20_000).map {
            EarmarkCatalog.Posting(key: ($0.key % 97 == 0 ? 5 : $0.key) & top, track: $0.track, frame: $0.frame)
        }
        let segment = try writeSegment(postings, to: dir.path("s.seg"), keyBits: keyBits)
        var rng = SeededRandom(seed: 3)
        var keys = (0..<3_000).map { _ in UInt32.random(in: 0...25_000, using: &rng) } + [5, 5, top, UInt32.max]
        keys.shuffle(using: &rng)
        for limit in [Int.max, 40] {
            var one: [[Found]] = Array(repeating: [], count: keys.count)
            for (i, k) in keys.enumerated() { try segment.lookup(k, limit: limit) { one[i].append(Found(key: k, track: $0, frame: $1)) } }
            var batch: [[Found]] = Array(repeating: [], count: keys.count)
            try segment.lookup(keys: keys, limit: limit) { batch[$0].append(Found(key: keys[$0], track: $1, frame: $2)) }
            #expect(batch == one)
            #expect(one.reduce(0) { $0 + $1.count } > 0)
            // The common key 5 (about 600 postings) is answered without a limit and skipped under one.
            #expect(one[keys.firstIndex(of: 5)!].isEmpty == (limit == 40))
        }
    }

    @Test("a lookup counts the 64-KB windows it maps, the mapping holds no more than that, and a resident limit bounds it with the same answers")
    func residentWindows() throws {
        let dir = try TemporaryDirectory("segment-resident")
        let path = try writeSegment(randomPostings(seed: 23, count: 2_000_000), to: dir.path("s.seg")).path
        let window = 1 << IndexSegment.windowShift
        var rng = SeededRandom(seed: 5)
        let keys = (0..<20_000).map { _ in UInt32.random(in: 0...UInt32.max, using: &rng) }
        /// Kilobytes of the segment's mappings resident in this process, as the kernel reports them.
        func mappedKB() throws -> Int {
            let smaps = try String(contentsOfFile: "/proc/self/smaps", encoding: .utf8)
            var inSegment = false, total = 0
            for line in smaps.split(separator: "\n") {
                if line.contains("-"), line.split(separator: " ").count >= 5, line.first?.isHexDigit == true {
                    inSegment = line.hasSuffix(path)
                } else if inSegment, line.hasPrefix("Rss:") {
                    total += Int(line.split(separator: " ")[1]) ?? 0
                }
            }
            return total
        }
        var all: [Found] = []
        do {
            let segment = try IndexSegment(path: path)
            try segment.lookup(keys: keys) { all.append(Found(key: keys[$0], track: $1, frame: $2)) }
            #expect(!all.isEmpty)
            #expect(segment.residentBytes % window == 0 && segment.residentBytes > 8 * window)
            #expect(segment.residentBytes <= (segment.byteCount / window + 1) * window)
            #expect(try mappedKB() * 1024 <= segment.residentBytes)
        }
        #expect(try mappedKB() == 0)
        // Under a limit of 8 windows, the rest is read without mapping it: the same postings, no more mapped.
        let segment = try IndexSegment(path: path)
        let limit = 8 * window
        var bounded: [Found] = []
        try segment.lookup(ordered: IndexSegment.order(keys, bits: segment.keyBits), residentLimit: limit) {
            bounded.append(Found(key: keys[$0], track: $1, frame: $2))
        }
        #expect(bounded == all)
        #expect(segment.residentBytes <= limit)
        #expect(try mappedKB() * 1024 <= limit)
    }

    @Test("keys of 21 bits are stored in fewer bits than keys of 32; a bucket per key when postings outnumber keys")
    func narrowKeys() throws {
        let dir = try TemporaryDirectory("segment-narrow")
        let postings = randomPostings(seed: 11, count: 200_000, keys: 0...((1 << 21) - 1))
        let wide = try writeSegment(postings, to: dir.path("32.seg"), keyBits: 32)
        let narrow = try writeSegment(postings, to: dir.path("21.seg"), keyBits: 21)
        func size(_ s: IndexSegment) throws -> Int { try FileManager.default.attributesOfItem(atPath: s.path)[.size] as! Int }
        let (wideBytes, narrowBytes) = (try size(wide), try size(narrow))
        // 11 bits of residual fewer per posting: 200,000 × 11 / 8 = 275,000 bytes.
        #expect(wideBytes - narrowBytes >= 270_000, "\(wideBytes) vs \(narrowBytes)")
        let few = randomPostings(seed: 12, count: 50_000, keys: 0...255)
        let tiny = try writeSegment(few, to: dir.path("8.seg"), keyBits: 8)
        #expect(tiny.bucketBits == 8)
        var n = 0
        for key in UInt32(0)...300 { try tiny.lookup(key) { _, _ in n += 1 } }
        #expect(n == few.count)
        let wrong = EarmarkCatalog.Posting(key: 1 << 21, track: 1, frame: 0)
        var w = try IndexSegmentWriter(path: dir.path("bad.seg"), postingCount: 1, tracks: 1...1, keyBits: 21)
        #expect(throws: CatalogError.self) { try w.append(wrong) }
        w.abandon()
        #expect(throws: CatalogError.self) { _ = try IndexSegmentWriter(path: dir.path("bad.seg"), postingCount: 1, tracks: 1...1, keyBits: 33) }
    }

    @Test("a lookup with a limit skips exactly the keys with more postings than it, in buckets of one key and of many")
    func commonKeysSkipped() throws {
        let dir = try TemporaryDirectory("segment-limit")
        var postings: [EarmarkCatalog.Posting] = []
        let counts: [UInt32: Int] = [7: 10, 8: 100, 9: 101, 1_000: 1_000]
        for (key, n) in counts { for i in 0..<n { postings.append(.init(key: key, track: UInt32(1 + i % 50), frame: UInt32(i))) } }
        postings += randomPostings(seed: 13, count: 20_000, keys: 2_000...((1 << 21) - 1), tracks: 1...50)
        for bits in [21, 12] {
            let top = UInt32((1 << bits) - 1)
            let segment = try writeSegment(postings.map { .init(key: $0.key & top, track: $0.track, frame: $0.frame) },
                                           to: dir.path("l\(bits).seg"), keyBits: bits)
            for (key, n) in counts {
                var all = 0, limited = 0
                try segment.lookup(key) { _, _ in all += 1 }
                try segment.lookup(key, limit: 100) { _, _ in limited += 1 }
                #expect(all >= n && limited == (all > 100 ? 0 : all), "key \(key), \(bits) bits: \(all) / \(limited)")
            }
        }
    }

    @Test("long tracks and large track ids keep their frames and ids (widths chosen per bucket and segment)")
    func wideFields() throws {
        let dir = try TemporaryDirectory("segment-wide")
        let postings = randomPostings(seed: 3, count: 20_000, tracks: 1_000_000...1_150_000, frames: 8_640_000)
        let segment = try writeSegment(postings, to: dir.path("w.seg"))
        var all = Set<Found>()
        try segment.forEach { all.insert(Found(key: $0.key, track: $0.track, frame: $0.frame)) }
        #expect(all == Set(postings.map { Found(key: $0.key, track: $0.track, frame: $0.frame) }))
    }

    @Test("the writer refuses postings out of order, outside its track range or short of the announced count, and leaves no file")
    func writerRefuses() throws {
        let dir = try TemporaryDirectory("segment-refuse")
        let path = dir.path("r.seg")
        var sorted = randomPostings(seed: 4, count: 100)
        PostingIndex.sortByMixedKey(&sorted, keyBits: 32)
        var w = try IndexSegmentWriter(path: path, postingCount: 100, tracks: 1...500, keyBits: 32)
        try w.append(sorted[1])
        #expect(throws: CatalogError.self) { try w.append(sorted[0]) }
        w.abandon()
        var w2 = try IndexSegmentWriter(path: path, postingCount: 100, tracks: 1...10, keyBits: 32)
        #expect(throws: CatalogError.self) { try w2.append(EarmarkCatalog.Posting(key: 1, track: 11, frame: 0)) }
        w2.abandon()
        var w3 = try IndexSegmentWriter(path: path, postingCount: 100, tracks: 1...500, keyBits: 32)
        for p in sorted.prefix(99) { try w3.append(p) }
        #expect(throws: CatalogError.self) { try w3.finish() }
        w3.abandon()
        #expect(!FileManager.default.fileExists(atPath: path))
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path).isEmpty, "no temporary file left")
    }

    @Test("damaged segments are refused or throw on reading, never trap: header, truncation, directory, random bytes")
    func damage() throws {
        let dir = try TemporaryDirectory("segment-damage")
        let postings = randomPostings(seed: 6, count: 4_000)
        let good = dir.path("good.seg")
        _ = try writeSegment(postings, to: good)
        let bytes = try Data(contentsOf: URL(fileURLWithPath: good))
        func variant(_ name: String, _ change: (inout Data) -> Void) throws -> String {
            var d = bytes
            change(&d)
            let p = dir.path(name)
            try d.write(to: URL(fileURLWithPath: p))
            return p
        }
        // Header fields: refused at opening.
        for (name, at) in [("magic", 0), ("bits", 8), ("count", 16), ("track", 36), ("keyBits", 40), ("reserved", 44), ("checksum", 48)] {
            let p = try variant(name) { $0[at] ^= 0x5A }
            #expect(throws: CatalogError.self, "\(name)") { _ = try IndexSegment(path: p) }
        }
        let cut = try variant("cut") { $0.removeLast(100) }
        #expect(throws: CatalogError.self) { _ = try IndexSegment(path: cut) }
        let empty = try variant("empty") { $0 = Data() }
        #expect(throws: CatalogError.self) { _ = try IndexSegment(path: empty) }
        // A directory entry pointing past the data: the lookups of that bucket throw.
        let seg = try IndexSegment(path: good)
        let directoryStart = IndexSegment.headerBytes
        let badDir = try variant("dir") { d in
            for i in 0..<8 { d[directoryStart + 8 * 3 + i] = 0xFF }
        }
        let s = try IndexSegment(path: badDir)
        #expect(throws: CatalogError.self) { try s.forEach { _ in } }
        _ = seg
        // Random bytes in the buckets: every read either throws or answers with tracks in range.
        var rng = SeededRandom(seed: 7)
        let dataStart = directoryStart + ((1 << seg.bucketBits) + 1) * 8
        for round in 0..<20 {
            let p = try variant("noise\(round)") { d in
                for _ in 0..<50 { d[Int.random(in: dataStart..<(d.count - 8), using: &rng)] = UInt8.random(in: 0...255, using: &rng) }
            }
            let n = try IndexSegment(path: p)
            do { try n.forEach { #expect($0.track >= 1 && $0.track <= 500) } } catch is CatalogError {}
            for q in postings.prefix(200) {
                do { try n.lookup(q.key) { track, _ in #expect(track >= 1 && track <= 500) } } catch is CatalogError {}
            }
        }
    }
}

@Suite("Posting index: segments, merges, removals")
struct PostingIndexTests {
    func lookupAll(_ index: PostingIndex, _ keys: [UInt32]) throws -> Set<Found> {
        var out = Set<Found>()
        try index.lookup(keys: keys) { out.insert(Found(key: keys[$0], track: $1, frame: $2)) }
        return out
    }

    @Test("segments added one by one merge as a binary counter (few segments), and lookups answer as one set would")
    func mergesKeepFewSegments() throws {
        let dir = try TemporaryDirectory("posting-index")
        let index = try PostingIndex(folder: dir.path("x-index"), catalogID: "c1", keys: "k", keyBits: 32)
        try index.acquireLock(timeout: 1)
        var all: [EarmarkCatalog.Posting] = []
        for batch in 0..<13 {
            var p = randomPostings(seed: UInt64(100 + batch), count: 1_000, keys: 0...50_000,
                                   tracks: UInt32(batch * 10 + 1)...UInt32(batch * 10 + 10))
            all += p
            try index.addSegment(&p, tracks: Array(UInt32(batch * 10 + 1)...UInt32(batch * 10 + 10)), live: { _ in true })
            #expect(index.segments.count <= 4, "after \(batch + 1) batches: \(index.segments.count) segments")
        }
        #expect(index.postingCount == all.count)
        #expect(index.covers(1) && index.covers(130) && !index.covers(131))
        let keys = Array(Set(all.map(\.key))).sorted().prefix(3_000)
        let want = Set(all.filter { keys.contains($0.key) }.map { Found(key: $0.key, track: $0.track, frame: $0.frame) })
        #expect(try lookupAll(index, Array(keys)) == want)
        // Another connection reading the folder sees the same.
        let reader = try PostingIndex(folder: dir.path("x-index"), catalogID: "c1", keys: "k", keyBits: 32)
        #expect(try lookupAll(reader, Array(keys)) == want)
        // Files on disk: the manifest, the lock and exactly the listed segments.
        let files = Set(try FileManager.default.contentsOfDirectory(atPath: dir.path("x-index")))
        #expect(files == Set(index.manifest.segments.map(\.file) + ["manifest.json", "lock"]))
    }

    /// A locked index in `folder` holding one segment of `postings`, covering `tracks`.
    func indexWithSegment(_ folder: String, keyBits: Int, _ postings: [EarmarkCatalog.Posting], tracks: [UInt32]) throws -> PostingIndex {
        let index = try PostingIndex(folder: folder, catalogID: "c1", keys: "k", keyBits: keyBits)
        try index.acquireLock(timeout: 1)
        var p = postings
        try index.addSegment(&p, tracks: tracks, live: { _ in true })
        return index
    }

    @Test("commonKeys skips a key with more than that many times the index's mean postings per key, never one at or under 64")
    func commonKeys() throws {
        let dir = try TemporaryDirectory("posting-index-common")
        // 256 keys: about 100 postings each, key 5 about 2,100 (mean ≈ 108).
        let index = try indexWithSegment(dir.path("x-index"), keyBits: 8,
                                         randomPostings(seed: 21, count: 25_600, keys: 0...255, tracks: 1...40)
                                             + (0..<2_000).map { EarmarkCatalog.Posting(key: 5, track: UInt32(1 + $0 % 40), frame: UInt32($0)) },
                                         tracks: Array(1...40))
        func count(_ key: UInt32, _ common: Double?) throws -> Int {
            var n = 0
            try index.lookup(keys: [key], commonKeys: common) { _, _, _ in n += 1 }
            return n
        }
        #expect(try count(5, nil) > 2_000 && count(5, 4) == 0)
        #expect(try count(6, 4) == count(6, nil) && count(6, nil) > 50)
        // Factor 0.1 would be a limit of 11: the floor of 64 keeps keys of up to 64 postings.
        #expect(try count(6, 0.1) == 0)
        let other = try indexWithSegment(dir.path("y-index"), keyBits: 8,
                                         randomPostings(seed: 22, count: 2_000, keys: 0...255, tracks: 41...42), tracks: [41, 42])
        var n = 0, all = 0
        try other.lookup(keys: Array(0...255), commonKeys: 0.1) { _, _, _ in n += 1 }
        try other.lookup(keys: Array(0...255)) { _, _, _ in all += 1 }
        #expect(n == all && all == 2_000)
    }

    @Test("commonKeys judges a key by the whole index: split over two segments it is skipped as when they are merged")
    func commonKeysAcrossSegments() throws {
        let dir = try TemporaryDirectory("posting-index-common-split")
        // Key 5: 60 postings in each segment, 120 in the index: over the floor of 64, under it in either segment.
        // The first segment is over twice the second, so adding the second merges nothing.
        func postings(_ tracks: ClosedRange<UInt32>, seed: UInt64, count: Int) -> [EarmarkCatalog.Posting] {
            randomPostings(seed: seed, count: count, keys: 10...255, tracks: tracks)
                + (0..<60).map { EarmarkCatalog.Posting(key: 5, track: tracks.lowerBound + UInt32($0 % 2), frame: UInt32($0)) }
        }
        let index = try indexWithSegment(dir.path("x-index"), keyBits: 8, postings(1...2, seed: 31, count: 4_000), tracks: [1, 2])
        var second = postings(3...4, seed: 32, count: 1_000)
        try index.addSegment(&second, tracks: [3, 4], live: { _ in true })
        func count(_ key: UInt32, _ common: Double?) throws -> Int {
            var n = 0
            try index.lookup(keys: [key], commonKeys: common) { _, _, _ in n += 1 }
            return n
        }
        try #require(index.segments.count == 2)
        #expect(try count(5, nil) == 120 && count(5, 0.1) == 0)
        // A key of about 20 postings in all is under the limit however it is split.
        #expect(try count(20, 0.1) == count(20, nil) && count(20, nil) > 0)
        try index.mergeAll(live: { _ in true })
        try #require(index.segments.count == 1)
        #expect(try count(5, nil) == 120 && count(5, 0.1) == 0 && count(20, 0.1) == count(20, nil))
    }

    @Test("removed tracks are skipped at once and dropped by the next full merge, which also forgets them")
    func removals() throws {
        let dir = try TemporaryDirectory("posting-index-remove")
        let all = randomPostings(seed: 1, count: 5_000, keys: 0...2_000, tracks: 1...20)
        let index = try indexWithSegment(dir.path("x-index"), keyBits: 32, all, tracks: Array(1...20))
        var q = randomPostings(seed: 2, count: 500, keys: 0...2_000, tracks: 21...22)
        try index.addSegment(&q, tracks: [21, 22], live: { _ in true })
        try index.markRemoved([3, 7])
        let keys = Array(0...UInt32(2_000))
        let found = try lookupAll(index, keys)
        #expect(!found.contains { $0.track == 3 || $0.track == 7 })
        #expect(found.filter { $0.track <= 20 } == Set(all.filter { $0.track != 3 && $0.track != 7 }.map { Found(key: $0.key, track: $0.track, frame: $0.frame) }))
        try index.mergeAll(live: { $0 != 3 && $0 != 7 })
        #expect(index.segments.count == 1)
        #expect(index.manifest.removed.isEmpty)
        #expect(index.postingCount == all.filter { $0.track != 3 && $0.track != 7 }.count + 500)
        #expect(try lookupAll(index, keys).filter { $0.track <= 20 } == found.filter { $0.track <= 20 })
    }

    @Test("an index folder of another catalog or another key design is refused; a damaged manifest is .damaged")
    func refusals() throws {
        let dir = try TemporaryDirectory("posting-index-refuse")
        let folder = dir.path("x-index")
        let index = try PostingIndex(folder: folder, catalogID: "c1", keys: "k", keyBits: 32)
        try index.acquireLock(timeout: 1)
        var p = randomPostings(seed: 1, count: 100)
        try index.addSegment(&p, tracks: [1], live: { _ in true })
        index.releaseLock()
        #expect(catalogError { _ = try PostingIndex(folder: folder, catalogID: "c2", keys: "k", keyBits: 32) } == .damaged)
        #expect(catalogError { _ = try PostingIndex(folder: folder, catalogID: "c1", keys: "other", keyBits: 32) } == .versionMismatch)
        #expect(catalogError { _ = try PostingIndex(folder: folder, catalogID: "c1", keys: "k", keyBits: 21) } == .damaged)
        try Data("{not json".utf8).write(to: URL(fileURLWithPath: folder + "/manifest.json"))
        #expect(catalogError { _ = try PostingIndex(folder: folder, catalogID: "c1", keys: "k", keyBits: 32) } == .damaged)
    }

    @Test("a second writer waits for the lock, then fails with .locked")
    func writerLock() throws {
        let dir = try TemporaryDirectory("posting-index-lock")
        let a = try PostingIndex(folder: dir.path("x-index"), catalogID: "c1", keys: "k", keyBits: 32)
        let b = try PostingIndex(folder: dir.path("x-index"), catalogID: "c1", keys: "k", keyBits: 32)
        try a.acquireLock(timeout: 1)
        #expect(catalogError { try b.acquireLock(timeout: 0.1) } == .locked)
        a.releaseLock()
        try b.acquireLock(timeout: 0.1)
    }
}

@Suite("Catalog: pending landmarks, recovery, export and migration")
struct CatalogIndexTests {
    @Test("a pending row whose hash deltas add past 64 bits, or whose frame is past the track, is refused, not a trap")
    func pendingRowOverflow() {
        func decodes(_ values: [UInt64], lastFrame: Int = 100) -> Bool {
            var blob: [UInt8] = []
            for v in values { Varint.append(v, to: &blob) }
            return blob.withUnsafeBytes { Catalog.decodeLandmarks($0, lastFrame: lastFrame, hashBits: 32) { _, _ in } }
        }
        #expect(decodes([5, 1, 7, 2]))
        #expect(!decodes([5, 1, UInt64.max, 2]), "the deltas wrap around 2^64")
        #expect(!decodes([5, 1, UInt64(1) << 32, 2]), "past the hash width")
        #expect(!decodes([5, 101]), "a frame past the track")
        // A negative last frame (never stored) counts as 0 rather than trapping.
        #expect(decodes([5, 0], lastFrame: 0) && decodes([5, 0], lastFrame: -1) && !decodes([5, 1], lastFrame: -1))
    }

    @Test("indexMemoryLimit bounds the index's mapping, set before or after the first lookup; lookups answer the same")
    func indexMemoryLimit() throws {
        let f = try TwoTrackCatalog()
        let hashes = f.landmarksA.map(\.hash) + f.landmarksB.map(\.hash)
        let free = try Catalog(path: f.path, readOnly: true)
        free.indexMemoryLimit = nil
        let all = try postings(free, hashes)
        #expect(all.count == f.a.landmarkCount + f.b.landmarkCount)
        #expect(free.indexMappedBytes > 0)
        // 1 byte: every bucket is read with pread; set before the index is opened, and again after it.
        let bounded = try Catalog(path: f.path, readOnly: true)
        bounded.indexMemoryLimit = 1
        #expect(try postings(bounded, hashes) == all)
        #expect(bounded.indexMappedBytes == 0, "nothing mapped under a 1-byte bound")
        bounded.indexMemoryLimit = nil
        #expect(try postings(bounded, hashes) == all)
        bounded.indexMemoryLimit = 1
        #expect(try postings(bounded, hashes) == all)
    }

    @Test("tracks a writer added but never flushed (it stopped) are indexed by the next writer; readers see them meanwhile")
    func recoversPending() throws {
        let f = try TwoTrackCatalog()
        let dir = try TemporaryDirectory("pending")
        let writer = try Catalog(path: f.path)
        let c = makeLandmarks(seed: 5, count: 400, frames: 3000)
        guard case .added(let trackC) = try writer.add(NewTrack(title: "C", duration: 30, contentHash: "c"), landmarks: c, peaks: [])
        else { throw TestSupportError("not added") }
        // A copy of the file as it is now, without the index folder's later state: the writer "stopped" here.
        let copy = dir.path("copy.earcat")
        try Run.sqlite(f.path, "VACUUM INTO '\(copy)'")
        try FileManager.default.copyItem(atPath: f.path + "-index", toPath: copy + "-index")
        let reader = try Catalog(path: copy, readOnly: true)
        #expect(try postings(reader, c.map(\.hash)).filter { $0.track == trackC.id } == expected(c, track: trackC.id))
        #expect(try reader.check().isEmpty)
        let next = try Catalog(path: copy)
        try next.flushIndex()
        #expect(try next.indexLayout().postings == f.a.landmarkCount + f.b.landmarkCount + trackC.landmarkCount)
        #expect(try Run.sqlite(copy, "SELECT count(*) FROM pending_postings").trimmingCharacters(in: .whitespacesAndNewlines) == "0")
        #expect(try postings(next, c.map(\.hash)).filter { $0.track == trackC.id } == expected(c, track: trackC.id))
        #expect(try next.check().isEmpty)
        try writer.close()
    }

    @Test("a flush gives the pending rows' pages back, so the file shrinks; compact converts a catalog made without auto_vacuum")
    func flushShrinksFile() throws {
        let dir = try TemporaryDirectory("shrink")
        func pages(_ path: String) throws -> (count: Int, free: Int) {
            let out = try Run.sqlite(path, "SELECT (SELECT page_count FROM pragma_page_count), (SELECT freelist_count FROM pragma_freelist_count)")
            let v = out.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: "|").compactMap { Int($0) }
            guard v.count == 2 else { throw TestSupportError("sqlite3 said \(out)") }
            return (v[0], v[1])
        }
        func fill(_ c: Catalog, from: Int) throws {
            for i in from..<(from + 10) {
                _ = try c.add(NewTrack(title: "T\(i)", duration: 240, contentHash: "h\(i)"),
                              landmarks: makeLandmarks(seed: UInt64(i), count: 30_000), peaks: makePeaks(seed: UInt64(i), count: 100))
            }
        }
        let path = dir.path("a.earcat")
        let c = try Catalog(path: path, create: true)
        try fill(c, from: 0)
        let before = try pages(path)
        try c.flushIndex()
        let after = try pages(path)
        // 300,000 pending landmarks take well over 100 pages of 4 KiB.
        #expect(after.free == 0 && before.count - after.count > 100, "\(before) → \(after)")
        // A file without auto_vacuum (as made by schema-2 builds) keeps its free pages until compact.
        let old = dir.path("old.earcat")
        try LegacyCatalog.writeSchema2(path: old, signatureVersion: Int(SignatureConfiguration.current.version),
                                       minBin: SignatureConfiguration.current.minBin, tracks: [])
        let o = try Catalog(path: old)
        try fill(o, from: 0)
        try o.flushIndex()
        #expect(try pages(old).free > 100)
        try o.compact()
        #expect(try pages(old).free == 0)
        try fill(o, from: 10)
        try o.flushIndex()
        #expect(try pages(old).free == 0)
        #expect(try o.check().isEmpty && o.tracks().count == 20)
    }

    @Test("a catalog whose index folder is gone is refused with a clear error, and check says which tracks lack postings")
    func missingIndexFolder() throws {
        let f = try TwoTrackCatalog()
        try FileManager.default.removeItem(atPath: f.path + "-index")
        let reader = try Catalog(path: f.path, readOnly: true)
        #expect(throws: CatalogError.self) { try reader.lookup(hashes: [1, 2, 3]) { _, _, _ in } }
        let problems = try reader.check()
        #expect(problems.contains { $0.contains("track \(f.a.id) is not in the hash index") })
    }

    @Test("an export is one file (landmarks pending, no index folder) that reads as the original and is indexed when opened for writing")
    func exportIsOneFile() throws {
        let f = try TwoTrackCatalog()
        let dir = try TemporaryDirectory("export-one")
        let out = dir.path("out.earcat")
        try Catalog(path: f.path).export(to: out)
        #expect(!FileManager.default.fileExists(atPath: out + "-index"))
        let hashes = f.landmarksA.map(\.hash) + f.landmarksB.map(\.hash)
        let original = try postings(try Catalog(path: f.path, readOnly: true), hashes)
        #expect(try postings(try Catalog(path: out, readOnly: true), hashes) == original)
        let w = try Catalog(path: out)
        try w.flushIndex()
        #expect(try w.indexLayout().segments == 1)
        #expect(try postings(w, hashes) == original)
        #expect(try w.check().isEmpty)
    }

    @Test("a schema-2 catalog (hash index inside the file) is refused read-only with the command that converts it, and migrates when opened for writing")
    func migratesSchema2() throws {
        let dir = try TemporaryDirectory("schema2")
        let path = dir.path("old.earcat")
        let a = makeLandmarks(seed: 11, count: 2_000, frames: 9_000)
        let configuration = SignatureConfiguration.current
        try LegacyCatalog.writeSchema2(path: path, signatureVersion: Int(configuration.version), minBin: configuration.minBin, tracks: [
            LegacyCatalog.Track(title: "A", duration: 100, contentHash: "a", landmarks: a.map { ($0.hash, $0.frame) }, peaks: []),
        ])
        do {
            _ = try Catalog(path: path, readOnly: true)
            Issue.record("opened")
        } catch let e as CatalogError {
            #expect(e.code == .versionMismatch)
            #expect(e.message.contains("earmark catalog migrate"))
        }
        let migrated = try Catalog(path: path)
        #expect(try migrated.stats().schemaVersion == 3)
        #expect(try postings(migrated, a.map(\.hash)) == expected(a, track: 1))
        #expect(try migrated.check().isEmpty)
        #expect(try Run.sqlite(path, "SELECT count(*) FROM sqlite_master WHERE name = 'postings'").trimmingCharacters(in: .whitespacesAndNewlines) == "0")
    }
}
