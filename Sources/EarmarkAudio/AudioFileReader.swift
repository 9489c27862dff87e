import CSndFile
import Foundation

/// Streams a file as 44.1 kHz mono float chunks, whatever its format, rate and channel count.
///
/// libsndfile decodes WAV, AIFF, FLAC, Ogg Vorbis and Opus in-process (mono and stereo Ogg Opus go
/// to libopus directly, see ``OggOpusSource``, and MP3 to libmpg123, see ``MP3Source``). Anything it does not
/// recognise (M4A/AAC, video containers, …) is piped through the `ffmpeg` program when it is
/// installed; otherwise opening fails with ``AudioError/Code/unsupportedFormat``.
/// Memory stays flat: only one chunk is held at a time.
///
/// ```swift
/// let reader = try AudioFileReader(path: "song.flac")
/// while let chunk = try reader.next() { generator.append(chunk) }
/// ```
public final class AudioFileReader {
    /// Which decoder serves the file.
    public enum Decoder: String, Sendable { case libsndfile, libopus, libmpg123, ffmpeg }

    public let path: String
    public let decoder: Decoder
    /// Sample rate of the file itself (nil when ffmpeg decodes and converts).
    public let sourceSampleRate: Double?
    /// Channel count of the file itself (nil when ffmpeg decodes and converts).
    public let sourceChannels: Int?
    /// Duration announced by the container, in seconds, when known.
    public let announcedDuration: Double?
    /// Seconds of 44.1 kHz audio delivered so far.
    public var secondsRead: Double { Double(framesOut) / AudioConstants.sampleRate }

    private var source: any PCMSource
    private let resampler: Resampler
    private var framesOut = 0
    private var finished = false

    /// Opens `path`. `chunkFrames` is the number of source frames decoded per ``next()`` call.
    public init(path: String, chunkFrames: Int = 32_768) throws {
        self.path = path
        var isDir: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDir) else {
            throw AudioError(.unreadable, "no such file", path: path)
        }
        guard !isDir.boolValue else { throw AudioError(.unreadable, "is a folder, not an audio file", path: path) }
        guard FileManager.default.isReadableFile(atPath: path) else {
            throw AudioError(.unreadable, "permission denied", path: path)
        }
        var info = stat()
        if stat(path, &info) == 0, info.st_mode & S_IFMT != S_IFREG {
            let kind = info.st_mode & S_IFMT == S_IFIFO ? "a pipe (FIFO)" : info.st_mode & S_IFMT == S_IFSOCK ? "a socket" : "a device"
            throw AudioError(.unreadable, "is \(kind), not an audio file; to identify a stream, pipe it into `earmark listen --input -`", path: path)
        }
        let size = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
        guard size > 0 else { throw AudioError(.empty, "file is empty (0 bytes)", path: path) }

        let opened: (any PCMSource, Decoder, Double?, Int?, Double?, Double)
        do {
            let s = try openFileSource(path: path, chunkFrames: chunkFrames)
            opened = (s, s.kind, s.sampleRate, s.channels, s.announcedFrames.map { Double($0) / s.sampleRate }, s.sampleRate)
        } catch let sndError as AudioError where sndError.code == .unsupportedFormat {
            guard let ffmpeg = FFmpegSource.executable() else {
                throw AudioError(.unsupportedFormat,
                                 "unsupported audio format (\(sndError.message)); install ffmpeg to read this container",
                                 path: path)
            }
            let f = try FFmpegSource(path: path, executable: ffmpeg, chunkFrames: chunkFrames)
            opened = (f, .ffmpeg, nil, nil, nil, AudioConstants.sampleRate)
        }
        (source, decoder, sourceSampleRate, sourceChannels, announcedDuration) = (opened.0, opened.1, opened.2, opened.3, opened.4)
        resampler = try Resampler(inputRate: opened.5)
    }

    /// The next chunk of 44.1 kHz mono samples, or nil at the end of the file.
    public func next() throws -> [Float]? {
        while !finished {
            if let mono = try source.readMono() {
                let out = resampler.process(mono)
                if out.isEmpty { continue }
                framesOut += out.count
                return out
            }
            finished = true
            let tail = resampler.flush()
            if framesOut + tail.count == 0 {
                throw AudioError(.empty, "no audio samples in file", path: path)
            }
            if !tail.isEmpty {
                framesOut += tail.count
                return tail
            }
        }
        return nil
    }

    /// Reads the whole file into memory; for short clips.
    public static func readAll(path: String) throws -> [Float] {
        let reader = try AudioFileReader(path: path)
        var all: [Float] = []
        while let chunk = try reader.next() { all.append(contentsOf: chunk) }
        return all
    }
}

