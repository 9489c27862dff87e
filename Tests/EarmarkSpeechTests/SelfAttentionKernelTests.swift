import CHalfGEMM
import Foundation
import Testing

@Suite("The encoder's self-attention kernel (earmark_self_attention)")
struct SelfAttentionKernelTests {
    typealias Generator = HalfGEMMTests.Generator
    typealias Kernel = (Int, Int, Int, UnsafePointer<Float>?, UnsafePointer<Float>?, UnsafePointer<Float>?, Int, Float,
                        UnsafeMutablePointer<Float>?, Int, UnsafeMutablePointer<Float>?) -> Void

    /// Queries, keys and values of `count` positions as one projection's output leaves them: a row of `ld` values per
    /// position holding the queries of all heads, then the keys, then the values (and 5 values never read).
    struct Case {
        var count: Int, heads: Int, headSize: Int, ld: Int
        var qkv: [Float]
        var width: Int { heads * headSize }
    }

    static func makeCase(count: Int, heads: Int, headSize: Int, spread: Float, seed: UInt64) -> Case {
        var g = Generator(state: seed)
        let ld = 3 * heads * headSize + 5
        return Case(count: count, heads: heads, headSize: headSize, ld: ld, qkv: (0..<(count * ld)).map { _ in g.unit() * spread })
    }

    /// The kernel's output in rows of `width + 3` values (the 3 past the heads left as they were: −7), its scratch
    /// filled with NaN first (the kernel must write every scratch value it reads).
    static func run(_ kernel: Kernel, _ c: Case, scale: Float) -> [Float] {
        let ldo = c.width + 3
        var out = [Float](repeating: -7, count: c.count * ldo)
        var scratch = [Float](repeating: .nan, count: max(1, earmark_self_attention_scratch_count(c.count, c.headSize)))
        c.qkv.withUnsafeBufferPointer { x in
            let q = x.baseAddress!
            out.withUnsafeMutableBufferPointer { o in
                scratch.withUnsafeMutableBufferPointer { s in
                    kernel(c.count, c.heads, c.headSize, q, q + c.width, q + 2 * c.width, c.ld, scale, o.baseAddress, ldo, s.baseAddress)
                }
            }
        }
        return out
    }

    static var paths: [(String, Kernel)] {
        [("dispatched", earmark_self_attention), ("avx512", earmark_self_attention_avx512), ("avx2", earmark_self_attention_avx2),
         ("portable", earmark_self_attention_portable)]
    }

    // (count, heads, headSize, spread): 1 position; fewer than one block of 16; across the 48-query row blocks and
    // the 3-block and 16-position tails; head sizes that are not multiples of 16 (the portable code on every CPU);
    // large scores (a peaked softmax, scores far below the maximum underflow to 0).
    static let shapes: [(count: Int, heads: Int, headSize: Int, spread: Float)] = [
        (1, 1, 16, 1), (5, 2, 16, 1), (17, 1, 64, 2), (47, 3, 32, 2), (49, 2, 64, 1), (97, 1, 48, 2), (150, 2, 64, 2),
        (200, 1, 64, 8), (33, 2, 20, 1), (12, 1, 8, 2),
    ]

