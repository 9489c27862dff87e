import CPrefetch
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// One posting of the hash index: a landmark key, the track holding it and the anchor frame there.
package struct Posting: Equatable, Sendable {
    package var key: UInt32
    package var track: UInt32
    package var frame: UInt32
    package init(key: UInt32, track: UInt32, frame: UInt32) {
        self.key = key
        self.track = track
        self.frame = frame
    }
}

/// An immutable, memory-mapped file of postings sorted by key: the unit the hash index is built from.
///
/// Layout (little-endian): a 64-byte header, a directory of `2^bucketBits + 1` byte offsets (UInt64), then
/// the buckets, then 8 zero bytes. Keys have `keyBits` bits (the landmark design's). A key is first mixed
/// (``IndexSegment/mix(_:bits:)``, a bijection on `keyBits` bits that spreads any key design evenly); its top
/// `bucketBits` bits pick the bucket, the rest (the residual) is stored.
/// A bucket is one byte, the frame width `fw`, then its postings sorted by residual, each
/// bit-packed as residual (`keyBits - bucketBits` bits), track − `firstTrack` (`trackBits`) and frame (`fw` bits)
/// (``IndexBucketCodec``, shared with the PostgreSQL store's bucket rows), so a lookup reads one bucket and
/// binary-searches it. Everything read from the file is checked before it is
/// used: a damaged segment throws, never traps.
package final class IndexSegment {
    static let magic: [UInt8] = Array("EARMKIX\(Catalog.indexFormat)".utf8)
    static let headerBytes = 64
    package static let maximumBucketBits = 26

    let path: String
    let postingCount: Int
    let keyBits: Int
    let bucketBits: Int
    let trackBits: Int
    let firstTrack: UInt32
    let lastTrack: UInt32
    /// The encoding of the buckets.
    let codec: IndexBucketCodec
    private let base: UnsafeMutableRawPointer
    private let size: Int
    /// The file, open for the buckets read with `pread` instead of the mapping (see ``lookup(ordered:limit:residentLimit:_:)``).
    private let file: Int32
    /// A bucket read with `pread`, and 8 bytes more for the bit reader's last word.
    private var scratch: [UInt8] = []
    /// Bytes of the file.
    var byteCount: Int { size }
    private let dataStart: Int
    private let dataBytes: Int
    /// Bytes of the mapping this process holds, counted in 64-KB windows:
    /// a read fault on a file mapping maps every page of its aligned 64-KB window that the page cache holds
    /// (the kernel's fault-around, whatever `MADV_RANDOM` says), so a lookup that reads 400 bytes of a bucket
    /// adds 64 KB to the process's resident memory, and the windows touched, not the bytes read, are what it holds.
    private(set) var residentBytes = 0
    /// One bit per 64-KB window of the mapping: touched (so mapped) by a lookup.
    private var windows: [UInt64]
    static let windowShift = 16

    /// A bijection on keys of `bits` bits (8…32) that spreads them over the buckets whatever their design:
    /// a multiplication by an odd constant modulo 2^bits, then an xor with the upper half shifted down.
    @inline(__always)
    package static func mix(_ key: UInt32, bits: Int) -> UInt32 {
        let mask = UInt32(truncatingIfNeeded: (UInt64(1) << UInt64(bits)) - 1)
        var m = (key &* 0x9E37_79B1) & mask
        m ^= m >> UInt32((bits + 1) / 2)
        return m
    }

    /// The inverse of ``mix(_:bits:)``.
    static func unmix(_ m: UInt32, bits: Int) -> UInt32 {
        let mask = UInt32(truncatingIfNeeded: (UInt64(1) << UInt64(bits)) - 1)
        let x = m ^ (m >> UInt32((bits + 1) / 2))
        return (x &* 0x0E8B_2F51) & mask  // 0x0E8B2F51 is the inverse of 0x9E3779B1 modulo 2³² (so modulo 2^bits)
    }

    /// Buckets for a segment of `postings` postings: about 64 postings each, at most one bucket per key.
    package static func bucketBits(for postings: Int, keyBits: Int) -> Int {
        var b = 8
        while b < min(maximumBucketBits, keyBits), postings >> (b + 6) > 0 { b += 1 }
        return b
    }

    init(path: String) throws {
        self.path = path
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw IndexSegment.error(path, "cannot open: \(String(cString: strerror(errno)))", code: .ioError) }
        var st = stat()
        guard fstat(fd, &st) == 0 else {
            close(fd)
            throw IndexSegment.error(path, "cannot stat", code: .ioError)
        }
        size = Int(st.st_size)
        guard size >= IndexSegment.headerBytes + 8 else {
            close(fd)
            throw IndexSegment.error(path, "shorter than its header")
        }
        guard let p = mmap(nil, size, PROT_READ, MAP_SHARED, fd, 0), p != MAP_FAILED else {
            close(fd)
            throw IndexSegment.error(path, "cannot map: \(String(cString: strerror(errno)))", code: .ioError)
        }
        file = fd
        base = p
        _ = madvise(p, size, MADV_RANDOM)
        let h = UnsafeRawPointer(p)
        func u32(_ at: Int) -> UInt32 { UInt32(littleEndian: h.loadUnaligned(fromByteOffset: at, as: UInt32.self)) }
        func u64(_ at: Int) -> UInt64 { UInt64(littleEndian: h.loadUnaligned(fromByteOffset: at, as: UInt64.self)) }
        let magicOK = (0..<8).allSatisfy { h.load(fromByteOffset: $0, as: UInt8.self) == IndexSegment.magic[$0] }
        let bits = Int(u32(8)), tBits = Int(u32(12))
        let count = u64(16), data = u64(24)
        firstTrack = u32(32)
        lastTrack = u32(36)
        let kBits = Int(u32(40))
        let directory = kBits >= 8 && kBits <= 32 && bits >= 8 && bits <= min(IndexSegment.maximumBucketBits, kBits)
            ? ((1 << bits) + 1) * 8 : 0
        guard magicOK, directory > 0, u32(44) == 0,
              let codec = IndexBucketCodec(keyBits: kBits, bucketBits: bits, trackBits: tBits, firstTrack: firstTrack, lastTrack: lastTrack),
              count < UInt64(1) << 40, data < UInt64(1) << 48,
              UInt64(IndexSegment.headerBytes + directory) + data + 8 == UInt64(size),
              Self.checksum(h, count: 48) == u64(48)
        else {
            munmap(p, size)
            close(fd)
            throw IndexSegment.error(path, "not a valid index segment")
        }
        self.codec = codec
        keyBits = kBits
        bucketBits = bits
        trackBits = tBits
        postingCount = Int(count)
        dataStart = IndexSegment.headerBytes + directory
        dataBytes = Int(data)
        windows = [UInt64](repeating: 0, count: (size >> IndexSegment.windowShift) / 64 + 1)
    }

    /// Counts the window of byte `offset` of the mapping as resident.
    @inline(__always)
    private func touch(_ offset: Int) {
        let w = offset >> IndexSegment.windowShift
        let bit = UInt64(1) << UInt64(w & 63)
        if windows[w >> 6] & bit == 0 {
            windows[w >> 6] |= bit
            residentBytes += 1 << IndexSegment.windowShift
        }
    }

    deinit {
        munmap(base, size)
        close(file)
    }

    static func error(_ path: String, _ message: String, code: CatalogError.Code = .damaged) -> CatalogError {
        CatalogError(code, "index segment \(URL(fileURLWithPath: path).lastPathComponent): \(message)", path: path)
    }

    /// FNV-1a over the first `count` header bytes.
    static func checksum(_ p: UnsafeRawPointer, count: Int) -> UInt64 {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for i in 0..<count { h = (h ^ UInt64(p.load(fromByteOffset: i, as: UInt8.self))) &* 0x100_0000_01b3 }
        return h
    }

    /// Bucket `b`'s bytes as (start, end) offsets into the mapping, checked.
    @inline(__always)
    private func bucketRange(_ b: Int) throws -> (Int, Int) {
        let d = UnsafeRawPointer(base) + IndexSegment.headerBytes + b * 8
        return try bucketRange(b, d.loadUnaligned(as: UInt64.self), d.loadUnaligned(fromByteOffset: 8, as: UInt64.self))
    }

    /// Bucket `b`'s bytes from its directory entry's two words as stored, checked.
    @inline(__always)
    private func bucketRange(_ b: Int, _ storedLo: UInt64, _ storedHi: UInt64) throws -> (Int, Int) {
        let lo = UInt64(littleEndian: storedLo), hi = UInt64(littleEndian: storedHi)
        guard lo <= hi, hi <= UInt64(dataBytes) else { throw IndexSegment.error(path, "bucket \(b)'s bounds are out of place") }
        return (dataStart + Int(lo), dataStart + Int(hi))
    }

    /// Bucket `b`'s posting count, posting width in bits, frame width and first posting's bit offset, checked.
    @inline(__always)
    func bucketInfo(_ b: Int) throws -> (count: Int, width: Int, fw: Int, firstBit: Int) {
        let (lo, hi) = try bucketRange(b)
        return try bucketLayout(UnsafeRawPointer(base), lo: lo, hi: hi)
    }

    /// The layout of the bucket in bytes `lo..<hi` of the file, whose bytes are at `p` (file offsets: `p` is where
    /// byte 0 would be).
    @inline(__always)
    private func bucketLayout(_ p: UnsafeRawPointer, lo: Int, hi: Int) throws -> (count: Int, width: Int, fw: Int, firstBit: Int) {
        do { return try codec.layout(p, lo: lo, hi: hi) } catch let d as IndexBucketDamage { throw IndexSegment.error(path, d.description) }
    }

    /// The posting at bit `at` of bucket `bucket`, with its mixed key.
    @inline(__always)
    func posting(bucket: Int, at: Int, fw: Int) -> Posting {
        codec.posting(UnsafeRawPointer(base), bucket: bucket, at: at, fw: fw)
    }

    /// Calls `body(track, frame)` for every posting of `key`; none when the key has more than `limit`.
    func lookup(_ key: UInt32, limit: Int = .max, _ body: (UInt32, UInt32) -> Void) throws {
        guard UInt64(key) >> UInt64(keyBits) == 0 else { return }
        try lookup(mixed: IndexSegment.mix(key, bits: keyBits), limit: limit, residentLimit: .max, body)
    }

    /// ``lookup(_:limit:_:)`` of every key `keys[i]`, calling `body(i, track, frame)`. The keys are taken in
    /// bucket order, and each one's directory entry and bucket are requested from memory some keys ahead: in a
    /// large index nearly every lookup misses the cache twice (directory, then bucket), and this way the misses
    /// of several keys overlap instead of following one another.
    func lookup(keys: [UInt32], limit: Int = .max, _ body: (Int, UInt32, UInt32) -> Void) throws {
        try lookup(ordered: IndexSegment.order(keys, bits: keyBits), limit: limit, body)
    }

    /// `keys` (those within `bits` bits) as mixed key << 32 | index, sorted: bucket order for every segment of
    /// keys of `bits` bits, whatever its bucket bits, so one ordering serves all segments of an index.
    package static func order(_ keys: [UInt32], bits: Int) -> [UInt64] {
        var order: [UInt64] = []
        order.reserveCapacity(keys.count)
        for (i, key) in keys.enumerated() where UInt64(key) >> UInt64(bits) == 0 {
            order.append(UInt64(mix(key, bits: bits)) << 32 | UInt64(i))
        }
        order.radixSort()
        return order
    }

    /// ``lookup(keys:limit:_:)`` with the keys already in ``order(_:bits:)``'s form, for this segment's key bits.
    /// Buckets are read through the mapping while at most `residentLimit` bytes of it are resident
    /// (``residentBytes``); past that, a bucket in a window not yet mapped is read with `pread`, which maps nothing.
    /// A long-running reader of an index larger than its limit so keeps the limit's worth of windows mapped and
    /// reads the rest at a syscall each (about 1.5 µs against 0.2 µs mapped, 2.5 µs for a first touch).
    func lookup(ordered order: [UInt64], limit: Int = .max, residentLimit: Int = .max,
                _ body: (Int, UInt32, UInt32) -> Void) throws {
        let residualBits = UInt64(keyBits - bucketBits)
        let directory = UnsafeRawPointer(base) + IndexSegment.headerBytes
        @inline(__always) func bucket(_ j: Int) -> Int { Int(truncatingIfNeeded: order[j] >> (32 + residualBits)) }
        let directoryAhead = 16, bucketAhead = 8
        for j in order.indices {
            if j + directoryAhead < order.count { earmark_prefetch(directory + bucket(j + directoryAhead) * 8) }
            // Only through an entry already mapped (both its words: the second can open the next window), since
            // reading it would map its window uncounted.
            if j + bucketAhead < order.count, isMapped(IndexSegment.headerBytes + bucket(j + bucketAhead) * 8),
               isMapped(IndexSegment.headerBytes + bucket(j + bucketAhead) * 8 + 15) {
                // The whole bucket (a few cache lines): its binary search's first probes land in the middle.
                let entry = bucket(j + bucketAhead) * 8
                let lo = UInt64(littleEndian: directory.loadUnaligned(fromByteOffset: entry, as: UInt64.self))
                let hi = UInt64(littleEndian: directory.loadUnaligned(fromByteOffset: entry + 8, as: UInt64.self))
                if lo < hi, hi <= UInt64(dataBytes) {
                    let start = UnsafeRawPointer(base) + dataStart
                    var line = Int(lo) & ~63
                    let end = min(Int(hi), Int(lo) + 1024)
                    while line < end {
                        earmark_prefetch(start + line)
                        line += 64
                    }
                }
            }
            let i = Int(truncatingIfNeeded: order[j] & 0xFFFF_FFFF)
            try lookup(mixed: UInt32(truncatingIfNeeded: order[j] >> 32), limit: limit, residentLimit: residentLimit) { body(i, $0, $1) }
        }
    }

    /// The postings of the key whose mixed form is `m`.
    @inline(__always)
    private func lookup(mixed m: UInt32, limit: Int, residentLimit: Int, _ body: (UInt32, UInt32) -> Void) throws {
        let bucket = Int(m >> UInt32(keyBits - bucketBits))
        let entry = IndexSegment.headerBytes + bucket * 8
        let (lo, hi): (Int, Int)
        if mapped(entry, entry + 15, residentLimit: residentLimit) {
            (lo, hi) = try bucketRange(bucket)
        } else {
            var words: (UInt64, UInt64) = (0, 0)
            try withUnsafeMutableBytes(of: &words) { try read(into: $0.baseAddress!, count: 16, at: entry) }
            (lo, hi) = try bucketRange(bucket, words.0, words.1)
        }
        guard hi > lo else { return }
        // The bit reader's last word can reach 7 bytes past the bucket.
        let last = min(hi + 7, size - 1)
        if mapped(lo, last, residentLimit: residentLimit) {
            try scan(UnsafeRawPointer(base), lo: lo, hi: hi, mixed: m, limit: limit, body)
            return
        }
        if scratch.count < hi - lo + 8 { scratch = [UInt8](repeating: 0, count: max(hi - lo + 8, 4096)) }
        try scratch.withUnsafeMutableBytes { buffer in
            try read(into: buffer.baseAddress!, count: hi - lo, at: lo)
            try scan(UnsafeRawPointer(buffer.baseAddress!) - lo, lo: lo, hi: hi, mixed: m, limit: limit, body)
        }
    }

    /// Reads `count` bytes at `offset` of the file with `pread` (no mapping).
    private func read(into buffer: UnsafeMutableRawPointer, count: Int, at offset: Int) throws {
        var done = 0
        while done < count {
            let n = pread(file, buffer + done, count - done, off_t(offset + done))
            if n > 0 { done += n } else if n < 0, errno == EINTR { continue } else {
                throw IndexSegment.error(path, n == 0 ? "is shorter than its directory says" : "cannot read: \(String(cString: strerror(errno)))",
                                         code: n == 0 ? .damaged : .ioError)
            }
        }
    }

    /// Whether bytes `first...last` may be read through the mapping: their windows are mapped already, or there
    /// is room under `residentLimit` for two more; then they are counted as resident.
    @inline(__always)
    private func mapped(_ first: Int, _ last: Int, residentLimit: Int) -> Bool {
        guard residentBytes + (2 << IndexSegment.windowShift) <= residentLimit || (isMapped(first) && isMapped(last)) else { return false }
        for w in (first >> IndexSegment.windowShift)...(last >> IndexSegment.windowShift) { touch(w << IndexSegment.windowShift) }
        return true
    }

    /// Whether the window of byte `offset` of the mapping is counted as resident.
    @inline(__always)
    private func isMapped(_ offset: Int) -> Bool {
        let w = offset >> IndexSegment.windowShift
        return windows[w >> 6] & (UInt64(1) << UInt64(w & 63)) != 0
    }

    /// The postings of mixed key `m` in the bucket in bytes `lo..<hi` of the file, whose bytes are at `p`.
    @inline(__always)
    private func scan(_ p: UnsafeRawPointer, lo: Int, hi: Int, mixed m: UInt32, limit: Int,
                      _ body: (UInt32, UInt32) -> Void) throws {
        do { try codec.scan(p, lo: lo, hi: hi, mixed: m, limit: limit, body) } catch let d as IndexBucketDamage {
            throw IndexSegment.error(path, d.description)
        }
    }

    /// Every posting in stored order (by mixed key), keys still mixed; for merging and checking.
    func forEachMixed(_ body: (Posting) throws -> Void) throws {
        var seen = 0
        for bucket in 0..<(1 << bucketBits) {
            let (lo, hi) = try bucketRange(bucket)
            do { seen += try codec.forEach(UnsafeRawPointer(base), lo: lo, hi: hi, bucket: bucket, body) } catch let d as IndexBucketDamage {
                throw IndexSegment.error(path, d.description)
            }
        }
        guard seen == postingCount else { throw IndexSegment.error(path, "holds \(seen) postings, its header says \(postingCount)") }
        residentBytes = size
        for i in windows.indices { windows[i] = ~0 }
    }

    /// Every posting with its key, in stored order.
    func forEach(_ body: (Posting) throws -> Void) throws {
        try forEachMixed { p in try body(Posting(key: IndexSegment.unmix(p.key, bits: keyBits), track: p.track, frame: p.frame)) }
    }
}

