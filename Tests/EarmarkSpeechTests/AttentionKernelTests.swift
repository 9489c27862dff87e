import CHalfGEMM
import Foundation
import Testing

@Suite("Cross-attention kernels on packed keys and values (earmark_attention_scores, earmark_attention_values)")
struct AttentionKernelTests {
    typealias Generator = HalfGEMMTests.Generator

    /// One head's keys and values as rows of width `ld` (head dimensions `offset ..< offset + headSize`), the same
    /// packed, and queries and attention weights of `rows` rows.
    struct Case {
        var rows: Int, count: Int, headSize: Int, ld: Int, offset: Int
        var keys: [Float], values: [Float], queries: [Float], weights: [Float]
        var packedKeys: [Float], packedValues: [Float]
    }

    /// With `binary16`, the keys and values are values of binary16 (Float32 rounded to it), so that the Float32 kernels
    /// and the binary16 ones read the same numbers.
    static func makeCase(rows: Int, count: Int, headSize: Int, seed: UInt64, binary16: Bool = false) -> Case {
        var g = Generator(state: seed)
        let ld = headSize * 3 + 16, offset = headSize
        let round: (Float) -> Float = binary16 ? { Float(Float16($0)) } : { $0 }
        let keys = (0..<(count * ld)).map { _ in round(g.unit() * 4) }
        let values = (0..<(count * ld)).map { _ in round(g.unit() * 4) }
        let queries = (0..<(rows * ld)).map { _ in g.unit() }
        // Attention weights: non-negative, each row summing to about 1 (a softmax's output).
        let weights = (0..<(rows * count)).map { _ in (g.unit() + 1) / Float(max(1, count)) }
        var packedKeys = [Float](repeating: .nan, count: earmark_attention_packed_count(count, headSize))
        var packedValues = [Float](repeating: .nan, count: earmark_attention_packed_count(count, headSize))
        keys.withUnsafeBufferPointer { k in
            packedKeys.withUnsafeMutableBufferPointer { earmark_attention_pack_keys(k.baseAddress! + offset, ld, count, headSize, $0.baseAddress) }
        }
        values.withUnsafeBufferPointer { v in
            packedValues.withUnsafeMutableBufferPointer { earmark_attention_pack_values(v.baseAddress! + offset, ld, count, headSize, $0.baseAddress) }
        }
        return Case(rows: rows, count: count, headSize: headSize, ld: ld, offset: offset, keys: keys, values: values, queries: queries,
                    weights: weights, packedKeys: packedKeys, packedValues: packedValues)
    }

    typealias Scores = (Int, Int, Int, UnsafePointer<Float>?, Int, UnsafePointer<Float>?, Float, UnsafeMutablePointer<Float>?, Int) -> Void
    typealias Values = (Int, Int, Int, UnsafePointer<Float>?, Int, UnsafePointer<Float>?, UnsafeMutablePointer<Float>?, Int) -> Void

    /// Scores into rows of `count + 2` values, the two past `count` left as they were (−7).
    static func scores(_ kernel: Scores, _ c: Case, scale: Float) -> [Float] {
        let lds = c.count + 2
        var out = [Float](repeating: -7, count: c.rows * lds)
        c.queries.withUnsafeBufferPointer { q in
            c.packedKeys.withUnsafeBufferPointer { k in
                out.withUnsafeMutableBufferPointer { kernel(c.rows, c.count, c.headSize, q.baseAddress! + c.offset, c.ld, k.baseAddress, scale, $0.baseAddress, lds) }
            }
        }
        return out
    }

    /// Weighted values into rows of width `headSize + 3`, the three past `headSize` left as they were (−7).
    static func values(_ kernel: Values, _ c: Case) -> [Float] {
        let ldo = c.headSize + 3
        var out = [Float](repeating: -7, count: c.rows * ldo)
        c.weights.withUnsafeBufferPointer { w in
            c.packedValues.withUnsafeBufferPointer { v in
                out.withUnsafeMutableBufferPointer { kernel(c.rows, c.count, c.headSize, w.baseAddress, c.count, v.baseAddress, $0.baseAddress, ldo) }
            }
        }
        return out
    }

    static let shapes: [(rows: Int, count: Int, headSize: Int)] = [
        (1, 1, 16), (1, 15, 64), (1, 16, 64), (1, 17, 64), (2, 33, 32), (3, 100, 64), (5, 1500, 64), (6, 47, 48), (7, 31, 64),
        (12, 64, 16), (13, 250, 64), (32, 1500, 64), (5, 750, 64),
        (1, 5, 4), (5, 50, 4), (3, 40, 20), (7, 17, 1),   // head sizes that are not multiples of 16 (a foreign model's)
    ]

