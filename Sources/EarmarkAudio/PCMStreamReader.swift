import Foundation

/// Reads PCM audio from a pipe or any unseekable stream (standard input), buffer by buffer:
/// a WAV stream (its header says rate, channels and sample format; a streaming writer's unknown
/// length is fine) or headerless raw PCM in a format given by the caller.
///
/// ```swift
/// let reader = try PCMStreamReader(fileDescriptor: 0)          // `ffmpeg … -f wav - | earmark listen --input -`
/// while let buffer = try reader.next() { session.append(buffer) }
/// ```
public final class PCMStreamReader {
    /// Sample encodings of raw PCM.
    public enum SampleFormat: String, Sendable, CaseIterable {
        case s16le, s24le, s32le, f32le
        var bytes: Int {
            switch self {
            case .s16le: 2
            case .s24le: 3
            case .s32le, .f32le: 4
            }
        }
    }

    public let sampleRate: Double
    public let channels: Int
    public let format: SampleFormat
    private let source: (Int) throws -> [UInt8]
    private let framesPerBuffer: Int
    private var pending: [UInt8]
    /// Data bytes left in the WAV data chunk (nil: until the end of the stream).
    private var remaining: Int?
    /// Whether `remaining` counts down a true length. When the length is only what the writer wrote
    /// before it knew it (see ``init(seekable:raw:bufferDuration:source:)``), the stream goes on past
    /// it unless a RIFF chunk starts there.
    private var lengthIsExact = true
    /// The stated data length is odd: a chunk after it starts one pad byte later.
    private var statedLengthIsOdd = false
    private var ended = false

    /// Reads a WAV header from `fileDescriptor` when `raw` is nil; otherwise the stream is raw PCM in
    /// that format. Throws ``AudioError`` for a stream that is neither (naming what it saw).
    public convenience init(fileDescriptor: Int32, raw: (format: SampleFormat, sampleRate: Double, channels: Int)? = nil,
                            bufferDuration: Double = 0.1) throws {
        try self.init(seekable: PCMStreamReader.isRegularFile(fileDescriptor), raw: raw, bufferDuration: bufferDuration) {
            try PCMStreamReader.read(fileDescriptor, count: $0)
        }
    }

    /// Reads the stream from `source`, which returns up to the number of bytes asked for (fewer only
    /// at the end of the stream, none after it).
    ///
    /// `seekable` tells whether the bytes come from a file, whose writer could go back and put the
    /// true length in the WAV header once it knew it. A pipe's header was written before the audio
    /// and can never be patched, so on a pipe the stated data length is only a guess (sox writes
    /// 0x7FFFF000, about 2 GiB; ffmpeg 0xFFFFFFFF): reading goes on to the end of the stream, unless
    /// a RIFF chunk (`LIST`, `id3 `, …) follows right where the stated data ends. sox's placeholder
    /// is treated as a guess in a file too, since such a file is a saved pipe.
    public init(seekable: Bool, raw: (format: SampleFormat, sampleRate: Double, channels: Int)? = nil,
                bufferDuration: Double = 0.1, source: @escaping (Int) throws -> [UInt8]) throws {
        self.source = source
        pending = []
        if let raw {
            guard raw.sampleRate.isFinite, raw.sampleRate >= 1000, raw.sampleRate <= 384_000 else {
                throw AudioError(.invalidFormat, "invalid sample rate \(raw.sampleRate) Hz (1000–384000)")
            }
            guard (1...32).contains(raw.channels) else {
                throw AudioError(.invalidFormat, "invalid channel count \(raw.channels) (1–32)")
            }
            (format, sampleRate, channels) = raw
        } else {
            var header = WAVHeaderParser()
            var bytes: [UInt8] = []
            while true {
                switch try header.parse(bytes) {
                case .needMore(let n):
                    let more = try source(n)
                    guard !more.isEmpty else {
                        throw AudioError(bytes.isEmpty ? .empty : .corrupt,
                                         bytes.isEmpty ? "no data on the input" : "input ends inside the WAV header")
                    }
                    bytes += more
                case .done(let f, let rate, let ch, let dataOffset, let dataSize):
                    (format, sampleRate, channels) = (f, rate, ch)
                    var first = Array(bytes[dataOffset...])
                    if let size = dataSize, first.count > size { first.removeLast(first.count - size) }
                    remaining = dataSize.map { max(0, $0 - first.count) }
                    lengthIsExact = seekable && dataSize != WAVHeaderParser.soxPlaceholder
                    statedLengthIsOdd = (dataSize ?? 0) & 1 == 1
                    pending = first
                    framesPerBuffer = max(1, Int(rate * bufferDuration))
                    return
                }
            }
        }
        framesPerBuffer = max(1, Int(sampleRate * bufferDuration))
    }