/// A decoder that yields mono float chunks at its own sample rate.
protocol PCMSource {
    /// The next mono chunk, or nil at the end. Throws on decode errors.
    func readMono() throws -> [Float]?
}

/// An in-process decoder that also gives the file's own channels.
protocol FileSource: PCMSource {
    var kind: AudioFileReader.Decoder { get }
    var sampleRate: Double { get }
    var channels: Int { get }
    /// Frames the container announces, when it does.
    var announcedFrames: Int? { get }
    /// The next chunk with all channels, interleaved, at the file's own rate; nil at the end.
    func readInterleaved() throws -> [Float]?
}

/// The in-process decoder for `path`: ``OggOpusSource`` for mono and stereo Ogg Opus, ``MP3Source`` for MP3,
/// libsndfile for the rest.
func openFileSource(path: String, chunkFrames: Int) throws -> any FileSource {
    if let opus = try OggOpusSource.open(path: path, chunkFrames: chunkFrames) { return opus }
    if let mp3 = try MP3Source.open(path: path, chunkFrames: chunkFrames) { return mp3 }
    return try SndFileSource(path: path, chunkFrames: chunkFrames)
}

final class SndFileSource: FileSource {
    let kind = AudioFileReader.Decoder.libsndfile
    let sampleRate: Double
    let channels: Int
    let announcedFrames: Int?
    private let file: OpaquePointer
    private let path: String
    private let chunkFrames: Int
    private var interleaved: [Float]
    private var framesRead = 0
    private let exactLength: Bool

    init(path: String, chunkFrames: Int) throws {
        var info = SF_INFO()
        guard let f = sf_open(path, Int32(SFM_READ), &info) else {
            let msg = String(cString: sf_strerror(nil))
            if msg.contains("unknown format") || msg.contains("not recognised") || msg.contains("Format not recognised")
                || msg.contains("not supported") {
                throw AudioError(.unsupportedFormat, "libsndfile: \(msg)", path: path)
            }
            throw AudioError(.corrupt, "cannot open: \(msg)", path: path)
        }
        guard info.samplerate > 0, info.channels > 0 else {
            sf_close(f)
            throw AudioError(.invalidFormat, "invalid header: \(info.samplerate) Hz, \(info.channels) channels", path: path)
        }
        file = f
        self.path = path
        sampleRate = Double(info.samplerate)
        channels = Int(info.channels)
        self.chunkFrames = chunkFrames
        interleaved = [Float](repeating: 0, count: chunkFrames * Int(info.channels))
        let major = info.format & Int32(SF_FORMAT_TYPEMASK)
        // MP3 and Ogg lengths are estimates; PCM containers and FLAC announce their exact length.
        let exactFormats: Set<Int32> = [Int32(SF_FORMAT_WAV), Int32(SF_FORMAT_WAVEX), Int32(SF_FORMAT_AIFF),
                                        Int32(SF_FORMAT_FLAC), Int32(SF_FORMAT_W64), Int32(SF_FORMAT_CAF),
                                        Int32(SF_FORMAT_RF64)]
        exactLength = exactFormats.contains(major)
        announcedFrames = info.frames > 0 ? Int(info.frames) : nil
        if exactLength, SndFileSource.logMentionsTruncation(f) {
            sf_close(f)
            throw AudioError(.corrupt, "truncated file: the header announces more audio than the file holds", path: path)
        }
    }

    deinit { sf_close(file) }

    private static func logMentionsTruncation(_ f: OpaquePointer) -> Bool {
        var buf = [UInt8](repeating: 0, count: 4096)
        _ = sf_command(f, Int32(SFC_GET_LOG_INFO), &buf, Int32(buf.count))
        let log = String(decoding: buf.prefix { $0 != 0 }, as: UTF8.self).lowercased()
        return log.contains("exceeds file") || log.contains("should be") && log.contains("data")
    }

