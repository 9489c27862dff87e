/// SplitMix64 (Steele, Lea and Flood, 2014): a tiny, fast generator that gives the same numbers on every
/// machine, for whatever must be random yet reproducible (synthetic catalogs, seeded sampling, benchmarks, tests).
public struct SplitMix64: RandomNumberGenerator, Sendable {
    private var state: UInt64

    /// The generator from `state` (the reference implementation's seeding).
    public init(state: UInt64) { self.state = state }

    /// Stream `stream` of `seed`: the state is a hash of both, so neighbouring streams share no numbers.
    public init(seed: UInt64, stream: UInt64) {
        state = SplitMix64.mix(seed ^ SplitMix64.mix(stream &+ 0xD1B5_4A32_D192_ED03))
    }

    /// The generator's output function: a bijection of 64-bit words that spreads every input bit.
    public static func mix(_ x: UInt64) -> UInt64 {
        var z = x
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        return SplitMix64.mix(state)
    }

    /// Uniform in 0..<1, 53 bits.
    public mutating func unit() -> Double { Double(next() >> 11) * 0x1p-53 }

    /// Uniform in `range`.
    public mutating func uniform(in range: ClosedRange<Double>) -> Double {
        range.lowerBound + (range.upperBound - range.lowerBound) * unit()
    }

    /// Uniform in 0..<n (n > 0), by the high half of a 128-bit product (bias below n / 2⁶⁴).
    public mutating func below(_ n: Int) -> Int {
        Int(truncatingIfNeeded: next().multipliedFullWidth(by: UInt64(n)).high)
    }
}