    /// Whether `fd` is a regular file (a pipe, FIFO, socket or terminal is not).
    static func isRegularFile(_ fd: Int32) -> Bool {
        var st = stat()
        return fstat(fd, &st) == 0 && st.st_mode & S_IFMT == S_IFREG
    }

    /// The next buffer (about `bufferDuration` long; the last may be shorter), or nil at the end of the stream.
    public func next() throws -> PCMBuffer? {
        let frameBytes = format.bytes * channels
        let want = framesPerBuffer * frameBytes
        while !ended, pending.count < want {
            var n = want - pending.count
            if let r = remaining { n = min(n, r) }
            if n == 0 {
                if try lengthIsExact || !continuesPastStatedLength() { ended = true }
                continue
            }
            let more = try source(n)
            if more.isEmpty { ended = true; break }
            pending += more
            if remaining != nil { remaining! -= more.count }
        }
        let usable = min(pending.count, want) / frameBytes * frameBytes
        guard usable > 0 else { return nil }
        let samples = PCMStreamReader.decode(pending[0..<usable], format: format)
        pending.removeFirst(usable)
        return PCMBuffer(samples: samples, sampleRate: sampleRate, channels: channels)
    }

    /// At the end of a data length that is only a guess: reads what follows and keeps it as audio
    /// (true, and the length becomes unknown) unless it is a RIFF chunk header (false).
    private func continuesPastStatedLength() throws -> Bool {
        remaining = nil
        let pad = statedLengthIsOdd ? 1 : 0
        let next = try source(8 + pad)
        if WAVHeaderParser.isTrailingChunk(Array(next.dropFirst(pad))) { return false }
        pending += next
        return !next.isEmpty
    }

    /// Reads up to `count` bytes (fewer only at the end of the stream).
    static func read(_ fd: Int32, count: Int) throws -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        var got = 0
        while got < count {
            let n = out.withUnsafeMutableBytes { Foundation.read(fd, $0.baseAddress! + got, count - got) }
            if n == 0 { break }
            if n < 0 {
                if errno == EINTR { continue }
                throw AudioError(.unreadable, "cannot read the input: \(String(cString: strerror(errno)))")
            }
            got += n
        }
        out.removeLast(count - got)
        return out
    }

    static func decode(_ bytes: ArraySlice<UInt8>, format: SampleFormat) -> [Float] {
        let n = bytes.count / format.bytes
        var out = [Float](repeating: 0, count: n)
        bytes.withUnsafeBytes { raw in
            switch format {
            case .s16le:
                for i in 0..<n { out[i] = Float(Int16(littleEndian: raw.loadUnaligned(fromByteOffset: 2 * i, as: Int16.self))) / 32_768 }
            case .s24le:
                for i in 0..<n {
                    let b0 = Int32(raw[3 * i]), b1 = Int32(raw[3 * i + 1]), b2 = Int32(Int8(bitPattern: raw[3 * i + 2]))
                    out[i] = Float(b0 | b1 << 8 | b2 << 16) / 8_388_608
                }
            case .s32le:
                for i in 0..<n { out[i] = Float(Int32(littleEndian: raw.loadUnaligned(fromByteOffset: 4 * i, as: Int32.self))) / 2_147_483_648 }
            case .f32le:
                for i in 0..<n {
                    out[i] = Float(bitPattern: UInt32(littleEndian: raw.loadUnaligned(fromByteOffset: 4 * i, as: UInt32.self)))
                }
            }
        }
        return out
    }
}

/// Parses a RIFF/WAVE header incrementally: it asks for more bytes until it has the `fmt ` chunk and
/// the start of the `data` chunk.
struct WAVHeaderParser {
    enum Step {
        case needMore(Int)
        case done(format: PCMStreamReader.SampleFormat, rate: Double, channels: Int, dataOffset: Int, dataSize: Int?)
    }

    /// The data length sox writes when its output is a pipe (about 2 GiB).
    static let soxPlaceholder = 0x7FFF_F000

