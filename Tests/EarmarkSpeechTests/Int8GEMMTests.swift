import CHalfGEMM
import Foundation
import Testing

@Suite("Int8-weight GEMM (earmark_int8_gemm) against a double-precision loop, and the per-row quantisation")
struct Int8GEMMTests {
    typealias Generator = HalfGEMMTests.Generator

    typealias Kernel = (Int, Int, Int, UnsafePointer<Float>?, Int, UnsafePointer<Int8>?, Int, UnsafePointer<Float>?,
                        UnsafePointer<Float>?, UnsafeMutablePointer<Float>?, Int, Int32, UnsafeMutablePointer<Int16>?) -> Void

    struct Case {
        var a: [Float], w: [Int8], scales: [Float], bias: [Float], prior: [Float]
        var rows: Int, n: Int, k: Int, lda: Int, ldw: Int, ldo: Int
    }

    static func makeCase(rows: Int, n: Int, k: Int, seed: UInt64) -> Case {
        var g = Generator(state: seed)
        let lda = k + 3, ldw = k + 5, ldo = n + 2
        // Inputs with an outlier now and then (layer-normed activations have a few large values).
        let a = (0..<(rows * lda)).map { _ in g.unit() * (g.next() % 32 == 0 ? 20 : 1) }
        let w = (0..<(n * ldw)).map { _ in Int8(Int(g.next() % 255) - 127) }
        let scales = (0..<n).map { _ in (g.unit() + 1.5) * 1e-3 }
        return Case(a: a, w: w, scales: scales, bias: (0..<n).map { _ in g.unit() }, prior: (0..<(rows * ldo)).map { _ in g.unit() },
                    rows: rows, n: n, k: k, lda: lda, ldw: ldw, ldo: ldo)
    }

    static func run(_ kernel: Kernel, _ c: Case, bias useBias: Bool, accumulate: Bool) -> [Float] {
        var out = c.prior
        var scratch = [Int16](repeating: 0x5A5A, count: earmark_int8_gemm_scratch_count(c.rows, c.k))
        c.a.withUnsafeBufferPointer { a in
            c.w.withUnsafeBufferPointer { w in
                c.scales.withUnsafeBufferPointer { s in
                    c.bias.withUnsafeBufferPointer { b in
                        out.withUnsafeMutableBufferPointer { o in
                            scratch.withUnsafeMutableBufferPointer { t in
                                kernel(c.rows, c.n, c.k, a.baseAddress, c.lda, w.baseAddress, c.ldw, s.baseAddress,
                                       useBias ? b.baseAddress : nil, o.baseAddress, c.ldo, accumulate ? 1 : 0, t.baseAddress)
                            }
                        }
                    }
                }
            }
        }
        return out
    }

    /// Compares with Σ a · scale · w in Double. The bound: each input is rounded to a multiple of max|a| / 32767, so a
    /// term moves by at most max|a| / 65534 · |scale · w|; plus Float32 rounding of the result.
    static func check(_ out: [Float], _ c: Case, bias useBias: Bool, accumulate: Bool) -> Double {
        var worst = 0.0
        for r in 0..<c.rows {
            let top = (0..<c.k).map { Double(abs(c.a[r * c.lda + $0])) }.max() ?? 0
            for j in 0..<c.ldo {
                let got = out[r * c.ldo + j]
                guard j < c.n else {
                    #expect(got == c.prior[r * c.ldo + j], "column \(j) past n was written")
                    continue
                }
                var sum = 0.0, magnitude = 0.0, weights = 0.0
                for p in 0..<c.k {
                    let weight = Double(c.scales[j]) * Double(c.w[j * c.ldw + p])
                    sum += Double(c.a[r * c.lda + p]) * weight
                    magnitude += abs(Double(c.a[r * c.lda + p]) * weight)
                    weights += abs(weight)
                }
                let base = (accumulate ? Double(c.prior[r * c.ldo + j]) : 0) + (useBias ? Double(c.bias[j]) : 0)
                sum += base
                let tolerance = top / 65534 * weights * 1.0001 + 4 * Double(Float.ulpOfOne) * (magnitude + abs(base)) + 1e-30
                let error = abs(Double(got) - sum)
                #expect(error <= tolerance, "rows \(c.rows) n \(c.n) k \(c.k): out[\(r)][\(j)] = \(got), expected \(sum) ± \(tolerance)")
                worst = max(worst, error / max(tolerance, 1e-30))
            }
        }
        return worst
    }

    static let shapes: [(rows: Int, n: Int, k: Int)] = [
        (1, 1, 1), (1, 7, 13), (2, 9, 1), (2, 5, 16), (3, 17, 1001), (5, 33, 515), (5, 64, 512), (6, 4, 7),
        (7, 5, 40), (13, 6, 23), (16, 11, 77), (33, 3, 9), (2, 3, 2048), (5, 3, 2049), (1, 2, 4100),
    ]