    @Test("scores and weighted values against a double-precision loop; the dispatched and the portable code agree bit for bit")
    func againstReference() {
        for (i, shape) in AttentionKernelTests.shapes.enumerated() {
            let c = AttentionKernelTests.makeCase(rows: shape.rows, count: shape.count, headSize: shape.headSize, seed: UInt64(40 + i))
            let scale: Float = 0.125
            let s = AttentionKernelTests.scores(earmark_attention_scores, c, scale: scale)
            let sp = AttentionKernelTests.scores(earmark_attention_scores_portable, c, scale: scale)
            #expect(s.map(\.bitPattern) == sp.map(\.bitPattern), "scores, shape \(shape): the two paths differ")
            let v = AttentionKernelTests.values(earmark_attention_values, c)
            let vp = AttentionKernelTests.values(earmark_attention_values_portable, c)
            #expect(v.map(\.bitPattern) == vp.map(\.bitPattern), "values, shape \(shape): the two paths differ")
            let lds = c.count + 2, ldo = c.headSize + 3
            for r in 0..<c.rows {
                for t in 0..<lds {
                    let got = s[r * lds + t]
                    guard t < c.count else {
                        #expect(got == -7, "score \(t) past count was written")
                        continue
                    }
                    var sum = 0.0, magnitude = 0.0
                    for p in 0..<c.headSize {
                        let term = Double(c.queries[r * c.ld + c.offset + p]) * Double(c.keys[t * c.ld + c.offset + p])
                        sum += term
                        magnitude += abs(term)
                    }
                    let expected = sum * Double(scale)
                    let tolerance = Double(c.headSize + 2) * Double(Float.ulpOfOne) * magnitude * Double(scale) + 1e-30
                    #expect(abs(Double(got) - expected) <= tolerance, "shape \(shape): score[\(r)][\(t)] = \(got), expected \(expected)")
                }
                for j in 0..<ldo {
                    let got = v[r * ldo + j]
                    guard j < c.headSize else {
                        #expect(got == -7, "value column \(j) past headSize was written")
                        continue
                    }
                    var sum = 0.0, magnitude = 0.0
                    for t in 0..<c.count {
                        let term = Double(c.weights[r * c.count + t]) * Double(c.values[t * c.ld + c.offset + j])
                        sum += term
                        magnitude += abs(term)
                    }
                    let tolerance = Double(c.count + 2) * Double(Float.ulpOfOne) * magnitude + 1e-30
                    #expect(abs(Double(got) - sum) <= tolerance, "shape \(shape): value[\(r)][\(j)] = \(got), expected \(sum)")
                }
            }
        }
    }

    /// The case's keys and values as binary16 bit patterns (earmark_float_to_half), packed by the binary16 packings.
    static func halfPacked(_ c: Case) -> (keys: [UInt16], values: [UInt16]) {
        func pack(_ source: [Float], keys: Bool) -> [UInt16] {
            var bits = [UInt16](repeating: 0, count: source.count)
            earmark_float_to_half(source, &bits, source.count)
            var packed = [UInt16](repeating: 0xFFFF, count: earmark_attention_packed_count(c.count, c.headSize))
            bits.withUnsafeBufferPointer { b in
                packed.withUnsafeMutableBytes { out in
                    if keys {
                        earmark_attention_pack_keys_half(b.baseAddress! + c.offset, c.ld, c.count, c.headSize, out.baseAddress)
                    } else {
                        earmark_attention_pack_values_half(b.baseAddress! + c.offset, c.ld, c.count, c.headSize, out.baseAddress)
                    }
                }
            }
            return packed
        }
        return (pack(c.keys, keys: true), pack(c.values, keys: false))
    }

