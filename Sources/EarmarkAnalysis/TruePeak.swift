import Foundation

/// True peak (BS.1770 Annex 2: the peak of the signal oversampled 4× below 96 kHz, 2× below 192 kHz),
/// measured per channel with a Kaiser-windowed sinc interpolator of 16 taps per phase.
///
/// Interpolating every sample is most of the cost of a loudness measurement, and almost all of it is
/// wasted: an interpolated value is at most the sum of its phase's absolute taps times the largest
/// sample under them, so a stretch whose samples cannot beat the peak found so far is skipped. The
/// result is the same as interpolating everything.
public final class TruePeakMeter {
    public let channels: Int
    /// Oversampling factor.
    public let factor: Int
    static let taps = 16
    /// Phase p's taps (p = 1 … factor − 1) for the value p / factor after sample n, applied to samples
    /// n − taps/2 + 1 … n + taps/2; phase 0 is the sample itself.
    private let phases: [[Float]]
    /// The largest sum of absolute taps over the phases: the bound on what a phase can make of its samples.
    private let gain: Float
    /// Per channel, the last taps − 1 samples of the previous buffer.
    private var history: [[Float]]
    private var peaks: [Float]
    private var samplePeaks: [Float]
    /// Tests turn the skipping off to check that it changes nothing.
    var skips = true

    public init(channels: Int, sampleRate: Double) {
        self.channels = channels
        factor = sampleRate < 96_000 ? 4 : sampleRate < 192_000 ? 2 : 1
        let half = TruePeakMeter.taps / 2
        func bessel0(_ x: Double) -> Double {
            var sum = 1.0, term = 1.0, k = 1.0
            while term > 1e-12 * sum {
                term *= (x / (2 * k)) * (x / (2 * k))
                sum += term
                k += 1
            }
            return sum
        }
        let beta = 7.0
        var phases: [[Float]] = []
        for p in 1..<factor {
            let d = Double(p) / Double(factor)
            var c = (0..<TruePeakMeter.taps).map { i -> Double in
                let t = Double(i - half + 1) - d  // sample position relative to the interpolated point
                let sinc = abs(t) < 1e-12 ? 1 : sin(Double.pi * t) / (Double.pi * t)
                let r = t / (Double(half) + 0.5)
                return sinc * bessel0(beta * (1 - r * r).squareRoot()) / bessel0(beta)
            }
            let sum = c.reduce(0, +)
            c = c.map { $0 / sum }
            phases.append(c.map(Float.init))
        }
        self.phases = phases
        gain = phases.map { $0.reduce(0) { $0 + abs($1) } }.max() ?? 1
        history = Array(repeating: [Float](repeating: 0, count: TruePeakMeter.taps - 1), count: channels)
        peaks = Array(repeating: 0, count: channels)
        samplePeaks = peaks
    }

    /// Appends interleaved samples (`channels` per frame).
    public func append(_ interleaved: UnsafeBufferPointer<Float>) {
        let frames = interleaved.count / channels
        guard frames > 0 else { return }
        let keep = TruePeakMeter.taps - 1, half = TruePeakMeter.taps / 2
        for c in 0..<channels {
            // The channel's samples after the kept ones: x[i] for i < keep is history.
            var x = history[c]
            x.reserveCapacity(keep + frames)
            if channels == 1 {
                x.append(contentsOf: interleaved)
            } else {
                for f in 0..<frames { x.append(interleaved[f * channels + c]) }
            }
            // The samples' own peak (the sample peak), which the true peak cannot be below.
            x.withUnsafeBufferPointer { x in
                samplePeaks[c] = TruePeakMeter.absoluteMaximum(x, keep...(x.count - 1), atLeast: samplePeaks[c])
            }
            var best = max(peaks[c], samplePeaks[c])
            if !phases.isEmpty {
                x.withUnsafeBufferPointer { x in
                    // Interpolate between samples n and n + 1 for n = half − 1 … count − half − 1 (taps need
                    // half − 1 samples before n and half after), in blocks of 32.
                    let first = half - 1, last = x.count - half - 1
                    var start = first
                    while start <= last {
                        let end = min(last, start + 31)
                        let m = TruePeakMeter.absoluteMaximum(x, (start - half + 1)...(end + half), atLeast: 0)
                        if !skips || m * gain > best {
                            best = interpolatedPeak(x, from: start, through: end, atLeast: best)
                        }
                        start = end + 1
                    }
                }
            }
            peaks[c] = best
            history[c] = Array(x.suffix(keep))
        }
    }

