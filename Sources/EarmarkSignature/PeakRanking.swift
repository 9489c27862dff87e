/// The peak picker's ranking, for code that builds a constellation out of other constellations
/// (synthetic catalogs, edits) and must rank it exactly as a signature of audio would be ranked.
public enum PeakRanking {
    /// Ranks `candidates` as the peak picker ranks its own: a peak's rank is the number of candidates
    /// within ±``SignatureConfiguration/rankRadius`` frames whose level is strictly higher (an equal level
    /// does not count). Returns the candidates ranked below ``SignatureConfiguration/deepRankLimit``, in
    /// their order, with `rank` set.
    ///
    /// `candidates` must be ordered by frame; the picker orders peaks of one frame by bin.
    /// Cost: O(n · peaks per window).
    public static func rank(_ candidates: [Peak], configuration: SignatureConfiguration = .current) -> [Peak] {
        let radius = configuration.rankRadius, cap = configuration.deepRankLimit
        var out: [Peak] = []
        out.reserveCapacity(candidates.count)
        candidates.withUnsafeBufferPointer { c in
            var lo = 0
            for i in 0..<c.count {
                let stronger = strongerCount(of: i, in: c, windowStart: &lo, radius: radius, cap: cap)
                if stronger < cap {
                    var p = c[i]
                    p.rank = UInt16(stronger)
                    out.append(p)
                }
            }
        }
        return out
    }

    /// The number of `levels[window]` strictly above `level`, counted up to `cap`: ``strongerCount(of:in:windowStart:radius:cap:)``
    /// for a window already found, eight levels at a time (the signature generator's ranking; the same counts:
    /// a comparison per level either way, NaNs never counting).
    @inline(__always)
    static func strongerCount(than level: Float, levels: UnsafePointer<Float>, window: Range<Int>, cap: Int) -> Int {
        var j = window.lowerBound
        var count = 0
        let raw = UnsafeRawPointer(levels)
        let x = SIMD8<Float>(repeating: level)
        while j + 32 <= window.upperBound {
            // Four vectors, then one check against the cap.
            var lanes = SIMD8<Int32>()
            for q in 0..<4 {
                let v = raw.loadUnaligned(fromByteOffset: (j + 8 * q) * MemoryLayout<Float>.stride, as: SIMD8<Float>.self)
                lanes &+= SIMD8<Int32>().replacing(with: 1, where: v .> x)
            }
            count += Int(lanes.wrappedSum())
            if count >= cap { return cap }
            j += 32
        }
        while j < window.upperBound {
            if levels[j] > level { count += 1 }
            j += 1
        }
        return min(count, cap)
    }

    /// The number of peaks of `c` (ordered by frame) within ±`radius` frames of `c[index]` and strictly
    /// louder than it, counted up to `cap` (ranks from `cap` up are all dropped). `lo` is the first index
    /// that can still be in a window: pass 0 first, then the value left by the call for the previous index.
    @inline(__always)
    static func strongerCount(of index: Int, in c: UnsafeBufferPointer<Peak>, windowStart lo: inout Int,
                              radius: Int, cap: Int) -> Int {
        let cand = c[index]
        let f = Int(cand.frame)
        while Int(c[lo].frame) < f - radius { lo += 1 }
        var stronger = 0
        var j = lo
        while j < c.count, Int(c[j].frame) <= f + radius, stronger < cap {
            if c[j].level > cand.level { stronger += 1 }
            j += 1
        }
        return stronger
    }
}
