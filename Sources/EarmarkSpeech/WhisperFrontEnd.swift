import EarmarkDSP
import Foundation

/// Whisper's log-mel spectrogram of a whole recording, frame after frame.
public struct LogMelSpectrogram: Sendable {
    /// Frames that hold the recording (samples / hop); each has `bands` values.
    public let frames: Int
    public let bands: Int
    /// Frame-major values, `frames × bands`, already normalised ((log10 − 4)/4 scale, floored at max − 8).
    public let values: [Float]

    /// `length` frames from `start`, frame-major (`length × bands`), zero beyond the recording's end, as
    /// Whisper pads a window that runs past the audio.
    public func window(start: Int, length: Int) -> [Float] {
        var out = [Float](repeating: 0, count: length * bands)
        let available = max(0, min(length, frames - start))
        if available > 0 {
            out.withUnsafeMutableBufferPointer { o in
                values.withUnsafeBufferPointer { v in
                    (o.baseAddress!).update(from: v.baseAddress! + start * bands, count: available * bands)
                }
            }
        }
        return out
    }
}

/// Whisper's front end: periodic Hann window of 400 samples (25 ms at 16 kHz), hop 160 (10 ms), frames
/// centred on their hop (the signal reflected at its start), power spectrum, 80 Slaney-scale mel filters
/// with Slaney area normalisation up to 8 kHz, log10 floored at 10⁻¹⁰, everything below the loudest
/// value − 8 raised to it, then (x + 4) / 4.
///
/// As in Whisper's `transcribe`, the recording is followed by 30 s of zeros before framing, so the last
/// frames see the real end of the signal; the floor is taken over the whole recording.
public final class WhisperFrontEnd {
    public let spec: WhisperFrontEndSpec
    private let fft: FFTPlan
    private let window: [Float]
    /// Per band: its first FFT bin and the weights of its bins.
    private let filters: [(first: Int, weights: [Float])]

    public init(spec: WhisperFrontEndSpec) {
        self.spec = spec
        fft = FFTPlan(size: spec.fftLength)
        window = Window.hann(spec.fftLength)
        let fb = WhisperFrontEnd.melFilterbank(sampleRate: Double(spec.sampleRate), fftLength: spec.fftLength, bands: spec.melBands)
        let bins = spec.fftLength / 2 + 1
        filters = (0..<spec.melBands).map { m in
            let row = fb[(m * bins)..<((m + 1) * bins)]
            guard let first = row.firstIndex(where: { $0 > 0 }), let last = row.lastIndex(where: { $0 > 0 }) else { return (0, []) }
            return (first - m * bins, Array(row[first...last]))
        }
    }

    /// Slaney-scale triangular filters from 0 Hz to half the sample rate, each scaled to unit area
    /// (2 / bandwidth in Hz): `bands × (fftLength/2 + 1)`, band-major. This is librosa's `mel` with its
    /// defaults, the filterbank Whisper ships.
    static func melFilterbank(sampleRate: Double, fftLength: Int, bands: Int) -> [Float] {
        let linearStep = 200.0 / 3, logStep = log(6.4) / 27, breakHz = 1000.0, breakMel = breakHz / linearStep
        func mel(_ hz: Double) -> Double { hz >= breakHz ? breakMel + log(hz / breakHz) / logStep : hz / linearStep }
        func hz(_ m: Double) -> Double { m >= breakMel ? breakHz * exp(logStep * (m - breakMel)) : m * linearStep }
        let bins = fftLength / 2 + 1
        let top = mel(sampleRate / 2)
        let edges = (0...(bands + 1)).map { hz(top * Double($0) / Double(bands + 1)) }
        var fb = [Float](repeating: 0, count: bands * bins)
        for m in 0..<bands {
            let norm = 2 / (edges[m + 2] - edges[m])
            for k in 0..<bins {
                let f = sampleRate / 2 * Double(k) / Double(bins - 1)
                let rising = (f - edges[m]) / (edges[m + 1] - edges[m])
                let falling = (edges[m + 2] - f) / (edges[m + 2] - edges[m + 1])
                fb[m * bins + k] = Float(max(0, min(rising, falling)) * norm)
            }
        }
        return fb
    }

    /// The spectrogram of mono samples at `spec.sampleRate`.
    public func spectrogram(_ samples: [Float]) -> LogMelSpectrogram {
        let n = samples.count, size = spec.fftLength, hop = spec.hopLength, bands = spec.melBands
        let half = size / 2
        let padding = spec.chunkSeconds * spec.sampleRate
        let content = n / hop
        let total = (n + padding) / hop
        // Frames starting past the last one that can reach a sample see only zeros: their value is the floor.
        let computed = min(total, (n + half) / hop + 1)
        let silent = Float(log10(1e-10))
        var values = [Float](repeating: silent, count: computed * bands)
        var frame = [Float](repeating: 0, count: size)
        var power = [Float](repeating: 0, count: half + 1)
        var loudest = silent
        samples.withUnsafeBufferPointer { x in
            frame.withUnsafeMutableBufferPointer { fr in
                power.withUnsafeMutableBufferPointer { pw in
                    values.withUnsafeMutableBufferPointer { out in
                        for t in 0..<computed {
                            // Sample j of the zero-extended signal, reflected at its start.
                            let start = t * hop - half
                            for i in 0..<size {
                                var j = start + i
                                if j < 0 { j = -j }
                                fr[i] = j < n ? x[j] : 0
                            }
                            fft.powerSpectrum(frame: UnsafePointer(fr.baseAddress!), window: window, bins: 0..<(half + 1), into: pw.baseAddress!)
                            let row = out.baseAddress! + t * bands
                            for m in 0..<bands {
                                let filter = filters[m]
                                var sum: Float = 0
                                filter.weights.withUnsafeBufferPointer { w in
                                    for k in 0..<w.count { sum += w[k] * pw[filter.first + k] }
                                }
                                let v = log10f(max(sum, 1e-10))
                                row[m] = v
                                loudest = max(loudest, v)
                            }
                        }
                        let floor = loudest - 8
                        for i in 0..<out.count { out[i] = (max(out[i], floor) + 4) / 4 }
                    }
                }
            }
        }
        values.removeSubrange((content * bands)...)
        return LogMelSpectrogram(frames: content, bands: bands, values: values)
    }
}