    /// The largest of `best` and the absolute values interpolated between samples n and n + 1 of `x`, for n in
    /// `start...end`. Eight consecutive n are interpolated at once, one per SIMD lane: each lane adds its
    /// products in the same order as one value at a time would, so the values are the same to the bit.
    private func interpolatedPeak(_ x: UnsafeBufferPointer<Float>, from start: Int, through end: Int, atLeast best: Float) -> Float {
        let half = TruePeakMeter.taps / 2, taps = TruePeakMeter.taps
        precondition(start - half + 1 >= 0 && end + half < x.count)
        var best = best
        let base = UnsafeRawPointer(x.baseAddress!)
        let stride = MemoryLayout<Float>.stride
        // Lane-wise maxima, folded into `best` at the end (the maximum does not depend on the order).
        var lanes = SIMD8<Float>(repeating: best)
        for phase in phases {
            phase.withUnsafeBufferPointer { t in
                var n = start
                while n + 7 <= end {
                    var y = SIMD8<Float>(repeating: 0)
                    let first = n - half + 1
                    for k in 0..<taps {
                        y += SIMD8<Float>(repeating: t[k]) * base.loadUnaligned(fromByteOffset: (first + k) * stride, as: SIMD8<Float>.self)
                    }
                    lanes = TruePeakMeter.maximum(lanes, y)
                    n += 8
                }
                while n <= end {
                    var y: Float = 0
                    for k in 0..<taps { y += t[k] * x[n - half + 1 + k] }
                    best = max(best, abs(y))
                    n += 1
                }
            }
        }
        for lane in 0..<8 { best = max(best, lanes[lane]) }
        return best
    }

    /// Lane by lane, the larger of `lanes` and `|y|`, as `max(lanes, abs(y))` is (a NaN in `y` is passed over).
    @inline(__always)
    private static func maximum(_ lanes: SIMD8<Float>, _ y: SIMD8<Float>) -> SIMD8<Float> {
        let a = unsafeBitCast(unsafeBitCast(y, to: SIMD8<UInt32>.self) & SIMD8(repeating: 0x7FFF_FFFF), to: SIMD8<Float>.self)
        return lanes.replacing(with: a, where: a .>= lanes)
    }

    /// The largest of `initial` and `|x[i]|` for i in `range`, NaNs passed over as `max` passes them.
    static func absoluteMaximum(_ x: UnsafeBufferPointer<Float>, _ range: ClosedRange<Int>, atLeast initial: Float) -> Float {
        precondition(range.lowerBound >= 0 && range.upperBound < x.count)
        var best = initial
        var i = range.lowerBound
        if range.count >= 8 {
            let base = UnsafeRawPointer(x.baseAddress!)
            var lanes = SIMD8<Float>(repeating: initial)
            while i + 7 <= range.upperBound {
                lanes = maximum(lanes, base.loadUnaligned(fromByteOffset: i * MemoryLayout<Float>.stride, as: SIMD8<Float>.self))
                i += 8
            }
            for lane in 0..<8 { best = max(best, lanes[lane]) }
        }
        while i <= range.upperBound {
            best = max(best, abs(x[i]))
            i += 1
        }
        return best
    }

    /// The true peak of each channel so far (linear, 1 = full scale).
    public var channelPeaks: [Float] { peaks }
    /// The largest absolute sample value of each channel so far (linear).
    public var channelSamplePeaks: [Float] { samplePeaks }
}
