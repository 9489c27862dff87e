/// A bucket that cannot be what Earmark wrote (its frame width, or a posting naming a track outside its segment).
package struct IndexBucketDamage: Error, CustomStringConvertible {
    package let description: String
}

/// The bit-packed encoding of one bucket of a hash-index segment (docs/catalog.md, "The hash index"), the one encoder
/// and decoder of both stores: ``IndexSegment`` files keep the buckets after a directory, the PostgreSQL store keeps
/// each bucket as a row.
///
/// A bucket is one byte, the frame width `fw` (1…32), then its postings sorted by mixed key
/// (``IndexSegment/mix(_:bits:)``), each bit-packed, least significant bit first, as the mixed key's residual (its
/// low `keyBits - bucketBits` bits; the top bits are the bucket number), the track id less `firstTrack`
/// (`trackBits` bits) and the frame (`fw` bits). Readers read 8-byte words, so the bytes after a bucket must be
/// readable (7 more at most): the segment file has them, a row is copied with 8 zero bytes after it.
package struct IndexBucketCodec: Sendable, Equatable {
    package let keyBits: Int
    package let bucketBits: Int
    package let trackBits: Int
    package let firstTrack: UInt32
    package let lastTrack: UInt32

    /// A segment's codec as its header (or row) says; nil unless the values can be a segment's.
    package init?(keyBits: Int, bucketBits: Int, trackBits: Int, firstTrack: UInt32, lastTrack: UInt32) {
        guard keyBits >= 8, keyBits <= 32, bucketBits >= 8, bucketBits <= min(IndexSegment.maximumBucketBits, keyBits),
              trackBits >= 1, trackBits <= 32, firstTrack <= lastTrack,
              UInt64(lastTrack - firstTrack) < UInt64(1) << UInt64(trackBits) else { return nil }
        self.keyBits = keyBits
        self.bucketBits = bucketBits
        self.trackBits = trackBits
        self.firstTrack = firstTrack
        self.lastTrack = lastTrack
    }

    /// The codec of a new segment of `postingCount` postings of `tracks`: about 64 postings a bucket
    /// (``IndexSegment/bucketBits(for:keyBits:)``), track ids as offsets from the first. `keyBits` must be 8…32.
    package init(keyBits: Int, postingCount: Int, tracks: ClosedRange<UInt32>) {
        var t = 1
        while t < 32, UInt64(tracks.upperBound - tracks.lowerBound) >> UInt64(t) > 0 { t += 1 }
        self.keyBits = keyBits
        bucketBits = IndexSegment.bucketBits(for: postingCount, keyBits: keyBits)
        trackBits = t
        firstTrack = tracks.lowerBound
        lastTrack = tracks.upperBound
    }

    /// Bits of a posting's key that are stored (the rest is the bucket number).
    package var residualBits: Int { keyBits - bucketBits }

    /// The bucket of mixed key `m`.
    @inline(__always)
    package func bucket(ofMixed m: UInt32) -> Int { Int(m >> UInt32(residualBits)) }

    /// Reads `width` (≤ 57) bits at bit `bit` of the bytes at `p`.
    @inline(__always)
    package static func bits(_ p: UnsafeRawPointer, at bit: Int, width: Int) -> UInt64 {
        let word = UInt64(littleEndian: p.loadUnaligned(fromByteOffset: bit >> 3, as: UInt64.self))
        return (word >> UInt64(bit & 7)) & ((1 << UInt64(width)) - 1)
    }

    /// Appends the bucket of `postings` (mixed keys, ascending, all in one bucket, tracks within the codec's range)
    /// to `out`; returns the bytes appended.
    @discardableResult
    package func encode(_ postings: [Posting], into out: inout [UInt8]) -> Int {
        var fw = 1
        var maxFrame: UInt32 = 0
        for p in postings { maxFrame = max(maxFrame, p.frame) }
        while fw < 32, UInt64(maxFrame) >> UInt64(fw) > 0 { fw += 1 }
        let width = residualBits + trackBits + fw
        let bytes = 1 + (postings.count * width + 7) / 8
        let start = out.count
        out.append(contentsOf: repeatElement(0, count: bytes))
        out[start] = UInt8(fw)
        var bit = (start + 1) * 8
        func put(_ value: UInt64, _ w: Int) {
            var v = value, left = w
            while left > 0 {
                let byte = bit >> 3, shift = bit & 7
                let take = min(8 - shift, left)
                out[byte] |= UInt8(truncatingIfNeeded: (v & ((1 << UInt64(take)) - 1)) << UInt64(shift))
                v >>= UInt64(take)
                bit += take
                left -= take
            }
        }
        let residualMask = (UInt64(1) << UInt64(residualBits)) - 1
        for p in postings {
            put(UInt64(p.key) & residualMask, residualBits)
            put(UInt64(p.track - firstTrack), trackBits)
            put(UInt64(p.frame), fw)
        }
        return bytes
    }

    /// The layout of the bucket in bytes `lo..<hi` at `p`: its posting count, the width of a posting in bits, the
    /// frame width and the first posting's bit offset (from `p`).
    @inline(__always)
    package func layout(_ p: UnsafeRawPointer, lo: Int, hi: Int) throws -> (count: Int, width: Int, fw: Int, firstBit: Int) {
        guard hi > lo else { return (0, 1, 1, 0) }
        let fw = Int(p.load(fromByteOffset: lo, as: UInt8.self))
        guard fw >= 1, fw <= 32 else { throw IndexBucketDamage(description: "a bucket's frame width \(fw) is out of range") }
        let width = residualBits + trackBits + fw
        return ((hi - lo - 1) * 8 / width, width, fw, (lo + 1) * 8)
    }

    /// The posting at bit `at` of bucket `bucket` (whose bytes are at `p`), with its mixed key; its track unchecked.
    @inline(__always)
    package func posting(_ p: UnsafeRawPointer, bucket: Int, at: Int, fw: Int) -> Posting {
        let m = UInt32(truncatingIfNeeded: bucket << residualBits) | UInt32(truncatingIfNeeded: IndexBucketCodec.bits(p, at: at, width: residualBits))
        let track = firstTrack &+ UInt32(truncatingIfNeeded: IndexBucketCodec.bits(p, at: at + residualBits, width: trackBits))
        let frame = UInt32(truncatingIfNeeded: IndexBucketCodec.bits(p, at: at + residualBits + trackBits, width: fw))
        return Posting(key: m, track: track, frame: frame)
    }

    /// Calls `body` with every posting (mixed key) of bucket `bucket`, in bytes `lo..<hi` at `p`, in stored order;
    /// returns how many.
    @discardableResult
    package func forEach(_ p: UnsafeRawPointer, lo: Int, hi: Int, bucket: Int, _ body: (Posting) throws -> Void) throws -> Int {
        let b = try layout(p, lo: lo, hi: hi)
        for i in 0..<b.count {
            let posting = posting(p, bucket: bucket, at: b.firstBit + i * b.width, fw: b.fw)
            guard posting.track <= lastTrack else { throw IndexBucketDamage(description: "a posting names track \(posting.track), outside the segment's range") }
            try body(posting)
        }
        return b.count
    }

    /// Calls `body(track, frame)` for every posting of mixed key `m` in the bucket in bytes `lo..<hi` at `p` (the
    /// key's bucket); none when it has more than `limit`. A binary search on the residuals, which ascend.
    @inline(__always)
    package func scan(_ p: UnsafeRawPointer, lo bucketStart: Int, hi bucketEnd: Int, mixed m: UInt32, limit: Int,
                      _ body: (UInt32, UInt32) -> Void) throws {
        let residualBits = self.residualBits
        let b = try layout(p, lo: bucketStart, hi: bucketEnd)
        @inline(__always) func bits(at bit: Int, width: Int) -> UInt64 { IndexBucketCodec.bits(p, at: bit, width: width) }
        let residual = UInt64(m) & ((1 << UInt64(residualBits)) - 1)
        // First posting whose residual is not below the key's.
        var lo = 0, hi = b.count
        while lo < hi {
            let mid = (lo + hi) >> 1
            if bits(at: b.firstBit + mid * b.width, width: residualBits) < residual { lo = mid + 1 } else { hi = mid }
        }
        if limit < b.count - lo {
            // Past the key's postings, the first residual above it.
            var end = lo
            var top = b.count
            while end < top {
                let mid = (end + top) >> 1
                if bits(at: b.firstBit + mid * b.width, width: residualBits) <= residual { end = mid + 1 } else { top = mid }
            }
            if end - lo > limit { return }
        }
        var i = lo
        while i < b.count {
            let at = b.firstBit + i * b.width
            guard bits(at: at, width: residualBits) == residual else { break }
            let track = firstTrack &+ UInt32(truncatingIfNeeded: bits(at: at + residualBits, width: trackBits))
            guard track <= lastTrack else { throw IndexBucketDamage(description: "a posting names track \(track), outside the segment's range") }
            body(track, UInt32(truncatingIfNeeded: bits(at: at + residualBits + trackBits, width: b.fw)))
            i += 1
        }
    }
}
