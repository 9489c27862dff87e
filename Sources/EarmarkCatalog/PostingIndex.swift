import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The list of a hash index's segments, stored as `manifest.json` in the index folder and replaced atomically.
struct IndexManifest: Codable, Equatable {
    struct Segment: Codable, Equatable {
        var file: String
        var postings: Int
    }
    var format = "earmark-index"
    var version = 1
    /// The catalog this index belongs to (`index_id` in its `catalog_info`).
    var catalog: String
    /// The landmark design the keys come from (signature algorithm and hash layout).
    var keys: String
    /// Bumped by every change; names new segment files.
    var generation = 0
    var segments: [Segment] = []
    /// Track ids whose postings are in the segments (closed ranges, ascending): tracks the catalog holds
    /// outside them were added by a writer that stopped before it wrote its segment.
    var covered: [[UInt32]] = []
    /// Tracks removed from the catalog whose postings may still be in a segment (dropped when segments merge).
    var removed: [UInt32] = []
}

/// A catalog's hash index: immutable ``IndexSegment`` files in a folder beside the catalog file
/// (`NAME.earcat-index/`), listed by a manifest. Adding tracks writes a new segment; segments of similar size
/// are merged into one (so a catalog built by many adds keeps few segments, and each posting is rewritten a
/// logarithmic number of times); a lookup reads every segment. Writers hold an exclusive lock on the folder's
/// `lock` file while they write; readers take no lock and pick up a new manifest before each lookup.
package final class PostingIndex {
    let folder: String
    let catalogID: String
    let keys: String
    /// Bits of a key in the landmark design `keys` (segments store only these).
    let keyBits: Int
    private(set) var manifest: IndexManifest
    private(set) var segments: [IndexSegment] = []
    /// Removed tracks as a bitmap by id.
    private var removedBits: [UInt64] = []
    private var manifestStamp: (ino_t, Int, Int)?
    private var lockFD: Int32 = -1
    /// Mapped bytes (``IndexSegment/residentBytes``, all segments) a reader maps at most: the bound on the index's
    /// share of its resident memory. Buckets past it are read with `pread` (see ``IndexSegment/lookup(ordered:limit:residentLimit:_:)``).
    var residentBudget = PostingIndex.defaultResidentBudget
    /// `EARMARK_INDEX_MEMORY_MB` mebibytes, or no bound. Bounding the mapping moves index pages out of the
    /// process's resident set, not out of memory (`pread` reads them from the same page cache), and at 10,000 h
    /// a bound of 1.5 GiB made warm queries three times slower; it is for a reader that must keep its RSS low
    /// (OOM scoring counts mapped file pages).
    static let defaultResidentBudget: Int = {
        if let v = ProcessInfo.processInfo.environment["EARMARK_INDEX_MEMORY_MB"], let mb = Int(v), mb > 0 { return mb << 20 }
        return .max
    }()

    static func folder(forCatalog path: String) -> String { path + "-index" }
    private var manifestPath: String { folder + "/manifest.json" }

    /// Opens the index of catalog `catalogID` in `folder`, whose keys of `keyBits` bits come from the landmark
    /// design `keys`; a missing folder or manifest is an empty index.
    init(folder: String, catalogID: String, keys: String, keyBits: Int) throws {
        self.folder = folder
        self.catalogID = catalogID
        self.keys = keys
        self.keyBits = keyBits
        manifest = IndexManifest(catalog: catalogID, keys: keys)
        try refresh()
    }

    deinit { releaseLock() }

    func error(_ message: String, code: CatalogError.Code = .damaged) -> CatalogError {
        CatalogError(code, "hash index \(folder): \(message)", path: folder)
    }

    /// Total postings in all segments.
    var postingCount: Int { manifest.segments.reduce(0) { $0 + $1.postings } }

    /// Re-reads the manifest if another process replaced it since it was read.
    func refresh() throws {
        var st = stat()
        guard stat(manifestPath, &st) == 0 else {
            if errno == ENOENT {
                if manifestStamp != nil || !segments.isEmpty {
                    manifest = IndexManifest(catalog: catalogID, keys: keys)
                    segments = []
                    removedBits = []
                    manifestStamp = nil
                }
                return
            }
            throw error("cannot read the manifest: \(String(cString: strerror(errno)))", code: .ioError)
        }
        let stamp = (st.st_ino, st.st_mtim.tv_sec, st.st_mtim.tv_nsec)
        if let s = manifestStamp, s == stamp { return }
        // A merge can delete a segment between reading the manifest and opening it: read again then.
        var attempts = 0
        while true {
            attempts += 1
            guard let data = FileManager.default.contents(atPath: manifestPath), data.count < 64 << 20 else {
                throw error("cannot read the manifest", code: .ioError)
            }
            let m: IndexManifest
            do { m = try JSONDecoder().decode(IndexManifest.self, from: data) } catch {
                throw self.error("the manifest is not valid")
            }
            guard m.format == "earmark-index", m.version == 1 else { throw error("the manifest is of an unknown format") }
            guard m.catalog == catalogID else {
                throw error("belongs to another catalog (the catalog file was replaced?); remove the folder and run `earmark catalog reindex`")
            }
            guard m.keys == keys else {
                throw error("was built with landmark keys '\(m.keys)', this build uses '\(keys)'; rebuild the catalog from its source files",
                            code: .versionMismatch)
            }
            do {
                var opened: [IndexSegment] = []
                for s in m.segments {
                    guard !s.file.contains("/"), !s.file.hasPrefix(".") else { throw error("the manifest names an invalid file") }
                    let seg = try IndexSegment(path: folder + "/" + s.file)
                    guard seg.postingCount == s.postings else { throw error("segment \(s.file) holds \(seg.postingCount) postings, the manifest says \(s.postings)") }
                    guard seg.keyBits == keyBits else { throw error("segment \(s.file) holds keys of \(seg.keyBits) bits, the design has \(keyBits)") }
                    opened.append(seg)
                }
                segments = opened
            } catch let e as CatalogError where e.code == .ioError && attempts < 5 {
                continue
            }
            manifest = m
            var bits: [UInt64] = []
            for id in m.removed {
                let w = Int(id >> 6)
                if w >= bits.count { bits += [UInt64](repeating: 0, count: w + 1 - bits.count) }
                bits[w] |= 1 << UInt64(id & 63)
            }
            removedBits = bits
            manifestStamp = stamp
            return
        }
    }

    @inline(__always)
    func isRemoved(_ track: UInt32) -> Bool {
        let w = Int(track >> 6)
        return w < removedBits.count && removedBits[w] & (1 << UInt64(track & 63)) != 0
    }

    /// Whether track `id`'s postings are in a segment.
    func covers(_ id: UInt32) -> Bool {
        manifest.covered.contains { $0.count == 2 && $0[0] <= id && id <= $0[1] }
    }

    /// Calls `body(i, track, frame)` for every posting of each key `keys[i]`, from every segment. With
    /// `commonKeys`, a key with more than that many times the index's mean postings per key (and more than
    /// ``commonKeyFloor``) gives none. Each segment judges by its share of that limit (its share of the
    /// postings), so one key is judged alike however the index is split: before, each segment applied the
    /// whole limit, and a key counted common in a merged index was not in five segments.
    func lookup(keys: [UInt32], commonKeys: Double? = nil, _ body: (Int, UInt32, UInt32) -> Void) throws {
        guard !segments.isEmpty else { return }
        let filter = !removedBits.isEmpty
        let ordered = IndexSegment.order(keys, bits: keyBits)  // every segment has the index's key bits
        let limits = PostingIndex.segmentLimits(commonKeys: commonKeys, postings: segments.map(\.postingCount), keyBits: keyBits)
        for (segment, limit) in zip(segments, limits) {
            // Each segment gets the share of the budget that its size is of the index's.
            let share = residentBudget == .max ? .max
                : Int(Double(residentBudget) * Double(segment.byteCount) / Double(max(1, byteCount)))
            try segment.lookup(ordered: ordered, limit: limit, residentLimit: share) { i, track, frame in
                if filter, isRemoved(track) { return }
                body(i, track, frame)
            }
        }
    }

    /// Bytes of all segment files.
    var byteCount: Int { segments.reduce(0) { $0 + $1.byteCount } }

    /// Calls `body(i, track, frame)` for every posting of each key `keys[i]` in `postings`, which are sorted by key
    /// (pending postings held in memory), in their order.
    package static func lookup(sorted postings: [Posting], keys: [UInt32], _ body: (Int, UInt32, UInt32) -> Void) {
        guard !postings.isEmpty else { return }
        for (i, key) in keys.enumerated() {
            var lo = 0, hi = postings.count
            while lo < hi {
                let mid = (lo + hi) >> 1
                if postings[mid].key < key { lo = mid + 1 } else { hi = mid }
            }
            while lo < postings.count, postings[lo].key == key {
                body(i, postings[lo].track, postings[lo].frame)
                lo += 1
            }
        }
    }

    /// A key with at most this many postings in the index is never too common to look up.
    package static let commonKeyFloor = 64

    /// The most postings a key may have in each of an index's segments, which hold `postings` postings of keys of
    /// `keyBits` bits, for lookups that skip keys with more than `commonKeys` times the index's mean postings per
    /// key (and more than ``commonKeyFloor``): each segment's share of that limit. nil: no limit.
    package static func segmentLimits(commonKeys: Double?, postings: [Int], keyBits: Int) -> [Int] {
        let total = Double(max(1, postings.reduce(0, +)))
        let indexLimit = commonKeys.map { max(Double(PostingIndex.commonKeyFloor), $0 * total / Double(UInt64(1) << UInt64(keyBits))) }
        return postings.map { count in indexLimit.map { max(1, Int(($0 * Double(count) / total).rounded(.up))) } ?? .max }
    }

    // MARK: Writing

    /// Takes the folder's writer lock (creating the folder), waiting up to `timeout` seconds for another writer.
    func acquireLock(timeout: Double) throws {
        guard lockFD < 0 else { return }
        do { try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true) } catch {
            throw self.error("cannot create the index folder: \(error.localizedDescription)", code: .readOnly)
        }
        let fd = open(folder + "/lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw error("cannot open the lock file: \(String(cString: strerror(errno)))", code: .readOnly) }
        let deadline = Date().addingTimeInterval(timeout)
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
            guard errno == EWOULDBLOCK || errno == EINTR, Date() < deadline else {
                close(fd)
                throw error("another process is writing to this catalog's index; try again when it is done", code: .locked)
            }
            usleep(20_000)
        }
        lockFD = fd
        // Files a crashed writer left half-written.
        for name in (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? [] where name.contains(".tmp-") {
            unlink(folder + "/" + name)
        }
        try refresh()
    }

    func releaseLock() {
        guard lockFD >= 0 else { return }
        flock(lockFD, LOCK_UN)
        close(lockFD)
        lockFD = -1
    }

    var holdsLock: Bool { lockFD >= 0 }

    /// Writes `postings` (any order; sorted here) as a new segment covering `tracks`, then merges segments
    /// of similar size, dropping postings of tracks for which `live` is false. Needs the lock.
    func addSegment(_ postings: inout [Posting], tracks: [UInt32], live: (UInt32) -> Bool) throws {
        precondition(holdsLock)
        guard !tracks.isEmpty || !postings.isEmpty else { return }
        var m = manifest
        m.generation += 1
        m.covered = PostingIndex.normalized(m.covered + PostingIndex.ranges(tracks))
        if !postings.isEmpty {
            PostingIndex.sortByMixedKey(&postings, keyBits: keyBits)
            let file = String(format: "s%08d.seg", m.generation)
            let lo = postings.lazy.map(\.track).min()!, hi = postings.lazy.map(\.track).max()!
            var w = try IndexSegmentWriter(path: folder + "/" + file, postingCount: postings.count, tracks: lo...hi, keyBits: keyBits)
            do {
                for p in postings { try w.append(p) }
                try w.finish()
            } catch {
                w.abandon()
                throw error
            }
            m.segments.append(.init(file: file, postings: postings.count))
        }
        try writeManifest(m)
        try mergeSimilar(live: live)
    }

    /// Merges the newest segments while the one before the newest is at most twice its size (a binary counter:
    /// a posting is rewritten about log₂(total / first segment) times over a catalog's life).
    func mergeSimilar(live: (UInt32) -> Bool) throws {
        while manifest.segments.count >= 2 {
            let n = manifest.segments.count
            guard manifest.segments[n - 2].postings <= 2 * manifest.segments[n - 1].postings else { break }
            try merge(range: (n - 2)..<n, live: live)
        }
    }

    /// Merges every segment into one (``Catalog/compact()``), dropping removed tracks.
    func mergeAll(live: (UInt32) -> Bool) throws {
        guard manifest.segments.count > 1 || !manifest.removed.isEmpty, !manifest.segments.isEmpty else { return }
        try merge(range: 0..<manifest.segments.count, live: live)
    }

    private func merge(range: Range<Int>, live: (UInt32) -> Bool) throws {
        precondition(holdsLock)
        let inputs = Array(segments[range])
        var m = manifest
        m.generation += 1
        let file = String(format: "s%08d.seg", m.generation)
        // Count what survives first: the writer needs the exact number.
        var count = 0
        var lo = UInt32.max, hi = UInt32(0)
        for s in inputs {
            try s.forEachMixed { p in
                if live(p.track) { count += 1; lo = min(lo, p.track); hi = max(hi, p.track) }
            }
        }
        var merged: [IndexManifest.Segment] = []
        if count > 0 {
            var w = try IndexSegmentWriter(path: folder + "/" + file, postingCount: count, tracks: lo...hi, keyBits: keyBits)
            do {
                var cursors = try inputs.map { try IndexSegment.Cursor($0) }
                var heads = try cursors.indices.map { try cursors[$0].next() }
                while true {
                    var best = -1
                    // By mixed key; a tie goes to the older segment, so a key's postings stay in the order they came.
                    for i in heads.indices {
                        guard let h = heads[i] else { continue }
                        if best < 0 || h.key < heads[best]!.key { best = i }
                    }
                    guard best >= 0 else { break }
                    let p = heads[best]!
                    if live(p.track) { try w.appendMixed(p) }
                    heads[best] = try cursors[best].next()
                }
                try w.finish()
            } catch {
                w.abandon()
                throw error
            }
            merged = [.init(file: file, postings: count)]
        }
        let dropped = Set(m.segments[range].map(\.file))
        m.segments.replaceSubrange(range, with: merged)
        // A removed track whose postings no segment holds any more need not be remembered.
        if range.count == manifest.segments.count { m.removed = [] }
        try writeManifest(m)
        for f in dropped { unlink(folder + "/" + f) }
    }

    /// Records removed tracks, so lookups skip their postings until a merge drops them. Needs the lock.
    func markRemoved(_ ids: [UInt32]) throws {
        precondition(holdsLock)
        var m = manifest
        m.generation += 1
        m.removed = Array(Set(m.removed).union(ids)).sorted()
        try writeManifest(m)
    }

    private func writeManifest(_ m: IndexManifest) throws {
        let tmp = manifestPath + ".tmp-\(getpid())"
        let enc = JSONEncoder()
        enc.outputFormatting = [.sortedKeys]
        let data = try enc.encode(m)
        guard FileManager.default.createFile(atPath: tmp, contents: data) else { throw error("cannot write the manifest", code: .ioError) }
        let fd = open(tmp, O_RDONLY | O_CLOEXEC)
        if fd >= 0 { fsync(fd); close(fd) }
        guard rename(tmp, manifestPath) == 0 else { throw error("cannot replace the manifest: \(String(cString: strerror(errno)))", code: .ioError) }
        let dir = open(folder, O_RDONLY | O_CLOEXEC)
        if dir >= 0 { fsync(dir); close(dir) }
        manifestStamp = nil
        try refresh()
    }

    /// Removes the index folder (the catalog is being rebuilt or replaced).
    static func removeFolder(_ folder: String) {
        try? FileManager.default.removeItem(atPath: folder)
    }

    // MARK: Helpers

    static func ranges(_ ids: [UInt32]) -> [[UInt32]] {
        let sorted = Array(Set(ids)).sorted()
        var out: [[UInt32]] = []
        for id in sorted {
            if let last = out.last, last[1] &+ 1 == id { out[out.count - 1][1] = id } else { out.append([id, id]) }
        }
        return out
    }

    static func normalized(_ ranges: [[UInt32]]) -> [[UInt32]] {
        let sorted = ranges.filter { $0.count == 2 && $0[0] <= $0[1] }.sorted { $0[0] < $1[0] }
        var out: [[UInt32]] = []
        for r in sorted {
            if let last = out.last, UInt64(r[0]) <= UInt64(last[1]) + 1 {
                out[out.count - 1][1] = max(last[1], r[1])
            } else {
                out.append(r)
            }
        }
        return out
    }

    /// Sorts by mixed key (the order segments store), stably: postings of one key keep their order.
    package static func sortByMixedKey(_ postings: inout [Posting], keyBits: Int) {
        radixSort(&postings) { IndexSegment.mix($0.key, bits: keyBits) }
    }

    /// A stable LSD radix sort on a 32-bit key, in two passes of 16 bits.
    package static func radixSort(_ postings: inout [Posting], by key: (Posting) -> UInt32) {
        let n = postings.count
        guard n > 1 else { return }
        var other = [Posting](repeating: Posting(key: 0, track: 0, frame: 0), count: n)
        var counts = [Int](repeating: 0, count: 1 << 16)
        for shift: UInt32 in [0, 16] {
            for i in counts.indices { counts[i] = 0 }
            for p in postings { counts[Int((key(p) >> shift) & 0xFFFF)] += 1 }
            var sum = 0
            for i in counts.indices { let c = counts[i]; counts[i] = sum; sum += c }
            for p in postings {
                let d = Int((key(p) >> shift) & 0xFFFF)
                other[counts[d]] = p
                counts[d] += 1
            }
            swap(&postings, &other)
        }
    }
}

extension IndexSegment {
    /// Reads a segment's postings in stored order, with mixed keys (for merging).
    struct Cursor {
        let segment: IndexSegment
        private var bucket = -1
        private var index = 0
        private var count = 0
        private var width = 0
        private var fw = 0
        private var start = 0

        init(_ segment: IndexSegment) throws { self.segment = segment }

        mutating func next() throws -> Posting? {
            while index >= count {
                bucket += 1
                guard bucket < 1 << segment.bucketBits else { return nil }
                let b = try segment.bucketInfo(bucket)
                (count, width, fw, start) = (b.count, b.width, b.fw, b.firstBit)
                index = 0
            }
            let p = segment.posting(bucket: bucket, at: start + index * width, fw: fw)
            index += 1
            guard p.track <= segment.lastTrack else { throw IndexSegment.error(segment.path, "a posting names track \(p.track), outside the segment's range") }
            return p
        }
    }
}
