/// A buffer of PCM audio as it arrives from a live source: any sample rate and channel count.
public struct PCMBuffer: Sendable {
    /// Interleaved samples, nominally in −1…1.
    public var samples: [Float]
    public var sampleRate: Double
    public var channels: Int
    /// Seconds of the stream at the first sample, or nil to follow the previous buffer.
    public var time: Double?

    public init(samples: [Float], sampleRate: Double, channels: Int = 1, time: Double? = nil) {
        self.samples = samples
        self.sampleRate = sampleRate
        self.channels = channels
        self.time = time
    }

    /// Frames (samples per channel).
    public var frameCount: Int { channels > 0 ? samples.count / channels : 0 }
    public var duration: Double { sampleRate > 0 ? Double(frameCount) / sampleRate : 0 }
}

/// Anything that delivers live audio buffer by buffer: a microphone, a pipe, a file replayed in real time.
public protocol AudioSource {
    /// The next buffer; nil at the end of the input. May block until audio is there.
    func next() throws -> PCMBuffer?
}

extension PCMStreamReader: AudioSource {}

/// The average of each frame's channels: how every decoder in Earmark folds audio to mono, so that
/// signatures and digests do not depend on which reader made them.
public func downmixToMono(_ interleaved: UnsafeBufferPointer<Float>, channels: Int) -> [Float] {
    if channels == 1 { return Array(interleaved) }
    let frames = interleaved.count / channels
    let scale = 1 / Float(channels)
    return [Float](unsafeUninitializedCapacity: frames) { out, count in
        if channels == 2 {
            // The common case, in a loop the compiler vectorises.
            for f in 0..<frames { out[f] = (interleaved[2 * f] + interleaved[2 * f + 1]) * scale }
            count = frames
            return
        }
        for f in 0..<frames {
            var sum: Float = 0
            for c in 0..<channels { sum += interleaved[f * channels + c] }
            out[f] = sum * scale
        }
        count = frames
    }
}

extension PCMBuffer {
    /// The buffer's frames folded to mono (see ``downmixToMono(_:channels:)``); a mono buffer's own samples.
    public var mono: [Float] {
        if channels == 1 { return samples }
        return samples.withUnsafeBufferPointer { downmixToMono(UnsafeBufferPointer(rebasing: $0[0..<(frameCount * channels)]), channels: channels) }
    }
}