/// Writes an ``IndexSegment`` from postings given in mixed-key order (see ``IndexSegment/mix(_:bits:)``). The file appears under its name only when complete (written beside it, synced, renamed).
struct IndexSegmentWriter {
    let path: String
    let codec: IndexBucketCodec
    var keyBits: Int { codec.keyBits }
    var bucketBits: Int { codec.bucketBits }
    var firstTrack: UInt32 { codec.firstTrack }
    var lastTrack: UInt32 { codec.lastTrack }
    let postingCount: Int
    private let temporary: String
    private let handle: FileHandle
    private var directory: [UInt64]
    private var buffer: [UInt8] = []
    private var bucket: [Posting] = []
    private var currentBucket = -1
    private var written: UInt64 = 0
    private var appended = 0
    private var lastMixed: UInt32?

    /// - Parameters: `postingCount` must be the exact number that will be appended; tracks must lie in `tracks`;
    ///   keys must have at most `keyBits` (8…32) bits.
    init(path: String, postingCount: Int, tracks: ClosedRange<UInt32>, keyBits: Int) throws {
        guard (8...32).contains(keyBits) else {
            throw IndexSegment.error(path, "keys of \(keyBits) bits are not supported", code: .invalidArgument)
        }
        self.path = path
        self.postingCount = postingCount
        codec = IndexBucketCodec(keyBits: keyBits, postingCount: postingCount, tracks: tracks)
        temporary = path + ".tmp-\(getpid())"
        guard FileManager.default.createFile(atPath: temporary, contents: nil),
              let h = FileHandle(forWritingAtPath: temporary) else {
            throw IndexSegment.error(path, "cannot create \(temporary)", code: .ioError)
        }
        handle = h
        directory = [UInt64](repeating: 0, count: (1 << codec.bucketBits) + 1)
        // Header and directory are written last; reserve their bytes.
        try handle.write(contentsOf: Data(count: IndexSegment.headerBytes + directory.count * 8))
    }