    func readMono() throws -> [Float]? {
        guard let frames = try readFrames() else { return nil }
        return interleaved.withUnsafeBufferPointer {
            downmixToMono(UnsafeBufferPointer(rebasing: $0[0..<(frames * channels)]), channels: channels)
        }
    }

    /// The next chunk with all channels, interleaved, at the file's own rate.
    func readInterleaved() throws -> [Float]? {
        guard let frames = try readFrames() else { return nil }
        return Array(interleaved[0..<(frames * channels)])
    }

    /// Decodes the next chunk into `interleaved`; returns its frame count, or nil at the end.
    private func readFrames() throws -> Int? {
        let n = interleaved.withUnsafeMutableBufferPointer { sf_readf_float(file, $0.baseAddress, sf_count_t(chunkFrames)) }
        if n <= 0 {
            let err = sf_error(file)
            if err != 0 {
                throw AudioError(.corrupt, "decode error after \(framesRead) frames: \(String(cString: sf_strerror(file)))", path: path)
            }
            if exactLength, let want = announcedFrames, framesRead < want {
                throw AudioError(.corrupt, "truncated file: \(framesRead) of \(want) frames decodable", path: path)
            }
            return nil
        }
        let frames = Int(n)
        framesRead += frames
        return frames
    }
}

final class FFmpegSource: PCMSource {
    private let process: Process
    private let stdout: FileHandle
    private let stderrURL: URL
    private let path: String
    private let chunkBytes: Int
    private var pending = Data()
    private var bytesRead = 0

    /// The ffmpeg program to use: `$EARMARK_FFMPEG` when set (empty disables ffmpeg), else `ffmpeg` on PATH.
    static func executable() -> String? {
        let env = ProcessInfo.processInfo.environment
        if let forced = env["EARMARK_FFMPEG"] {
            return forced.isEmpty || !FileManager.default.isExecutableFile(atPath: forced) ? nil : forced
        }
        for dir in (env["PATH"] ?? "/usr/bin:/bin").split(separator: ":") {
            let candidate = "\(dir)/ffmpeg"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return nil
    }

    /// Decodes to 44.1 kHz float with `channels` channels (interleaved), mono by default.
    init(path: String, executable: String, chunkFrames: Int, channels: Int = 1) throws {
        self.path = path
        chunkBytes = chunkFrames * 4 * channels
        process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = ["-nostdin", "-hide_banner", "-loglevel", "error", "-i", path, "-vn", "-ac", String(channels),
                             "-ar", "44100", "-f", "f32le", "-acodec", "pcm_f32le", "pipe:1"]
        let out = Pipe()
        process.standardOutput = out
        process.standardInput = FileHandle.nullDevice
        stderrURL = FileManager.default.temporaryDirectory.appendingPathComponent("earmark-ffmpeg-\(UUID().uuidString).log")
        _ = FileManager.default.createFile(atPath: stderrURL.path, contents: nil)
        process.standardError = try FileHandle(forWritingTo: stderrURL)
        stdout = out.fileHandleForReading
        do { try process.run() } catch {
            throw AudioError(.unsupportedFormat, "cannot start ffmpeg: \(error)", path: path)
        }
    }

    deinit {
        if process.isRunning { process.terminate() }
        try? FileManager.default.removeItem(at: stderrURL)
    }

    func readMono() throws -> [Float]? {
        while pending.count < chunkBytes {
            let data = try stdout.read(upToCount: chunkBytes - pending.count) ?? Data()
            if data.isEmpty { break }
            pending.append(data)
        }
        let usable = pending.count - pending.count % 4
        if usable == 0 {
            process.waitUntilExit()
            if process.terminationStatus != 0 {
                let text = (try? String(contentsOf: stderrURL, encoding: .utf8))?
                    .trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
                let code: AudioError.Code = bytesRead == 0 ? .unsupportedFormat : .corrupt
                throw AudioError(code, "not a recognised audio format (ffmpeg: \(text.isEmpty ? "exit \(process.terminationStatus)" : text))", path: path)
            }
            return nil
        }
        var samples = [Float](repeating: 0, count: usable / 4)
        _ = samples.withUnsafeMutableBytes { dst in
            pending.copyBytes(to: dst, from: 0..<usable)
        }
        pending.removeSubrange(0..<usable)
        bytesRead += usable
        return samples
    }
}
