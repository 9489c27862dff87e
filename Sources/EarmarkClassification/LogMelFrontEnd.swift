import EarmarkDSP
import Foundation

/// Turns audio at the model's sample rate into log-mel frames, incrementally.
///
/// Frame i covers samples [i·hop, i·hop + fftLength) with a periodic Hann window of `windowLength`
/// centred in it; its magnitude spectrum goes through a triangular mel filterbank (HTK mel scale,
/// no area normalisation), then `log(mel + logOffset)`. This is the front end YAMNet's int8 port
/// was calibrated with (torchaudio's MelSpectrogram, center = false, power 1).
public final class LogMelFrontEnd {
    public let spec: FrontEndSpec
    private let fft: FFTPlan
    private let window: [Float]
    /// Per band: its first FFT bin and the weights of its bins (a triangle covers a few bins only).
    private let bands: [(first: Int, weights: [Float])]
    private var pending: [Float] = []
    private var power: [Float]
    /// Frames produced so far.
    public private(set) var frameCount = 0

    public init(spec: FrontEndSpec) {
        self.spec = spec
        fft = FFTPlan(size: spec.fftLength)
        let hann = Window.hann(spec.windowLength)
        let offset = (spec.fftLength - spec.windowLength) / 2
        var w = [Float](repeating: 0, count: spec.fftLength)
        for i in 0..<spec.windowLength { w[offset + i] = hann[i] }
        window = w
        let fb = LogMelFrontEnd.melFilterbank(spec)
        let binCount = spec.fftLength / 2 + 1
        bands = (0..<spec.melBands).map { m in
            let used = (0..<binCount).filter { fb[$0 * spec.melBands + m] > 0 }
            guard let first = used.first, let last = used.last else { return (0, []) }
            return (first, (first...last).map { fb[$0 * spec.melBands + m] })
        }
        power = [Float](repeating: 0, count: spec.fftLength / 2 + 1)
    }

    static func melFilterbank(_ spec: FrontEndSpec) -> [Float] {
        let bins = spec.fftLength / 2 + 1, bands = spec.melBands
        func mel(_ f: Double) -> Double { 2595 * log10(1 + f / 700) }
        func hz(_ m: Double) -> Double { 700 * (pow(10, m / 2595) - 1) }
        let lo = mel(spec.minFrequency), hi = mel(spec.maxFrequency)
        let edges = (0...(bands + 1)).map { hz(lo + (hi - lo) * Double($0) / Double(bands + 1)) }
        var fb = [Float](repeating: 0, count: bins * bands)
        for k in 0..<bins {
            let f = spec.sampleRate / 2 * Double(k) / Double(bins - 1)
            for m in 0..<bands {
                let rising = (f - edges[m]) / (edges[m + 1] - edges[m])
                let falling = (edges[m + 2] - f) / (edges[m + 2] - edges[m + 1])
                fb[k * bands + m] = Float(max(0, min(rising, falling)))
            }
        }
        return fb
    }

    /// Appends mono samples at `spec.sampleRate` and returns the log-mel frames now complete,
    /// flat (frame after frame, `melBands` values each).
    public func append(_ samples: [Float]) -> [Float] {
        pending += samples
        let n = spec.fftLength, hop = spec.hopLength, bandCount = spec.melBands, bins = n / 2 + 1
        var out: [Float] = []
        var start = 0
        let offset = Float(spec.logOffset)
        while start + n <= pending.count {
            pending.withUnsafeBufferPointer { p in
                power.withUnsafeMutableBufferPointer { pw in
                    fft.powerSpectrum(frame: p.baseAddress! + start, window: window, bins: 0..<bins, into: pw.baseAddress!)
                }
            }
            for k in 0..<bins { power[k] = power[k].squareRoot() }
            for m in 0..<bandCount {
                let band = self.bands[m]
                var sum: Float = 0
                for (j, w) in band.weights.enumerated() { sum += w * power[band.first + j] }
                out.append(logf(sum + offset))
            }
            start += hop
            frameCount += 1
        }
        if start > 0 { pending.removeFirst(min(start, pending.count)) }
        return out
    }
}