    static var fastKernels: [(String, Kernel)] { [("dispatched", earmark_int8_gemm), ("avx2", earmark_int8_gemm_avx2),
                                                   ("avx512", earmark_int8_gemm_avx512)] }

    @Test("the dispatched and the portable kernels agree with the reference within the quantisation bound, and bit for bit with each other")
    func kernels() {
        var worst = 0.0
        for (i, s) in Self.shapes.enumerated() {
            for variant in 0..<4 {
                let c = Self.makeCase(rows: s.rows, n: s.n, k: s.k, seed: UInt64(500 + i * 4 + variant))
                let bias = variant & 1 == 1, accumulate = variant & 2 == 2
                let portable = Self.run(earmark_int8_gemm_portable, c, bias: bias, accumulate: accumulate)
                _ = Self.check(portable, c, bias: bias, accumulate: accumulate)
                // Integer sums and shared scalar code: the same bits on every path (the dispatched one, and the AVX2
                // and AVX-512 ones explicitly, each falling back to the next where the CPU lacks it).
                for (name, kernel) in Self.fastKernels {
                    let fast = Self.run(kernel, c, bias: bias, accumulate: accumulate)
                    worst = max(worst, Self.check(fast, c, bias: bias, accumulate: accumulate))
                    #expect(fast.map(\.bitPattern) == portable.map(\.bitPattern), "\(name), rows \(s.rows) n \(s.n) k \(s.k): paths differ")
                }
            }
        }
        print("int8 GEMM path \(String(cString: earmark_int8_gemm_path())): largest error \(worst) of the bound")
    }

    typealias PackedKernel = (Int, Int, Int, UnsafePointer<Float>?, Int, UnsafePointer<Int16>?, UnsafePointer<Float>?,
                              UnsafePointer<Float>?, UnsafeMutablePointer<Float>?, Int, Int32, UnsafeMutablePointer<Int16>?) -> Void

    static func runPacked(_ kernel: PackedKernel, _ c: Case, bias useBias: Bool, accumulate: Bool) -> [Float] {
        var out = c.prior
        var packed = [Int16](repeating: 0x5A5A, count: earmark_int8_pack_count(c.n, c.k))
        var scratch = [Int16](repeating: 0x5A5A, count: earmark_int8_gemm_packed_scratch_count(c.k))
        c.w.withUnsafeBufferPointer { w in
            packed.withUnsafeMutableBufferPointer { earmark_int8_pack(w.baseAddress, c.ldw, c.n, c.k, $0.baseAddress) }
        }
        c.a.withUnsafeBufferPointer { a in
            packed.withUnsafeBufferPointer { w in
                c.scales.withUnsafeBufferPointer { s in
                    c.bias.withUnsafeBufferPointer { b in
                        out.withUnsafeMutableBufferPointer { o in
                            scratch.withUnsafeMutableBufferPointer { t in
                                kernel(c.rows, c.n, c.k, a.baseAddress, c.lda, w.baseAddress, s.baseAddress,
                                       useBias ? b.baseAddress : nil, o.baseAddress, c.ldo, accumulate ? 1 : 0, t.baseAddress)
                            }
                        }
                    }
                }
            }
        }
        return out
    }

    @Test("the packed many-row kernel gives earmark_int8_gemm's bits on every path (AVX-512 VNNI, AVX2, portable)")
    func packedKernels() {
        // Row counts across the 48-row tiles and 12- and 6-row blocks, outputs across 32-wide panels, odd k and k past
        // the 256-input chunks.
        let shapes: [(rows: Int, n: Int, k: Int)] = [
            (1, 1, 1), (1, 33, 3), (5, 31, 64), (12, 32, 256), (13, 65, 257), (49, 40, 77), (50, 7, 513), (97, 64, 1024),
            (7, 3, 2049), (3, 2, 4100),
        ]
        let kernels: [(String, PackedKernel)] = [("dispatched", earmark_int8_gemm_packed), ("avx2", earmark_int8_gemm_packed_avx2),
                                                 ("avx512", earmark_int8_gemm_packed_avx512), ("portable", earmark_int8_gemm_packed_portable)]
        for (i, s) in shapes.enumerated() {
            for variant in 0..<4 {
                let c = Self.makeCase(rows: s.rows, n: s.n, k: s.k, seed: UInt64(900 + i * 4 + variant))
                let bias = variant & 1 == 1, accumulate = variant & 2 == 2
                let reference = Self.run(earmark_int8_gemm_portable, c, bias: bias, accumulate: accumulate)
                for (name, kernel) in kernels {
                    let out = Self.runPacked(kernel, c, bias: bias, accumulate: accumulate)
                    #expect(out.map(\.bitPattern) == reference.map(\.bitPattern), "\(name), rows \(s.rows) n \(s.n) k \(s.k): differs")
                }
            }
        }
        // The extremes: every input the row's largest and every weight −127 over long rows (exact sums, no overflow).
        for k in [256, 2048, 2049, 6000] {
            let c = Case(a: [Float](repeating: 0.5, count: k), w: [Int8](repeating: -127, count: 2 * k), scales: [1, 2], bias: [0, 0],
                         prior: [0, 0], rows: 1, n: 2, k: k, lda: k, ldw: k, ldo: 2)
            for (name, kernel) in kernels {
                let out = Self.runPacked(kernel, c, bias: false, accumulate: false)
                #expect(out == Self.run(earmark_int8_gemm_portable, c, bias: false, accumulate: false), "\(name), k \(k)")
                #expect(abs(Double(out[0]) + 0.5 * 127 * Double(k)) <= 1e-5 * 127 * Double(k), "\(name), k \(k): \(out[0])")
            }
        }
    }