    @Test("binary16 keys and values: the same bits as the Float32 kernels on the same numbers, on both paths")
    func binary16Kernels() {
        for (i, shape) in AttentionKernelTests.shapes.enumerated() {
            let c = AttentionKernelTests.makeCase(rows: shape.rows, count: shape.count, headSize: shape.headSize, seed: UInt64(90 + i),
                                                  binary16: true)
            let (keys, values) = AttentionKernelTests.halfPacked(c)
            // The key packing writes padded(count) · headSize values (the rest of the buffer is the layout's rounding).
            let written = earmark_attention_padded(c.count) * c.headSize
            #expect(zip(keys.prefix(written), c.packedKeys).allSatisfy { Float(Float16(bitPattern: $0)) == $1 }, "shape \(shape): packed keys")
            #expect(zip(values, c.packedValues).allSatisfy { Float(Float16(bitPattern: $0)) == $1 }, "shape \(shape): packed values")
            let scale: Float = 0.125
            let expectedScores = AttentionKernelTests.scores(earmark_attention_scores, c, scale: scale)
            let expectedValues = AttentionKernelTests.values(earmark_attention_values, c)
            for (scoresKernel, valuesKernel, path) in [(earmark_attention_scores_half, earmark_attention_values_half, "dispatched"),
                                           (earmark_attention_scores_half_portable, earmark_attention_values_half_portable, "portable")] {
                let lds = c.count + 2, ldo = c.headSize + 3
                var s = [Float](repeating: -7, count: c.rows * lds), v = [Float](repeating: -7, count: c.rows * ldo)
                keys.withUnsafeBytes { k in
                    c.queries.withUnsafeBufferPointer { q in
                        scoresKernel(c.rows, c.count, c.headSize, q.baseAddress! + c.offset, c.ld, k.baseAddress, scale, &s, lds)
                    }
                }
                values.withUnsafeBytes { packed in
                    c.weights.withUnsafeBufferPointer { w in
                        valuesKernel(c.rows, c.count, c.headSize, w.baseAddress, c.count, packed.baseAddress, &v, ldo)
                    }
                }
                #expect(s.map(\.bitPattern) == expectedScores.map(\.bitPattern), "scores, shape \(shape), \(path)")
                #expect(v.map(\.bitPattern) == expectedValues.map(\.bitPattern), "values, shape \(shape), \(path)")
            }
        }
    }

    @Test("Float32 to binary16: nearest, ties to even, subnormals, saturation at ±65504; the vector and portable code agree")
    func toBinary16() {
        var g = Generator(state: 5)
        var inputs: [Float] = [0, -0, 1, -1, 65504, 65519, 65520, 70000, .infinity, -.infinity, 6.1035156e-05, 6.0e-05,
                               5.9604645e-08, 2.9802322e-08, 2.9802326e-08, 1.0e-8, -3.0e-06, 1.00048828125, 1.00146484375,
                               .leastNonzeroMagnitude, .greatestFiniteMagnitude]
        for _ in 0..<4000 {
            let exponent = Float(Int(g.unit() * 20))   // exponents from -19 to 19
            inputs.append(g.unit() * Float(pow(2.0, Double(exponent))))
        }
        // Ties: the midpoints between neighbouring binary16 values, normal and subnormal.
        for bits: UInt16 in [0x0001, 0x0002, 0x03FF, 0x0400, 0x3C00, 0x3C01, 0x7BFE] {
            let low = Float(Float16(bitPattern: bits)), high = Float(Float16(bitPattern: bits + 1))
            inputs.append((low + high) / 2)
            inputs.append(-(low + high) / 2)
        }
        var fast = [UInt16](repeating: 0, count: inputs.count), portable = fast
        earmark_float_to_half(inputs, &fast, inputs.count)
        earmark_float_to_half_portable(inputs, &portable, inputs.count)
        #expect(fast == portable)
        for (x, bits) in zip(inputs, portable) {
            let expected: UInt16 = abs(x) >= 65504 ? (x < 0 ? 0xFBFF : 0x7BFF) : Float16(x).bitPattern
            #expect(bits == expected, "\(x): \(String(bits, radix: 16)), expected \(String(expected, radix: 16))")
        }
        var nan = [UInt16](repeating: 0, count: 1)
        earmark_float_to_half([Float.nan], &nan, 1)
        #expect(Float16(bitPattern: nan[0]).isNaN)
    }

    @Test("packing: keys in blocks of 16 positions, values in column blocks of 16, zeros past the last position")
    func packing() {
        let c = AttentionKernelTests.makeCase(rows: 1, count: 21, headSize: 32, seed: 7)
        let padded = earmark_attention_padded(21)
        #expect(padded == 32 && earmark_attention_padded(32) == 32 && earmark_attention_padded(0) == 0)
        for t in 0..<padded {
            for p in 0..<c.headSize {
                let key = c.packedKeys[(t / 16) * 16 * c.headSize + p * 16 + t % 16]
                let value = c.packedValues[(p / 16) * 16 * padded + t * 16 + p % 16]
                #expect(key == (t < 21 ? c.keys[t * c.ld + c.offset + p] : 0))
                #expect(value == (t < 21 ? c.values[t * c.ld + c.offset + p] : 0))
            }
        }
    }
}
