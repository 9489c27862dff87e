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
        let levels = candidates.map(\.level)
        var out: [Peak] = []
        out.reserveCapacity(candidates.count)
        var window = Window()
        candidates.withUnsafeBufferPointer { c in
            levels.withUnsafeBufferPointer { l in
                for i in 0..<c.count {
                    let stronger = strongerCount(than: c[i].level, levels: l.baseAddress!, window: window.move(to: i, in: c, radius: radius), cap: cap)
                    if stronger < cap {
                        var p = c[i]
                        p.rank = UInt16(stronger)
                        out.append(p)
                    }
                }
            }
        }
        return out
    }

    /// The candidates within ±rankRadius frames of the one being ranked, `start..<end` of candidates ordered by
    /// frame. Both bounds only move forward, as candidates are ranked in order.
    struct Window {
        var start = 0
        var end = 0

        /// The window of candidate `i` (at or after the last one asked for).
        @inline(__always)
        mutating func move(to i: Int, in c: UnsafeBufferPointer<Peak>, radius: Int) -> Range<Int> {
            let f = Int(c[i].frame)
            while Int(c[start].frame) < f - radius { start += 1 }
            end = max(end, i + 1)
            while end < c.count, Int(c[end].frame) <= f + radius { end += 1 }
            return start..<end
        }

        /// After the first `count` candidates were removed.
        mutating func dropFirst(_ count: Int) {
            start -= count
            end -= count
        }
    }

    /// The number of `levels[window]` strictly above `level`, counted up to `cap`, eight levels at a time (a
    /// comparison per level; NaNs never count).
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
}
