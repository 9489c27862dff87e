import EarmarkAudio
import EarmarkTestSupport
import Foundation
import Testing

/// Reads a file completely, also returning the reader (for its decoder and source facts).
func decode(_ url: URL, chunkFrames: Int = 32_768) throws -> (samples: [Float], reader: AudioFileReader) {
    let reader = try AudioFileReader(path: url.path, chunkFrames: chunkFrames)
    var all: [Float] = []
    while let chunk = try reader.next() { all.append(contentsOf: chunk) }
    return (all, reader)
}

/// The AudioError code thrown while opening and reading `url` to the end, or nil when it decodes.
func decodeErrorCode(_ url: URL) -> AudioError.Code? {
    do {
        _ = try decode(url)
        return nil
    } catch let e as AudioError {
        return e.code
    } catch {
        Issue.record("unexpected error type: \(error)")
        return nil
    }
}

@Suite("Decoding WAV and resampling to 44.1 kHz mono")
struct WAVDecodingTests {
    @Test("a 1 kHz stereo tone keeps its length, pitch and level", arguments: [48_000, 22_050])
    func stereoTone(rate: Int) throws {
        let dir = try TemporaryDirectory("tone")
        let tone = Signal.sine(frequency: 1000, sampleRate: Double(rate), seconds: 2, amplitude: 0.5)
        let url = dir.file("tone.wav")
        try WAVFile.write(channels: [tone, tone], sampleRate: rate, to: url)

        let (mono, reader) = try decode(url)
        #expect(reader.decoder == .libsndfile)
        #expect(reader.sourceSampleRate == Double(rate))
        #expect(reader.sourceChannels == 2)
        #expect(abs((reader.announcedDuration ?? 0) - 2) < 1e-6)
        #expect(abs(mono.count - 88_200) <= 1, "got \(mono.count) samples for 2 s")
        #expect(abs(reader.secondsRead - 2) < 0.001)
        let f = Signal.toneFrequency(mono, sampleRate: 44_100)
        #expect(abs(f - 1000) < 0.5, "measured \(f) Hz")
        // Both channels carry the tone: the mono mix has its full level (RMS of a 0.5 sine).
        let level = Signal.rms(mono[4410..<(mono.count - 4410)])
        #expect(abs(level - 0.5 / 2.0.squareRoot()) < 0.005, "RMS \(level)")
    }

    @Test("stereo is averaged to mono, not summed")
    func downmixAverages() throws {
        let dir = try TemporaryDirectory("downmix")
        let left = Signal.sine(frequency: 440, sampleRate: 44_100, seconds: 1, amplitude: 0.8)
        let right = [Float](repeating: 0, count: left.count)
        let url = dir.file("left-only.wav")
        try WAVFile.write(channels: [left, right], sampleRate: 44_100, to: url)
        let (mono, _) = try decode(url)
        #expect(mono.count == left.count, "44.1 kHz input must pass through with its length")
        #expect(abs(Signal.rms(mono) - 0.4 / 2.0.squareRoot()) < 0.003)
    }

    @Test("a 44.1 kHz mono float WAV passes through sample for sample")
    func passThrough() throws {
        let dir = try TemporaryDirectory("float")
        let noise = Signal.whiteNoise(count: 44_100, rms: 0.2, seed: 7)
        let url = dir.file("noise.wav")
        try WAVFile.write(noise, to: url, encoding: .float32)
        let (mono, _) = try decode(url)
        #expect(mono == noise)
    }

    @Test("chunk size does not change the decoded samples")
    func chunkingIsInvisible() throws {
        let dir = try TemporaryDirectory("chunks")
        let tone = Signal.sine(frequency: 1234, sampleRate: 48_000, seconds: 1.5, amplitude: 0.3)
        let url = dir.file("tone.wav")
        try WAVFile.write(tone, sampleRate: 48_000, to: url)
        let (whole, _) = try decode(url)
        let (small, _) = try decode(url, chunkFrames: 1001)
        #expect(whole.count == small.count)
        let maxDiff = zip(whole, small).map { abs($0 - $1) }.max() ?? 0
        #expect(maxDiff < 1e-5, "max difference \(maxDiff)")
    }
}