    /// Chunks that writers put after the audio data (metadata, cue points, padding).
    static let trailingChunkIDs: Set<String> = [
        "LIST", "id3 ", "ID3 ", "cue ", "smpl", "inst", "bext", "iXML", "JUNK", "junk", "PAD ", "fact",
        "acid", "cart", "DISP", "labl", "note", "plst", "umid", "_PMX", "afsp", "strc", "wavl", "slnt",
    ]

    /// Whether `b` starts with a RIFF chunk header that usually follows the audio data.
    static func isTrailingChunk(_ b: [UInt8]) -> Bool {
        b.count >= 8 && trailingChunkIDs.contains(String(decoding: b[0..<4], as: UTF8.self))
    }

    private var fmt: (format: PCMStreamReader.SampleFormat, rate: Double, channels: Int)?
    private var ds64DataSize: Int?

    mutating func parse(_ b: [UInt8]) throws -> Step {
        guard b.count >= 12 else { return .needMore(12 - b.count) }
        let magic = String(decoding: b[0..<4], as: UTF8.self)
        guard magic == "RIFF" || magic == "RF64", String(decoding: b[8..<12], as: UTF8.self) == "WAVE" else {
            throw AudioError(.unsupportedFormat,
                             "the input is not a WAV stream (give raw PCM with --raw FORMAT and its rate and channels)")
        }
        var offset = 12
        while true {
            guard b.count >= offset + 8 else { return .needMore(offset + 8 - b.count) }
            let id = String(decoding: b[offset..<(offset + 4)], as: UTF8.self)
            let size = Int(UInt32(b[offset + 4]) | UInt32(b[offset + 5]) << 8 | UInt32(b[offset + 6]) << 16 | UInt32(b[offset + 7]) << 24)
            let body = offset + 8
            if id == "data" {
                guard let fmt else { throw AudioError(.corrupt, "WAV stream has no fmt chunk before its data") }
                // Streaming writers that say outright they do not know the length: 0 or 0xFFFFFFFF (ffmpeg
                // to a pipe). An RF64 file keeps the length in its ds64 chunk (zero when streamed).
                var stated: Int? = size != 0 && size != 0xFFFF_FFFF ? size : nil
                if magic == "RF64" { stated = size == 0xFFFF_FFFF ? ds64DataSize : nil }
                return .done(format: fmt.format, rate: fmt.rate, channels: fmt.channels, dataOffset: body,
                             dataSize: stated)
            }
            guard size < 1 << 20 else { throw AudioError(.corrupt, "WAV chunk '\(id)' is implausibly large (\(size) bytes)") }
            let end = body + size + (size & 1)
            guard b.count >= end else { return .needMore(end - b.count) }
            if id == "ds64", magic == "RF64", size >= 16 {
                var v: UInt64 = 0
                for i in 0..<8 { v |= UInt64(b[body + 8 + i]) << (8 * i) }
                ds64DataSize = v > 0 && v <= UInt64(Int.max) ? Int(v) : nil
            }
            if id == "fmt " {
                guard size >= 16 else { throw AudioError(.corrupt, "WAV fmt chunk is too short") }
                func u16(_ o: Int) -> Int { Int(b[body + o]) | Int(b[body + o + 1]) << 8 }
                var tag = u16(0)
                let channels = u16(2)
                let rate = Double(Int(b[body + 4]) | Int(b[body + 5]) << 8 | Int(b[body + 6]) << 16 | Int(b[body + 7]) << 24)
                let bits = u16(14)
                if tag == 0xFFFE, size >= 26 { tag = u16(24) }   // WAVE_FORMAT_EXTENSIBLE: the subformat's tag
                let format: PCMStreamReader.SampleFormat
                switch (tag, bits) {
                case (1, 16): format = .s16le
                case (1, 24): format = .s24le
                case (1, 32): format = .s32le
                case (3, 32): format = .f32le
                default:
                    throw AudioError(.unsupportedFormat,
                                     "WAV stream encoding \(tag) with \(bits)-bit samples is not supported (use 16/24/32-bit integer or 32-bit float PCM)")
                }
                guard channels >= 1, channels <= 32, rate >= 1000, rate <= 384_000 else {
                    throw AudioError(.invalidFormat, "WAV stream has \(channels) channels at \(Int(rate)) Hz")
                }
                fmt = (format, rate, channels)
            }
            offset = end
        }
    }
}
