import Foundation

/// BS.1770's K-weighting (a high shelf of about +4 dB above 1.5 kHz, then a high pass at about 38 Hz) as one
/// 4th-order IIR filter in double precision, per channel, with the mean K-weighted energy of 100-ms steps.
///
/// The two stages are the usual bilinear-transform designs from BS.1770's analogue prototypes, multiplied
/// into one direct-form-II filter (the form libebur128 uses, so that the two measure the same to the last
/// digits; LoudnessTests check them against each other).
struct KWeighting {
    /// Numerator b0…b4 and denominator a1…a4 (a0 = 1).
    let b0, b1, b2, b3, b4: Double
    let a1, a2, a3, a4: Double

    init(sampleRate: Double) {
        // High shelf: centre frequency, gain (dB) and quality of the analogue prototype.
        let shelfF0 = 1681.974450955533, gain = 3.999843853973347, shelfQ = 0.7071752369554196
        var k = tan(Double.pi * shelfF0 / sampleRate)
        let vh = pow(10.0, gain / 20.0)
        let vb = pow(vh, 0.4996667741545416)
        let d = 1.0 + k / shelfQ + k * k
        let s0 = (vh + vb * k / shelfQ + k * k) / d
        let s1 = 2.0 * (k * k - vh) / d
        let s2 = (vh - vb * k / shelfQ + k * k) / d
        let sa1 = 2.0 * (k * k - 1.0) / d
        let sa2 = (1.0 - k / shelfQ + k * k) / d
        // High pass (numerator 1, −2, 1).
        let passF0 = 38.13547087602444, passQ = 0.5003270373238773
        k = tan(Double.pi * passF0 / sampleRate)
        let pa1 = 2.0 * (k * k - 1.0) / (1.0 + k / passQ + k * k)
        let pa2 = (1.0 - k / passQ + k * k) / (1.0 + k / passQ + k * k)
        // The product of the two stages' polynomials.
        b0 = s0 * 1.0
        b1 = s0 * -2.0 + s1 * 1.0
        b2 = s0 * 1.0 + s1 * -2.0 + s2 * 1.0
        b3 = s1 * 1.0 + s2 * -2.0
        b4 = s2 * 1.0
        a1 = 1.0 * pa1 + sa1 * 1.0
        a2 = 1.0 * pa2 + sa1 * pa1 + sa2 * 1.0
        a3 = sa1 * pa2 + sa2 * pa1
        a4 = sa2 * pa2
    }

    /// One channel's filter memory (the last four values of the recursive part).
    struct State {
        var v1 = 0.0, v2 = 0.0, v3 = 0.0, v4 = 0.0

        /// Values that small (only met in a long fade to silence) are set to 0: denormal arithmetic is slow.
        mutating func flushDenormals() {
            let tiny = Double.leastNormalMagnitude
            if abs(v1) < tiny { v1 = 0 }
            if abs(v2) < tiny { v2 = 0 }
            if abs(v3) < tiny { v3 = 0 }
            if abs(v4) < tiny { v4 = 0 }
        }
    }

    /// Filters `count` samples `x[0]`, `x[stride]`, … of one channel and returns the sum of the squares of the
    /// filtered values.
    ///
    /// Four samples per turn, so that the filter's memory moves by naming instead of copying (register moves
    /// were a third of the loop); the values and the order of their sum are those of one sample at a time.
    @inline(__always)
    func sumOfSquares(_ x: UnsafePointer<Float>, stride: Int, count: Int, state: inout State) -> Double {
        var (v1, v2, v3, v4) = (state.v1, state.v2, state.v3, state.v4)
        var sum = 0.0
        var p = x
        var left = count
        while left >= 4 {
            let w0 = Double(p[0]) - a1 * v1 - a2 * v2 - a3 * v3 - a4 * v4
            let y0 = b0 * w0 + b1 * v1 + b2 * v2 + b3 * v3 + b4 * v4
            let w1 = Double(p[stride]) - a1 * w0 - a2 * v1 - a3 * v2 - a4 * v3
            let y1 = b0 * w1 + b1 * w0 + b2 * v1 + b3 * v2 + b4 * v3
            let w2 = Double(p[2 * stride]) - a1 * w1 - a2 * w0 - a3 * v1 - a4 * v2
            let y2 = b0 * w2 + b1 * w1 + b2 * w0 + b3 * v1 + b4 * v2
            let w3 = Double(p[3 * stride]) - a1 * w2 - a2 * w1 - a3 * w0 - a4 * v1
            let y3 = b0 * w3 + b1 * w2 + b2 * w1 + b3 * w0 + b4 * v1
            sum += y0 * y0
            sum += y1 * y1
            sum += y2 * y2
            sum += y3 * y3
            (v1, v2, v3, v4) = (w3, w2, w1, w0)
            p += 4 * stride
            left -= 4
        }
        while left > 0 {
            let w0 = Double(p[0]) - a1 * v1 - a2 * v2 - a3 * v3 - a4 * v4
            let y0 = b0 * w0 + b1 * v1 + b2 * v2 + b3 * v3 + b4 * v4
            sum += y0 * y0
            (v1, v2, v3, v4) = (w0, v1, v2, v3)
            p += stride
            left -= 1
        }
        state = State(v1: v1, v2: v2, v3: v3, v4: v4)
        return sum
    }
}