@Suite("Decoding compressed formats")
struct CompressedDecodingTests {
    /// Writes a 3-s 1 kHz tone (44.1 kHz stereo) and converts it with `tool` into `ext`.
    static func makeTone(_ ext: String, in dir: TemporaryDirectory) throws -> URL {
        let tone = Signal.sine(frequency: 1000, sampleRate: 44_100, seconds: 3, amplitude: 0.5)
        let wav = dir.file("tone.wav")
        try WAVFile.write(channels: [tone, tone], sampleRate: 44_100, to: wav)
        let out = dir.file("tone.\(ext)")
        switch ext {
        case "flac", "ogg": try Run.sox([wav.path, out.path])
        case "mp3": try Run.ffmpeg(["-i", wav.path, "-c:a", "libmp3lame", "-b:a", "192k", out.path])
        case "m4a": try Run.ffmpeg(["-i", wav.path, "-c:a", "aac", "-b:a", "128k", out.path])
        default: throw TestSupportError("no recipe for .\(ext)")
        }
        return out
    }

    @Test("FLAC, Ogg Vorbis and MP3 decode in-process with the right pitch and length",
          arguments: [("flac", 0.0), ("ogg", 0.01), ("mp3", 0.01)])
    func sndfileFormats(ext: String, lengthTolerance: Double) throws {
        let dir = try TemporaryDirectory(ext)
        let (mono, reader) = try decode(try Self.makeTone(ext, in: dir))
        #expect(reader.decoder == .libsndfile)
        #expect(abs(Double(mono.count) / 44_100 - 3) <= lengthTolerance, "\(mono.count) samples")
        let f = Signal.toneFrequency(mono, sampleRate: 44_100)
        #expect(abs(f - 1000) < 1, "measured \(f) Hz")
        #expect(abs(Signal.rms(mono[4410..<(mono.count - 4410)]) - 0.3536) < 0.02)
    }

    @Test("FLAC decodes bit-exactly like the WAV it was made from")
    func flacIsLossless() throws {
        let dir = try TemporaryDirectory("lossless")
        let flac = try Self.makeTone("flac", in: dir)
        let (a, _) = try decode(dir.file("tone.wav"))
        let (b, _) = try decode(flac)
        #expect(a == b)
    }
}

@Suite("Damaged and unsupported input")
struct BadInputTests {
    @Test("an empty file is .empty")
    func emptyFile() throws {
        let dir = try TemporaryDirectory("empty")
        let url = dir.file("empty.wav")
        #expect(FileManager.default.createFile(atPath: url.path, contents: Data()))
        #expect(decodeErrorCode(url) == .empty)
    }

    @Test("a WAV header with no samples is .empty")
    func headerOnly() throws {
        let dir = try TemporaryDirectory("header")
        let url = dir.file("nothing.wav")
        try WAVFile.write([], to: url)
        #expect(decodeErrorCode(url) == .empty)
    }

    @Test("a text file named .wav is .unsupportedFormat")
    func textFile() throws {
        let dir = try TemporaryDirectory("text")
        let url = dir.file("notes.wav")
        try Data(String(repeating: "This is not audio, just some notes.\n", count: 50).utf8).write(to: url)
        #expect(decodeErrorCode(url) == .unsupportedFormat)
    }

    @Test("a missing file is .unreadable")
    func missingFile() throws {
        let dir = try TemporaryDirectory("missing")
        #expect(decodeErrorCode(dir.file("nope.flac")) == .unreadable)
        #expect(decodeErrorCode(dir.url) == .unreadable, "a folder is not an audio file")
    }

    @Test("a WAV cut in half (header announces more) is .corrupt", arguments: [WAVFile.Encoding.int16, .float32])
    func truncatedWAV(encoding: WAVFile.Encoding) throws {
        let dir = try TemporaryDirectory("truncated")
        let url = dir.file("cut.wav")
        try WAVFile.write(Signal.sine(frequency: 500, sampleRate: 44_100, seconds: 2), to: url, encoding: encoding)
        let size = try #require(try FileManager.default.attributesOfItem(atPath: url.path)[.size] as? Int)
        let handle = try FileHandle(forWritingTo: url)
        try handle.truncate(atOffset: UInt64(size / 2))
        try handle.close()
        #expect(decodeErrorCode(url) == .corrupt)
    }
}

