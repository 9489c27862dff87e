import CMPG123
import Foundation

/// Decodes MPEG audio (MP3) with libmpg123 directly, as libsndfile does (gapless, float output at the
/// file's own rate and channels, no resampling, Frankenstein streams off), and with libmpg123's own
/// printouts off: through libsndfile a damaged or odd file wrote libmpg123's warnings straight to
/// standard error, past every message of ours. Errors come back as error codes instead.
final class MP3Source: FileSource {
    let kind = AudioFileReader.Decoder.libmpg123
    let sampleRate: Double
    let channels: Int
    let announcedFrames: Int?
    private let handle: OpaquePointer
    private let path: String
    private let chunkFrames: Int
    private let exactLength: Bool
    private var buffer: [Float]
    private var framesRead = 0
    private var done = false

    /// Opens `path` when it starts like an MPEG audio file (an ID3v2 tag or a frame header) and libmpg123 takes
    /// it; nil for anything else (left to libsndfile).
    static func open(path: String, chunkFrames: Int) throws -> MP3Source? {
        guard let h = FileHandle(forReadingAtPath: path) else { return nil }
        let head = [UInt8]((try? h.read(upToCount: 4)) ?? Data())
        try? h.close()
        guard head.count == 4, startsLikeMPEGAudio(head) else { return nil }
        do {
            return try MP3Source(path: path, chunkFrames: chunkFrames)
        } catch where head[0...2] != [0x49, 0x44, 0x33] && !path.lowercased().hasSuffix(".mp3") {
            return nil  // bytes that only looked like a frame header: libsndfile may know the format
        }
    }

    private init(path: String, chunkFrames: Int) throws {
        self.path = path
        self.chunkFrames = chunkFrames
        var error: Int32 = 0
        guard let h = mpg123_new(nil, &error) else {
            throw AudioError(.corrupt, "cannot start the MP3 decoder: \(String(cString: mpg123_plain_strerror(error)))", path: path)
        }
        handle = h
        func fail(_ what: String) -> AudioError {
            let message = String(cString: mpg123_strerror(h))
            mpg123_delete(h)
            return AudioError(.corrupt, "\(what): \(message)", path: path)
        }
        _ = mpg123_param2(h, Int32(MPG123_REMOVE_FLAGS.rawValue), Int(MPG123_AUTO_RESAMPLE.rawValue), 0)
        _ = mpg123_param2(h, Int32(MPG123_ADD_FLAGS.rawValue),
                          Int(MPG123_GAPLESS.rawValue | MPG123_FORCE_FLOAT.rawValue | MPG123_QUIET.rawValue), 0)
        _ = mpg123_param2(h, Int32(MPG123_ADD_FLAGS.rawValue), Int(MPG123_NO_FRANKENSTEIN.rawValue), 0)
        guard mpg123_open(h, path) == MPG123_OK.rawValue else { throw fail("cannot open") }
        var rate = 0, channels: Int32 = 0, encoding: Int32 = 0
        guard mpg123_getformat(h, &rate, &channels, &encoding) == MPG123_OK.rawValue, rate > 0, channels > 0 else {
            throw fail("not a readable MP3")
        }
        // Keep this format for the whole stream.
        _ = mpg123_format_none(h)
        guard mpg123_format(h, rate, Int32(channels), Int32(MPG123_ENC_FLOAT_32.rawValue)) == MPG123_OK.rawValue else {
            throw fail("unsupported MP3 format")
        }
        sampleRate = Double(rate)
        self.channels = Int(channels)
        let length = mpg123_length(h)
        announcedFrames = length > 0 ? Int(length) : nil
        // With a Xing, Info or VBRI header the length is stated, not estimated from the file size.
        exactLength = MP3Source.statesLength(path: path)
        buffer = [Float](repeating: 0, count: chunkFrames * Int(channels))
    }

    deinit {
        mpg123_close(handle)
        mpg123_delete(handle)
    }

    func readMono() throws -> [Float]? {
        guard let n = try readFrames() else { return nil }
        return buffer.withUnsafeBufferPointer { downmixToMono(UnsafeBufferPointer(rebasing: $0[0..<(n * channels)]), channels: channels) }
    }

    func readInterleaved() throws -> [Float]? {
        guard let n = try readFrames() else { return nil }
        return Array(buffer[0..<(n * channels)])
    }

    private func readFrames() throws -> Int? {
        let wanted = chunkFrames * channels * MemoryLayout<Float>.size
        // A read can end without samples (a format notice, a skipped frame); a stream of only those is damage.
        for _ in 0..<10_000 {
            guard !done else { break }
            var bytes = 0
            let rc = buffer.withUnsafeMutableBytes { mpg123_read(handle, $0.baseAddress, wanted, &bytes) }
            switch rc {
            case MPG123_OK.rawValue, MPG123_NEW_FORMAT.rawValue: break
            case MPG123_DONE.rawValue: done = true
            default:
                throw AudioError(.corrupt, "decode error after \(framesRead) frames: \(String(cString: mpg123_strerror(handle)))", path: path)
            }
            let frames = bytes / (channels * MemoryLayout<Float>.size)
            framesRead += frames
            if frames > 0 { return frames }
        }
        guard done else { throw AudioError(.corrupt, "decode error after \(framesRead) frames: no audio in the stream", path: path) }
        // A decoder may stop up to a frame short of the stated length.
        if exactLength, let want = announcedFrames, framesRead < want - 1152 {
            throw AudioError(.corrupt, "truncated file: \(framesRead) of \(want) frames decodable", path: path)
        }
        return nil
    }

    /// Whether the first MPEG frame carries a Xing/Info or VBRI header (after any ID3v2 tag).
    static func statesLength(path: String) -> Bool {
        guard let handle = FileHandle(forReadingAtPath: path) else { return false }
        defer { try? handle.close() }
        guard let head = try? handle.read(upToCount: 10).map({ [UInt8]($0) }), head.count == 10 else { return false }
        var start: UInt64 = 0
        if head[0] == 0x49, head[1] == 0x44, head[2] == 0x33 {  // "ID3": skip the tag (syncsafe size)
            let size = head[6...9].reduce(UInt64(0)) { $0 << 7 | UInt64($1 & 0x7F) }
            start = 10 + size + (head[5] & 0x10 != 0 ? 10 : 0)
        }
        guard (try? handle.seek(toOffset: start)) != nil,
              let frame = try? handle.read(upToCount: 200).map({ [UInt8]($0) }), frame.count >= 64 else { return false }
        // The tag sits after the side information, within the frame's first few dozen bytes.
        for i in 4..<(frame.count - 4) {
            let tag = String(decoding: frame[i..<(i + 4)], as: UTF8.self)
            if tag == "Xing" || tag == "Info" || tag == "VBRI" { return true }
        }
        return false
    }
}

/// Whether a file whose first bytes are `head` starts like MPEG audio: an ID3v2 tag, or an MPEG audio frame
/// header (11 sync bits and a layer; an AAC ADTS header has the sync bits but layer 0).
public func startsLikeMPEGAudio(_ head: [UInt8]) -> Bool {
    head.starts(with: [0x49, 0x44, 0x33]) || (head.count >= 2 && head[0] == 0xFF && head[1] & 0xE0 == 0xE0 && head[1] & 0x06 != 0)
}
