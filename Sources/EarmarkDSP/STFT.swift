/// A streaming short-time Fourier transform that emits band-limited power spectra.
///
/// Append samples in chunks of any size; for every complete frame (`fftSize` samples, advanced by
/// `hop`) the handler receives the frame index and |X[k]|² for the bins in `bins`. Only
/// `fftSize` samples of history are kept, so memory does not grow with the input.
public final class STFT {
    public let fftSize: Int
    public let hop: Int
    public let bins: Range<Int>
    private let plan: FFTPlan
    private let window: [Float]
    private var buffer: [Float]
    private var filled = 0
    private var power: [Float]
    /// Index of the next frame to be emitted.
    public private(set) var frameIndex = 0

    public init(fftSize: Int, hop: Int, bins: Range<Int>) {
        precondition(hop > 0 && hop <= fftSize && bins.lowerBound >= 0 && bins.upperBound <= fftSize / 2 + 1)
        self.fftSize = fftSize
        self.hop = hop
        self.bins = bins
        plan = FFTPlan(size: fftSize)
        window = Window.hann(fftSize)
        buffer = [Float](repeating: 0, count: fftSize)
        power = [Float](repeating: 0, count: bins.count)
    }

    /// Forgets buffered samples; the next frame starts with the next appended sample.
    public func reset(frameIndex: Int) {
        filled = 0
        self.frameIndex = frameIndex
    }

    /// Appends samples and calls `handler(frameIndex, power)` for each completed frame.
    public func append(_ samples: UnsafeBufferPointer<Float>, handler: (Int, UnsafeBufferPointer<Float>) -> Void) {
        var pos = 0
        while pos < samples.count {
            let take = min(fftSize - filled, samples.count - pos)
            buffer.withUnsafeMutableBufferPointer { b in
                (b.baseAddress! + filled).update(from: samples.baseAddress! + pos, count: take)
            }
            filled += take
            pos += take
            if filled == fftSize {
                buffer.withUnsafeBufferPointer { b in
                    power.withUnsafeMutableBufferPointer { p in
                        plan.powerSpectrum(frame: b.baseAddress!, window: window, bins: bins, into: p.baseAddress!)
                    }
                }
                power.withUnsafeBufferPointer { handler(frameIndex, $0) }
                frameIndex += 1
                buffer.withUnsafeMutableBufferPointer { b in
                    let base = b.baseAddress!
                    base.update(from: base + hop, count: fftSize - hop)
                }
                filled = fftSize - hop
            }
        }
    }
}