/// These tests change EARMARK_FFMPEG in this process, so they run one at a time, and every test that
/// needs ffmpeg's fallback lives here.
@Suite("ffmpeg fallback", .serialized)
struct FFmpegFallbackTests {
    /// Runs `body` with EARMARK_FFMPEG set to `value` (nil: unset), restoring the old value after.
    func withFFmpegSetting<T>(_ value: String?, _ body: () throws -> T) rethrows -> T {
        let old = ProcessInfo.processInfo.environment["EARMARK_FFMPEG"]
        if let value { setenv("EARMARK_FFMPEG", value, 1) } else { unsetenv("EARMARK_FFMPEG") }
        defer { if let old { setenv("EARMARK_FFMPEG", old, 1) } else { unsetenv("EARMARK_FFMPEG") } }
        return try body()
    }

    @Test("an .m4a (AAC) file decodes through ffmpeg")
    func m4aThroughFFmpeg() throws {
        let dir = try TemporaryDirectory("m4a")
        let m4a = try CompressedDecodingTests.makeTone("m4a", in: dir)
        let (mono, reader) = try withFFmpegSetting(nil) { try decode(m4a) }
        #expect(reader.decoder == .ffmpeg)
        #expect(abs(Double(mono.count) / 44_100 - 3) < 0.05, "\(mono.count) samples")
        let f = Signal.toneFrequency(mono, sampleRate: 44_100)
        #expect(abs(f - 1000) < 1, "measured \(f) Hz")
    }

    @Test("with EARMARK_FFMPEG empty or pointing nowhere, .m4a is .unsupportedFormat", arguments: ["", "/nonexistent/ffmpeg"])
    func m4aWithoutFFmpeg(setting: String) throws {
        let dir = try TemporaryDirectory("m4a-off")
        let m4a = try CompressedDecodingTests.makeTone("m4a", in: dir)
        let code: AudioError.Code? = withFFmpegSetting(setting) {
            do {
                _ = try AudioFileReader(path: m4a.path)
                return nil
            } catch let e as AudioError {
                return e.code
            } catch {
                return .invalidFormat
            }
        }
        #expect(code == .unsupportedFormat)
    }

    @Test("EARMARK_FFMPEG naming the real program is used")
    func explicitFFmpeg() throws {
        let ffmpeg = try #require(Run.which("ffmpeg"))
        let dir = try TemporaryDirectory("m4a-explicit")
        let m4a = try CompressedDecodingTests.makeTone("m4a", in: dir)
        let (mono, reader) = try withFFmpegSetting(ffmpeg) { try decode(m4a) }
        #expect(reader.decoder == .ffmpeg)
        #expect(mono.count > 44_100 * 2)
    }
}

@Suite("AudioDigest")
struct AudioDigestTests {
    func digest(_ url: URL) throws -> String {
        let reader = try AudioFileReader(path: url.path)
        var d = AudioDigest()
        while let chunk = try reader.next() { d.update(chunk) }
        return d.finalizeHex()
    }

    @Test("the same music as WAV and as FLAC has the same digest; other audio does not")
    func wavAndFlacAgree() throws {
        let audio = try TestAudio.set()
        let dir = try TemporaryDirectory("digest")
        let source = try audio.reference("pingus-3")
        let wav = dir.file("music.wav"), flac = dir.file("music.flac"), quieter = dir.file("quieter.flac")
        try Fixtures.cut(source, start: 10, seconds: 8, to: wav)
        try Run.sox([wav.path, flac.path])
        try Run.sox([wav.path, quieter.path, "vol", "0.5"])

        let a = try digest(wav), b = try digest(flac)
        #expect(a.count == 32 && a.allSatisfy(\.isHexDigit))
        #expect(a == b)
        #expect(try digest(quieter) != a)
    }

    @Test("the digest does not depend on how samples are split into chunks, but on their count")
    func chunkIndependence() {
        let x = Signal.whiteNoise(count: 10_001, rms: 0.3, seed: 3)
        var whole = AudioDigest()
        whole.update(x)
        var parts = AudioDigest()
        parts.update(Array(x[0..<3]))
        parts.update(Array(x[3..<5000]))
        parts.update(Array(x[5000...]))
        var shorter = AudioDigest()
        shorter.update(Array(x.dropLast()))
        var padded = AudioDigest()
        padded.update(x + [0])
        let h = whole.finalizeHex()
        #expect(parts.finalizeHex() == h)
        #expect(shorter.finalizeHex() != h)
        #expect(padded.finalizeHex() != h, "a trailing zero sample is still a different recording")
    }
}
