import CHalfGEMM
import Foundation
import Testing

@Suite("Float16-weight GEMM (CHalfGEMM) against a plain double-precision loop")
struct HalfGEMMTests {
    /// SplitMix64, so that every run draws the same data.
    struct Generator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        /// Uniform in [−1, 1).
        mutating func unit() -> Float { Float(next() >> 40) / Float(1 << 23) - 1 }
    }

    typealias Kernel = (Int, Int, Int, UnsafePointer<Float>?, Int, UnsafePointer<UInt16>?, Int, UnsafePointer<Float>?,
                        UnsafeMutablePointer<Float>?, Int, Int32) -> Void

    /// Runs `kernel` on random data of the given shape (rows with strides wider than the data) and compares every
    /// output with Σ in Double; the tolerance is Float32's worst-case summation error over the terms' magnitudes.
    func check(_ kernel: Kernel, rows: Int, n: Int, k: Int, bias useBias: Bool, accumulate: Bool, seed: UInt64) -> Float {
        var g = Generator(state: seed)
        let lda = k + 3, ldw = k + 5, ldo = n + 2
        let a = (0..<(rows * lda)).map { _ in g.unit() }
        // Weights of every magnitude float16 has, subnormals (about 1 in 16) included.
        let w: [UInt16] = (0..<(n * ldw)).map { _ in
            let v = g.unit()
            let scale: Float = g.next() % 16 == 0 ? 1e-6 : 1
            return Float16(v * scale).bitPattern
        }
        let bias = (0..<n).map { _ in g.unit() }
        let prior = (0..<(rows * ldo)).map { _ in g.unit() }
        var out = prior
        a.withUnsafeBufferPointer { a in
            w.withUnsafeBufferPointer { w in
                bias.withUnsafeBufferPointer { b in
                    out.withUnsafeMutableBufferPointer { o in
                        kernel(rows, n, k, a.baseAddress, lda, w.baseAddress, ldw, useBias ? b.baseAddress : nil, o.baseAddress, ldo,
                               accumulate ? 1 : 0)
                    }
                }
            }
        }
        var worst: Float = 0
        for r in 0..<rows {
            for j in 0..<ldo {
                let got = out[r * ldo + j]
                guard j < n else {
                    #expect(got == prior[r * ldo + j], "column \(j) past n was written")
                    continue
                }
                var sum = 0.0, magnitude = 0.0
                for p in 0..<k {
                    let term = Double(a[r * lda + p]) * Double(Float(Float16(bitPattern: w[j * ldw + p])))
                    sum += term
                    magnitude += abs(term)
                }
                let base = (accumulate ? Double(prior[r * ldo + j]) : 0) + (useBias ? Double(bias[j]) : 0)
                sum += base
                magnitude += abs(base)
                let tolerance = Double(k + 2) * Double(Float.ulpOfOne) * magnitude + 1e-30
                let error = abs(Double(got) - sum)
                #expect(error <= tolerance, "rows \(rows) n \(n) k \(k): out[\(r)][\(j)] = \(got), expected \(sum)")
                worst = max(worst, Float(error / max(magnitude, 1e-30)))
            }
        }
        return worst
    }

    static let shapes: [(rows: Int, n: Int, k: Int)] = [
        (1, 1, 1), (1, 7, 13), (2, 9, 1), (2, 5, 8), (3, 17, 1001), (5, 33, 515), (5, 64, 512), (6, 4, 7),
        (7, 5, 40), (13, 6, 23), (16, 11, 77), (33, 3, 9),
    ]

    @Test("the dispatched kernel (AVX2 + FMA + F16C where the CPU has them) agrees with the reference, tails included")
    func dispatched() {
        var worst: Float = 0
        for (i, s) in Self.shapes.enumerated() {
            for variant in 0..<4 {
                worst = max(worst, check(earmark_half_gemm, rows: s.rows, n: s.n, k: s.k, bias: variant & 1 == 1,
                                         accumulate: variant & 2 == 2, seed: UInt64(i * 4 + variant)))
            }
        }
        print("CHalfGEMM path \(String(cString: earmark_half_gemm_path())): largest error \(worst) of the terms' magnitude")
    }

    @Test("the portable kernel agrees with the reference on the same shapes")
    func portable() {
        for (i, s) in Self.shapes.enumerated() {
            for variant in 0..<4 {
                _ = check(earmark_half_gemm_portable, rows: s.rows, n: s.n, k: s.k, bias: variant & 1 == 1,
                          accumulate: variant & 2 == 2, seed: UInt64(100 + i * 4 + variant))
            }
        }
    }

    @Test("widening float16 to Float32 is exact for every bit pattern (NaNs stay NaN)")
    func widening() {
        let all = (0...UInt16.max).map { $0 }
        for count in [all.count, 13, 7, 0] {
            var out = [Float](repeating: 7, count: all.count)
            all.withUnsafeBufferPointer { src in
                out.withUnsafeMutableBufferPointer { earmark_half_to_float(src.baseAddress, $0.baseAddress, count) }
            }
            let wrong = (0..<all.count).filter { i in
                let expected = i < count ? Float(Float16(bitPattern: all[i])) : 7
                return !(out[i] == expected || (out[i].isNaN && expected.isNaN))
            }
            #expect(wrong.isEmpty, "count \(count): \(wrong.count) values differ, first bits \(wrong.first.map { all[$0] } ?? 0)")
        }
    }

    @Test("softmax (dispatched and portable) agrees with a double-precision softmax on odd lengths")
    func softmax() {
        var g = Generator(state: 42)
        for count in [1, 2, 7, 8, 9, 15, 16, 17, 100, 1500, 1501] {
            let x = (0..<count).map { _ in g.unit() * 40 }
            let top = Double(x.max()!)
            let e = x.map { Foundation.exp(Double($0) - top) }
            let sum = e.reduce(0, +)
            for kernel in [earmark_softmax, earmark_softmax_portable] {
                var y = x
                y.withUnsafeMutableBufferPointer { kernel($0.baseAddress, count) }
                let wrong = (0..<count).filter { abs(Double(y[$0]) - e[$0] / sum) > 1e-5 * e[$0] / sum + 1e-30 }
                #expect(wrong.isEmpty, "count \(count): \(wrong.count) values off, first \(wrong.first.map { (y[$0], e[$0] / sum) }.debugDescription)")
            }
        }
    }

    @Test("log-sum-exp (dispatched and portable) agrees with a double-precision one: lengths around its 1,024-value blocks, −∞ values, a vocabulary-sized row")
    func logSumExp() {
        var g = Generator(state: 7)
        for count in [1, 7, 8, 9, 1023, 1024, 1025, 1031, 2048, 2053, 51_865] {
            var x = (0..<count).map { _ in g.unit() * 30 - 5 }
            // Suppressed tokens, as the decoder's rules leave them.
            for i in stride(from: 3, to: count, by: 5) { x[i] = -.infinity }
            let top = Double(x.max()!)
            let exact = top + Foundation.log(x.map { Foundation.exp(Double($0) - top) }.reduce(0, +))
            for (name, kernel) in [("dispatched", earmark_log_sum_exp), ("portable", earmark_log_sum_exp_portable)] as [(String, (UnsafePointer<Float>?, Int) -> Double)] {
                let got = x.withUnsafeBufferPointer { kernel($0.baseAddress, count) }
                #expect(abs(got - exact) <= 1e-5, "\(name), count \(count): \(got) against \(exact)")
            }
        }
        let none = [Float](repeating: -.infinity, count: 9)
        #expect(none.withUnsafeBufferPointer { earmark_log_sum_exp($0.baseAddress, 9) } == -.infinity)
        #expect(none.withUnsafeBufferPointer { earmark_log_sum_exp_portable($0.baseAddress, 9) } == -.infinity)
        #expect(earmark_log_sum_exp(nil, 0) == -.infinity)
    }

    @Test("GELU (dispatched and portable) agrees with v/2 · (1 + erf(v/√2)) in double precision, odd lengths and extremes included")
    func gelu() {
        var g = Generator(state: 9)
        var values: [Float] = [0, -0.0, 1e-30, -1e-30, 1e-6, -1e-6, 0.5, -0.5, 3, -3, 5.5, -5.5, 9, -9, 13, -13, 40, -40, 1e4, -1e4]
        values += (0..<2001).map { _ in g.unit() * 12 }
        for count in [values.count, 1, 7, 9, 17] {
            for (name, kernel) in [("dispatched", earmark_gelu), ("portable", earmark_gelu_portable)] as [(String, (UnsafeMutablePointer<Float>?, Int) -> Void)] {
                var y = values
                y.withUnsafeMutableBufferPointer { kernel($0.baseAddress, count) }
                let wrong = (0..<values.count).filter { i in
                    let v = Double(values[i])
                    guard i < count else { return y[i] != values[i] }
                    let exact = 0.5 * v * (1 + erf(v / 2.0.squareRoot()))
                    return !(abs(Double(y[i]) - exact) <= 5e-7 * abs(v) + 1e-37)
                }
                #expect(wrong.isEmpty, "\(name), count \(count): \(wrong.count) values off, first \(wrong.first.map { (values[$0], y[$0]) }.debugDescription)")
            }
        }
    }
}