    @Test("every path against a double-precision loop; the AVX-512 and AVX2 code give the same bits")
    func againstReference() {
        let scale: Float = 0.125
        print("self-attention path \(String(cString: earmark_self_attention_path()))")
        for (i, shape) in SelfAttentionKernelTests.shapes.enumerated() {
            let c = SelfAttentionKernelTests.makeCase(count: shape.count, heads: shape.heads, headSize: shape.headSize,
                                                      spread: shape.spread, seed: UInt64(70 + i))
            let outputs = SelfAttentionKernelTests.paths.map { SelfAttentionKernelTests.run($0.1, c, scale: scale) }
            // The dispatched code is the AVX-512 code (or what it falls back to), and that gives the AVX2 code's bits.
            #expect(outputs[0].map(\.bitPattern) == outputs[1].map(\.bitPattern), "shape \(shape): dispatched and avx512 differ")
            #expect(outputs[1].map(\.bitPattern) == outputs[2].map(\.bitPattern), "shape \(shape): avx512 and avx2 differ")
            let ldo = c.width + 3
            var worst = 0.0
            for h in 0..<c.heads {
                for r in 0..<c.count {
                    // Scores in Double, and the rounding bound of each Float score (a chain of headSize products).
                    var scores = [Double](repeating: 0, count: c.count)
                    var scoreBound = 0.0
                    for t in 0..<c.count {
                        var sum = 0.0, magnitude = 0.0
                        for p in 0..<c.headSize {
                            let term = Double(c.qkv[r * c.ld + h * c.headSize + p]) * Double(c.qkv[t * c.ld + c.width + h * c.headSize + p])
                            sum += term
                            magnitude += abs(term)
                        }
                        scores[t] = sum * Double(scale)
                        scoreBound = max(scoreBound, Double(c.headSize + 2) * Double(Float.ulpOfOne) * magnitude * Double(scale))
                    }
                    let top = scores.max()!
                    let weights = scores.map { exp($0 - top) }
                    let total = weights.reduce(0, +)
                    for j in 0..<c.headSize {
                        var sum = 0.0, magnitude = 0.0
                        for t in 0..<c.count {
                            let term = weights[t] / total * Double(c.qkv[t * c.ld + 2 * c.width + h * c.headSize + j])
                            sum += term
                            magnitude += abs(term)
                        }
                        // A weight's relative error: twice a score's error (the weight depends on a difference of two
                        // scores), the exp's 2 units in the last place, the sum and the normalisation; then the chain
                        // over the positions.
                        let weightError = 2 * scoreBound + 8 * Double(Float.ulpOfOne) + Double(c.count + 2) * Double(Float.ulpOfOne)
                        let tolerance = weightError * magnitude + Double(c.count + 2) * Double(Float.ulpOfOne) * magnitude + 1e-30
                        for (p, out) in outputs.enumerated() {
                            let got = Double(out[r * ldo + h * c.headSize + j])
                            #expect(abs(got - sum) <= tolerance,
                                    "\(SelfAttentionKernelTests.paths[p].0), shape \(shape): out[\(r)][\(h)][\(j)] = \(got), expected \(sum) ± \(tolerance)")
                            worst = max(worst, abs(got - sum) / tolerance)
                        }
                    }
                }
            }
            for out in outputs {
                for r in 0..<c.count {
                    for j in c.width..<ldo where out[r * ldo + j] != -7 {
                        Issue.record("shape \(shape): column \(j) past the heads was written")
                    }
                }
            }
            #expect(worst <= 1, "shape \(shape): largest error \(worst) of the bound")
        }
    }

    @Test("a whole window (1,500 positions, 2 heads of 64): the paths agree with each other")
    func wholeWindow() {
        let c = SelfAttentionKernelTests.makeCase(count: 1500, heads: 2, headSize: 64, spread: 2, seed: 5)
        let outputs = SelfAttentionKernelTests.paths.map { SelfAttentionKernelTests.run($0.1, c, scale: 0.125) }
        #expect(outputs[1].map(\.bitPattern) == outputs[2].map(\.bitPattern), "avx512 and avx2 differ")
        #expect(outputs[0].map(\.bitPattern) == outputs[1].map(\.bitPattern), "dispatched and avx512 differ")
        // The portable code differs only by its softmax's exp (libm's expf): within a few units in the last place of
        // the weights, so within 10⁻⁵ of outputs of magnitude up to 2.
        var largest: Float = 0
        for (a, b) in zip(outputs[2], outputs[3]) { largest = max(largest, abs(a - b)) }
        #expect(largest <= 1e-5, "portable and vector code differ by \(largest)")
    }
}
