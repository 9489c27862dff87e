import Foundation

/// Streams a file with its channels kept apart, at its own sample rate: what loudness measurement
/// needs (a downmix changes loudness). libsndfile formats keep their rate and channels; containers
/// that only ffmpeg reads arrive as 44.1 kHz stereo.
public final class MultichannelFileReader: AudioSource {
    public let path: String
    public let sampleRate: Double
    public let channels: Int
    /// Which decoder serves the file.
    public var decoder: AudioFileReader.Decoder { sndfile?.kind ?? .ffmpeg }
    private let sndfile: (any FileSource)?
    private let ffmpeg: FFmpegSource?

    public init(path: String, chunkFrames: Int = 32_768) throws {
        self.path = path
        let size = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? -1
        guard size != -1 else { throw AudioError(.unreadable, "no such file", path: path) }
        guard size > 0 else { throw AudioError(.empty, "file is empty (0 bytes)", path: path) }
        do {
            let s = try openFileSource(path: path, chunkFrames: chunkFrames)
            (sndfile, ffmpeg, sampleRate, channels) = (s, nil, s.sampleRate, s.channels)
        } catch let e as AudioError where e.code == .unsupportedFormat {
            guard let exe = FFmpegSource.executable() else {
                throw AudioError(.unsupportedFormat, "unsupported audio format (\(e.message)); install ffmpeg to read this container", path: path)
            }
            let f = try FFmpegSource(path: path, executable: exe, chunkFrames: chunkFrames, channels: 2)
            (sndfile, ffmpeg, sampleRate, channels) = (nil, f, AudioConstants.sampleRate, 2)
        }
    }

    /// The next buffer of interleaved frames, or nil at the end of the file.
    public func next() throws -> PCMBuffer? {
        let samples = try sndfile?.readInterleaved() ?? ffmpeg?.readMono()
        return samples.map { PCMBuffer(samples: $0, sampleRate: sampleRate, channels: channels) }
    }
}