    @Test("sums at the int16 × int8 extremes over long rows do not overflow")
    func extremes() {
        for k in [2048, 2049, 4096, 6000] {
            // Every input the row's largest (quantised to 32767) and every weight −127: the exact sum is −k · 127 · scale.
            let a = [Float](repeating: 0.5, count: k), w = [Int8](repeating: -127, count: 2 * k)
            let c = Case(a: a, w: w, scales: [1, 2], bias: [0, 0], prior: [0, 0], rows: 1, n: 2, k: k, lda: k, ldw: k, ldo: 2)
            for kernel in [earmark_int8_gemm, earmark_int8_gemm_avx2, earmark_int8_gemm_avx512, earmark_int8_gemm_portable] as [Kernel] {
                let out = Self.run(kernel, c, bias: false, accumulate: false)
                #expect(abs(Double(out[0]) + 0.5 * 127 * Double(k)) <= 1e-5 * 127 * Double(k), "k \(k): \(out[0])")
                #expect(abs(Double(out[1]) + 127 * Double(k)) <= 1e-5 * 254 * Double(k), "k \(k): \(out[1])")
            }
        }
    }

    @Test("a row of zeros gives the bias, a row with a NaN gives NaN")
    func specialRows() {
        let k = 20
        var a = [Float](repeating: 0, count: 2 * k)
        a[k + 3] = .nan
        let c = Case(a: a, w: [Int8](repeating: 5, count: 3 * k), scales: [1, 1, 1], bias: [0.25, -1, 2], prior: [Float](repeating: 0, count: 6),
                     rows: 2, n: 3, k: k, lda: k, ldw: k, ldo: 3)
        for kernel in [earmark_int8_gemm, earmark_int8_gemm_avx2, earmark_int8_gemm_avx512, earmark_int8_gemm_portable] as [Kernel] {
            let out = Self.run(kernel, c, bias: true, accumulate: false)
            #expect(Array(out[0..<3]) == [0.25, -1, 2])
            #expect(out[3..<6].allSatisfy { $0.isNaN })
        }
    }

    @Test("per-row quantisation of float16 weights: every value within half a step of the original, the largest kept exactly")
    func quantisation() {
        var g = Generator(state: 7)
        let n = 37, k = 301
        var half: [UInt16] = (0..<(n * k)).map { _ in Float16(g.unit() * (g.next() % 8 == 0 ? 4 : 0.5)).bitPattern }
        for p in 0..<k { half[5 * k + p] = Float16(0).bitPattern }   // a row of zeros
        var q = [Int8](repeating: 0, count: n * k), scales = [Float](repeating: -1, count: n)
        half.withUnsafeBufferPointer { h in
            q.withUnsafeMutableBufferPointer { qb in
                scales.withUnsafeMutableBufferPointer { earmark_quantise_half_rows(h.baseAddress, n, k, qb.baseAddress, $0.baseAddress) }
            }
        }
        for j in 0..<n {
            let row = (0..<k).map { Double(Float(Float16(bitPattern: half[j * k + $0]))) }
            let top = row.map(abs).max()!
            #expect(abs(Double(scales[j]) - top / 127) <= 1e-6 * top / 127, "row \(j): scale \(scales[j]), expected \(top / 127)")
            var largestKept = false
            for p in 0..<k {
                let value = Double(q[j * k + p]) * Double(scales[j])
                #expect(q[j * k + p] != -128)
                #expect(abs(value - row[p]) <= Double(scales[j]) * 0.5 * 1.0001 + 1e-30, "row \(j) column \(p): \(value) for \(row[p])")
                if abs(row[p]) == top && abs(q[j * k + p]) == 127 { largestKept = true }
            }
            #expect(largestKept || top == 0)
        }
        #expect(scales[5] == 0 && q[(5 * k)..<(6 * k)].allSatisfy { $0 == 0 })
    }
}
