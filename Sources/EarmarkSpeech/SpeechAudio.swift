import EarmarkAudio
import Foundation

/// Reading recordings for the speech recogniser.
public enum SpeechAudio {
    /// The whole file as mono samples at `sampleRate` (16 kHz for Whisper): decoded by Earmark's
    /// readers (sndfile, libopus, libmpg123, or ffmpeg), channels averaged, resampled with soxr.
    public static func load(path: String, sampleRate: Int = 16_000) throws -> [Float] {
        let reader = try MultichannelFileReader(path: path)
        let resampler = try Resampler(inputRate: reader.sampleRate, outputRate: Double(sampleRate))
        var out: [Float] = []
        while let buffer = try reader.next() {
            out += resampler.process(buffer.mono)
        }
        out += resampler.flush()
        return out
    }
}
