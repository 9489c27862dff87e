@testable import EarmarkAudio
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
        #expect(reader.decoder == (ext == "mp3" ? .libmpg123 : .libsndfile))
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

@Suite("MP3 through libmpg123")
struct MP3DecodingTests {
    /// Every interleaved sample of a source, to the end.
    func all(_ source: any FileSource) throws -> [Float] {
        var out: [Float] = []
        while let chunk = try source.readInterleaved() { out += chunk }
        return out
    }

    @Test("MP3 decodes sample for sample as libsndfile decoded it (with and without a Xing header, mono and stereo, 44.1 and 48 kHz)",
          arguments: [["-b:a", "128k"], ["-b:a", "64k", "-write_xing", "0"], ["-ac", "1", "-ar", "48000", "-b:a", "96k"]])
    func sameAsLibsndfile(options: [String]) throws {
        let dir = try TemporaryDirectory("mp3")
        let mp3 = dir.file("music.mp3")
        try Run.ffmpeg(["-i", try TestAudio.set().reference("pingus-5").path, "-t", "20"] + options + [mp3.path])
        let mine = try #require(try MP3Source.open(path: mp3.path, chunkFrames: 4096))
        let theirs = try SndFileSource(path: mp3.path, chunkFrames: 4096)
        #expect(mine.sampleRate == theirs.sampleRate && mine.channels == theirs.channels)
        #expect(mine.announcedFrames == theirs.announcedFrames)
        let (a, b) = (try all(mine), try all(theirs))
        #expect(a.count == b.count && a.count > 15 * Int(mine.sampleRate))
        #expect(a == b, "first difference at \(a.indices.first { $0 < b.count && a[$0] != b[$0] } ?? -1)")
        #expect(try decode(mp3).reader.decoder == .libmpg123)
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

    @Test("a FIFO or a device is not an audio file (they are not 'empty'), and the error says how to read a stream")
    func notAFile() throws {
        let dir = try TemporaryDirectory("fifo")
        let fifo = dir.path("stream.wav")
        #expect(mkfifo(fifo, 0o600) == 0)
        for (path, kind) in [(fifo, "a pipe"), ("/dev/zero", "a device")] {
            do {
                _ = try AudioFileReader(path: path)
                Issue.record("\(path) opened as audio")
            } catch let e as AudioError {
                #expect(e.code == .unreadable)
                #expect(e.message.contains(kind) && e.message.contains("listen --input -"), "\(e)")
            }
        }
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

    @Test("the digest of a fixed signal keeps its value (catalogs store it to spot re-added audio)")
    func stableValue() {
        var d = AudioDigest()
        // Odd length and chunks, values past full scale, exact halves: every path of the quantiser.
        var x: [Float] = (0..<10_007).map { (i: Int) -> Float in Float(sin(Double(i) * 0.01)) * 1.2 }
        x += [0.5 / 32767, -0.5 / 32767, 0]
        d.update(Array(x[0..<3]))
        d.update(Array(x[3...]))
        #expect(d.finalizeHex() == "3a81f693c0ad0e2c1b063afe567255ee")
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

@Suite("Ogg Opus through libopus directly")
struct OggOpusTests {
    /// Every interleaved sample a source gives, at the file's own rate.
    private func all(_ source: any FileSource) throws -> [Float] {
        var out: [Float] = []
        while let chunk = try source.readInterleaved() { out += chunk }
        return out
    }

    @Test("stereo music at 48 kHz and mono speech at 16 kHz decode as libsndfile decodes them, sample for sample",
          arguments: [("music", 2, 48_000), ("speech", 1, 16_000)])
    func sameAsLibsndfile(kind: String, channels: Int, rate: Int) throws {
        let audio = try TestAudio.set()
        let dir = try TemporaryDirectory("opus")
        let source = kind == "music" ? try audio.reference("pingus-4") : audio.speech[0]
        try Fixtures.cut(source, start: 3, seconds: 20, to: dir.file("cut.wav"), rate: rate, channels: channels)
        try Run.ffmpeg(["-i", dir.path("cut.wav"), "-c:a", "libopus", "-b:a", "64k", dir.path("cut.opus")])
        let ours = try #require(try OggOpusSource.open(path: dir.path("cut.opus"), chunkFrames: 4_096))
        let theirs = try SndFileSource(path: dir.path("cut.opus"), chunkFrames: 4_096)
        #expect(ours.sampleRate == Double(rate) && theirs.sampleRate == Double(rate))
        #expect(ours.channels == channels && theirs.channels == channels)
        #expect(ours.announcedFrames == theirs.announcedFrames)
        let a = try all(ours), b = try all(theirs)
        #expect(a.count == 20 * rate * channels, "\(a.count) samples")
        #expect(a.count == b.count)
        #expect(a == b)
        #expect(Signal.rms(a) > 0.01)
        let reader = try AudioFileReader(path: dir.path("cut.opus"))
        #expect(reader.decoder == .libopus)
        #expect(abs((reader.announcedDuration ?? 0) - 20) < 1e-9)
    }

    @Test("truncated and damaged Opus files decode what is intact, without a crash; 5.1 Opus goes to libsndfile")
    func damagedAndSurround() throws {
        let audio = try TestAudio.set()
        let dir = try TemporaryDirectory("opus-bad")
        try Fixtures.cut(try audio.reference("pingus-4"), start: 3, seconds: 20, to: dir.file("cut.wav"), rate: 48_000, channels: 2)
        try Run.ffmpeg(["-i", dir.path("cut.wav"), "-c:a", "libopus", "-b:a", "64k", dir.path("cut.opus")])
        let bytes = try Data(contentsOf: dir.file("cut.opus"))
        try bytes.prefix(bytes.count / 2).write(to: dir.file("half.opus"))
        let half = try decode(dir.file("half.opus")).samples
        #expect(half.count > 44_100 * 8 && half.count < 44_100 * 12, "\(half.count) samples")
        var damaged = bytes
        for i in stride(from: bytes.count / 3, to: bytes.count / 3 + 2_000, by: 7) { damaged[i] ^= 0x5A }
        try damaged.write(to: dir.file("damaged.opus"))
        let code = decodeErrorCode(dir.file("damaged.opus"))
        #expect(code == nil || code == .corrupt)
        if code == nil {
            let d = try decode(dir.file("damaged.opus")).samples
            #expect(d.count > 44_100 * 15, "decoding goes on after the damaged pages: \(d.count) samples")
        }
        try Data("OggS but not really an Ogg file".utf8).write(to: dir.file("fake.opus"))
        #expect(decodeErrorCode(dir.file("fake.opus")) != nil)
        let six = (0..<6).map { _ in "cut.wav" }
        try Run.sox(["-M"] + six.map { dir.path($0) } + [dir.path("six.wav"), "remix", "1", "2", "1", "2", "1", "2"])
        try Run.ffmpeg(["-i", dir.path("six.wav"), "-c:a", "libopus", "-b:a", "128k", "-mapping_family", "1", dir.path("six.opus")])
        let (six51, reader) = try decode(dir.file("six.opus"))
        #expect(reader.decoder == .libsndfile)
        #expect(reader.sourceChannels == 6)
        #expect(abs(Double(six51.count) / 44_100 - 20) < 0.01)
    }
}
