import EarmarkAudio
import EarmarkDSP
import Foundation

/// Converts audio to `sampleRate` (soxr) and hands out the power spectrum of every Hann-windowed
/// frame of `fftSize` samples, `hop` apart, as audio arrives: the front end the key, rhythm and
/// structure analysers share.
final class FramedSpectrum {
    let sampleRate: Double
    let fftSize: Int
    let hop: Int
    private let resampler: Resampler
    private let fft: FFTPlan
    private let window: [Float]
    private var pending: [Float] = []
    private var power: [Float]
    private var flushed = false
    /// Samples (at `sampleRate`) received so far.
    private(set) var samplesIn = 0

    init(inputRate: Double, sampleRate: Double, fftSize: Int, hop: Int) throws {
        self.sampleRate = sampleRate
        self.fftSize = fftSize
        self.hop = hop
        resampler = try Resampler(inputRate: inputRate, outputRate: sampleRate)
        fft = FFTPlan(size: fftSize)
        window = Window.hann(fftSize)
        power = [Float](repeating: 0, count: fftSize / 2 + 1)
    }

    /// Seconds of audio received.
    var duration: Double { Double(samplesIn) / sampleRate }

    /// Appends samples at the input rate; `frame` gets the power spectrum (bins 0…fftSize/2) of each frame completed.
    /// The pitch class (0 = C … 11 = B, A4 = 440 Hz) nearest to `frequency` Hz; the chroma of the beat
    /// tracker and the structure analyser fold their bins this way.
    static func pitchClass(of frequency: Double) -> Int {
        ((Int((69 + 12 * log2(frequency / 440)).rounded()) % 12) + 12) % 12
    }

    func append(_ samples: [Float], frame: ([Float]) -> Void) {
        feed(resampler.process(samples), frame: frame)
    }

    /// Ends the input (once; later calls do nothing): the converter's tail may complete more frames.
    func finish(frame: ([Float]) -> Void) {
        guard !flushed else { return }
        flushed = true
        feed(resampler.flush(), frame: frame)
    }

    private func feed(_ samples: [Float], frame: ([Float]) -> Void) {
        samplesIn += samples.count
        pending += samples
        var start = 0
        while start + fftSize <= pending.count {
            pending.withUnsafeBufferPointer { p in
                power.withUnsafeMutableBufferPointer { pw in
                    fft.powerSpectrum(frame: p.baseAddress! + start, window: window, bins: 0..<(fftSize / 2 + 1), into: pw.baseAddress!)
                }
            }
            frame(power)
            start += hop
        }
        if start > 0 { pending.removeFirst(start) }
    }
}