    mutating func append(_ p: Posting) throws {
        guard UInt64(p.key) >> UInt64(keyBits) == 0 else {
            throw IndexSegment.error(path, "key \(p.key) has more than \(keyBits) bits", code: .invalidArgument)
        }
        try appendMixed(Posting(key: IndexSegment.mix(p.key, bits: keyBits), track: p.track, frame: p.frame))
    }

    /// Appends a posting whose key is already mixed.
    mutating func appendMixed(_ p: Posting) throws {
        let m = p.key
        let residualBits = keyBits - bucketBits
        guard UInt64(m) >> UInt64(keyBits) == 0 else {
            throw IndexSegment.error(path, "mixed key \(m) has more than \(keyBits) bits", code: .invalidArgument)
        }
        let b = Int(m >> UInt32(residualBits))
        if let last = lastMixed, last > m {
            throw IndexSegment.error(path, "postings appended out of order", code: .invalidArgument)
        }
        guard p.track >= firstTrack, p.track <= lastTrack else {
            throw IndexSegment.error(path, "posting of track \(p.track) outside \(firstTrack)…\(lastTrack)", code: .invalidArgument)
        }
        lastMixed = m
        if b != currentBucket { try flushBucket(upTo: b) }
        bucket.append(Posting(key: m, track: p.track, frame: p.frame))
        appended += 1
    }

