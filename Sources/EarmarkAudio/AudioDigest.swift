/// A fast 128-bit digest of decoded audio, for recognising identical audio (not a cryptographic hash).
///
/// Samples are quantised to 16 bits first, so the digest names the audio rather than float rounding:
/// the same recording decoded from WAV or FLAC gives the same digest.
public struct AudioDigest {
    private var a: UInt64 = 0x9E37_79B9_7F4A_7C15
    private var b: UInt64 = 0xC2B2_AE3D_27D4_EB4F
    private var count: UInt64 = 0
    private var word: UInt64 = 0
    private var inWord = 0

    public init() {}

    public mutating func update(_ samples: [Float]) {
        samples.withUnsafeBufferPointer { buf in
            var i = 0
            // Samples complete the word left open by the previous call first, one by one.
            while inWord != 0, i < buf.count {
                push(Self.quantize(buf[i]))
                i += 1
            }
            // Then whole words of four: the same words as one sample at a time, without the per-sample state.
            while i + 4 <= buf.count {
                let w = UInt64(Self.quantize(buf[i])) << 48 | UInt64(Self.quantize(buf[i + 1])) << 32
                    | UInt64(Self.quantize(buf[i + 2])) << 16 | UInt64(Self.quantize(buf[i + 3]))
                mix(w)
                i += 4
            }
            while i < buf.count {
                push(Self.quantize(buf[i]))
                i += 1
            }
        }
        count &+= UInt64(samples.count)
    }

    /// A sample as 16 bits, rounded half away from zero with a truncating conversion (no libm call per sample).
    @inline(__always) private static func quantize(_ s: Float) -> UInt16 {
        let x = max(-32767.5, min(32767.4, s * 32767))
        return UInt16(bitPattern: Int16(x < 0 ? x - 0.5 : x + 0.5))
    }

    @inline(__always) private mutating func push(_ v: UInt16) {
        word = word << 16 | UInt64(v)
        inWord += 1
        if inWord == 4 { mix(word); word = 0; inWord = 0 }
    }

    @inline(__always) private mutating func mix(_ w: UInt64) {
        a = (a ^ w) &* 0xFF51_AFD7_ED55_8CCD
        a ^= a >> 33
        b = (b &+ w &* 0x9E37_79B9_7F4A_7C15) &* 0xC4CE_B9FE_1A85_EC53
        b ^= b >> 29
    }

    /// 32 hex digits; the sample count is folded in.
    public mutating func finalizeHex() -> String {
        if inWord > 0 { mix(word ^ UInt64(inWord) << 60) }
        mix(count)
        var x = a, y = b
        x ^= y >> 31; x &*= 0xFF51_AFD7_ED55_8CCD; x ^= x >> 33
        y ^= x >> 27; y &*= 0xC4CE_B9FE_1A85_EC53; y ^= y >> 33
        func hex(_ v: UInt64) -> String { let s = String(v, radix: 16); return String(repeating: "0", count: 16 - s.count) + s }
        return hex(x) + hex(y)
    }
}
