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
            var samplePeak = peaks[c]
            for f in 0..<frames {
                let v = interleaved[f * channels + c]
                x.append(v)
                samplePeak = max(samplePeak, abs(v))
            }
            var best = samplePeak
            if !phases.isEmpty {
                x.withUnsafeBufferPointer { x in
                    // Interpolate between samples n and n + 1 for n = half − 1 … count − half − 1 (taps need
                    // half − 1 samples before n and half after), in blocks of 32.
                    let first = half - 1, last = x.count - half - 1
                    var start = first
                    while start <= last {
                        let end = min(last, start + 31)
                        var m: Float = 0
                        for i in (start - half + 1)...(end + half) { m = max(m, abs(x[i])) }
                        if !skips || m * gain > best {
                            for n in start...end {
                                for taps in phases {
                                    var y: Float = 0
                                    for k in 0..<taps.count { y += taps[k] * x[n - half + 1 + k] }
                                    best = max(best, abs(y))
                                }
                            }
                        }
                        start = end + 1
                    }
                }
            }
            peaks[c] = best
            history[c] = Array(x.suffix(keep))
        }
    }

    /// The true peak of each channel so far (linear, 1 = full scale).
    public var channelPeaks: [Float] { peaks }
}