    /// Writes the pending bucket and records the start of every bucket up to `next`.
    private mutating func flushBucket(upTo next: Int) throws {
        if currentBucket >= 0, !bucket.isEmpty {
            let bytes = codec.encode(bucket, into: &buffer)
            written += UInt64(bytes)
            bucket.removeAll(keepingCapacity: true)
            if buffer.count >= 1 << 20 {
                try handle.write(contentsOf: buffer)
                buffer.removeAll(keepingCapacity: true)
            }
        }
        let from = max(currentBucket + 1, 0)
        if next >= from { for i in from...next { directory[i] = written } }
        currentBucket = next
    }

    /// Completes the file and moves it into place.
    mutating func finish() throws {
        guard appended == postingCount else {
            throw IndexSegment.error(path, "\(appended) postings appended, \(postingCount) announced", code: .invalidArgument)
        }
        try flushBucket(upTo: 1 << bucketBits)
        buffer.append(contentsOf: repeatElement(0, count: 8))
        try handle.write(contentsOf: buffer)
        var header = [UInt8](repeating: 0, count: IndexSegment.headerBytes)
        func put32(_ v: UInt32, _ at: Int) { withUnsafeBytes(of: v.littleEndian) { header.replaceSubrange(at..<at + 4, with: $0) } }
        func put64(_ v: UInt64, _ at: Int) { withUnsafeBytes(of: v.littleEndian) { header.replaceSubrange(at..<at + 8, with: $0) } }
        header.replaceSubrange(0..<8, with: IndexSegment.magic)
        put32(UInt32(bucketBits), 8)
        put32(UInt32(codec.trackBits), 12)
        put64(UInt64(postingCount), 16)
        put64(written, 24)
        put32(firstTrack, 32)
        put32(lastTrack, 36)
        put32(UInt32(keyBits), 40)
        put64(header.withUnsafeBytes { IndexSegment.checksum($0.baseAddress!, count: 48) }, 48)
        var dir = [UInt8]()
        dir.reserveCapacity(directory.count * 8)
        for d in directory { withUnsafeBytes(of: d.littleEndian) { dir.append(contentsOf: $0) } }
        try handle.seek(toOffset: 0)
        try handle.write(contentsOf: header + dir)
        try handle.synchronize()
        try handle.close()
        guard rename(temporary, path) == 0 else {
            throw IndexSegment.error(path, "cannot move the new segment into place: \(String(cString: strerror(errno)))", code: .ioError)
        }
    }

    /// Removes the unfinished file (after an error).
    func abandon() {
        try? handle.close()
        unlink(temporary)
    }
}
