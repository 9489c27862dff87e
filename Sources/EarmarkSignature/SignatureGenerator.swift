import EarmarkDSP

/// Turns 44.1 kHz mono audio into a ``Signature``, incrementally.
///
/// Append buffers as they arrive (in the spirit of ShazamKit's `SHSignatureGenerator`), then
/// take the signature. A buffer may carry the time (seconds from the start of the stream) of its
/// first sample; when that time jumps past the end of the previous buffer, the gap is kept as a
/// gap, so peak times stay true to the stream's clock.
///
/// ```swift
/// let generator = SignatureGenerator()
/// try generator.append(samples)
/// let signature = generator.signature()
/// ```
public final class SignatureGenerator {
    public let configuration: SignatureConfiguration
    private let stft: STFT
    private let picker: PeakPicker
    /// Stream position, in samples, just after the last appended sample.
    private var position = 0
    private var segmentStartFrame = 0

    public init(configuration: SignatureConfiguration = .current) {
        self.configuration = configuration
        stft = STFT(fftSize: configuration.fftSize, hop: configuration.hop, bins: configuration.minBin..<configuration.maxBin)
        picker = PeakPicker(config: configuration)
    }

    /// Seconds of stream covered so far (including gaps).
    public var duration: Double { Double(position) / configuration.sampleRate }

    /// Appends samples at `configuration.sampleRate`, mono, nominally in −1…1.
    /// - Parameter time: stream time of the first sample in seconds, or nil to continue where the last buffer ended.
    public func append(_ samples: [Float], at time: Double? = nil) throws {
        try samples.withUnsafeBufferPointer { try append($0, at: time) }
    }

    /// Appends samples from a buffer pointer; see ``append(_:at:)-(([Float]),_)``.
    public func append(_ samples: UnsafeBufferPointer<Float>, at time: Double? = nil) throws {
        if let time {
            guard time.isFinite, time >= 0 else { throw SignatureError(.invalidFile, "invalid buffer time \(time)") }
            let start = Int((time * configuration.sampleRate).rounded())
            if start < position - 1 {
                throw SignatureError(.invalidFile, "buffer time \(time) s goes back before \(duration) s")
            }
            if start > position + 1 {
                // A gap: restart the frame grid at the next frame boundary after `start`.
                picker.discontinuity()
                let hop = configuration.hop
                let firstFrame = (start + hop - 1) / hop
                let skip = firstFrame * hop - start
                stft.reset(frameIndex: firstFrame)
                position = start
                if skip >= samples.count { position += samples.count; return }
                position += skip
                let rest = UnsafeBufferPointer(rebasing: samples[skip...])
                feed(rest)
                return
            }
        }
        feed(samples)
    }

    private func feed(_ samples: UnsafeBufferPointer<Float>) {
        position += samples.count
        stft.append(samples) { frame, power in picker.push(frame: frame, power: power) }
    }

    /// Stream time (seconds) up to which every peak is final: peaks are settled about half a second
    /// (the peak and rank neighbourhoods) behind the audio appended.
    public var settledDuration: Double {
        Double(picker.settledFrame + 1) * configuration.frameDuration
    }

    /// Removes and returns the peaks settled since the last call, ordered by frame, with frames counted
    /// from the start of the stream. For streaming use: ``signature()`` then holds only the rest.
    public func takeSettledPeaks() -> [Peak] {
        picker.takePeaks()
    }

    /// Settles every pending peak, as at the end of the stream; appending after this is not supported.
    public func finish() {
        picker.finish()
    }

    /// The signature of everything appended so far. Call once, at the end of the stream.
    public func signature() -> Signature {
        picker.finish()
        return Signature(configurationVersion: configuration.version, duration: duration, peaks: picker.peaks)
    }

    /// Convenience: the signature of a whole buffer.
    public static func signature(of samples: [Float], configuration: SignatureConfiguration = .current) -> Signature {
        let g = SignatureGenerator(configuration: configuration)
        try? g.append(samples)
        return g.signature()
    }
}
