import Foundation

/// The fingerprint of a stretch of audio: its spectral-peak constellation and duration.
///
/// Reference and query landmarks (hash, time) are both derived from the same peaks: the
/// reference keeps the most salient ones, the query a denser superset (see ``Landmarks``).
public struct Signature: Sendable, Equatable {
    /// ``SignatureConfiguration/version`` of the algorithm that made it.
    public var configurationVersion: UInt16
    /// Seconds of audio the signature covers.
    public var duration: Double
    /// Peaks ordered by frame.
    public var peaks: [Peak]

    public init(configurationVersion: UInt16, duration: Double, peaks: [Peak]) {
        self.configurationVersion = configurationVersion
        self.duration = duration
        self.peaks = peaks
    }

    /// Throws when the signature cannot be matched: made by another algorithm, out of shape (see
    /// ``validateStructure(configuration:)``), too short, or silent.
    public func validateForMatching(configuration: SignatureConfiguration = .current) throws {
        guard configurationVersion == configuration.version
                || SignatureConfiguration.released(version: configurationVersion)?.hasSamePeaks(as: configuration) == true else {
            throw SignatureError(.versionMismatch,
                                 "signature made by algorithm version \(configurationVersion); this build uses \(configuration.version)")
        }
        try validateStructure(configuration: configuration)
        guard duration >= 1.0 else {
            throw SignatureError(.signatureDurationInvalid, "too short: \(Signature.seconds(duration)) of audio; at least 1 s is needed")
        }
        let referencePeaks = peaks.lazy.filter { Int($0.rank) < configuration.referenceRankLimit }.count
        guard referencePeaks >= 8 else {
            throw SignatureError(.signatureInvalid, "no usable sound in the audio (silence or near-silence)")
        }
    }

    /// The longest signature accepted: 24 hours. It bounds every allocation derived from a signature
    /// (frame-indexed tables, landmarks), which may come from an untrusted file.
    public static let maximumDuration: Double = 24 * 3600

    /// Checks every field against what `configuration`'s generator can produce, so that no peak can
    /// index outside the band or the duration and no table sized from it can be huge: duration finite
    /// and at most ``maximumDuration``; peaks ordered by frame, each frame within the duration; bins in
    /// `minBin..<maxBin`; rank below `deepRankLimit`; level finite, at or above `levelFloor` plus the bin's tilt
    /// (``SignatureConfiguration/tiltDecibels(bin:)``) and below 100 dB;
    /// no frame holding more peaks than the peak picker's neighbourhood allows, and no stretch of
    /// `rankRadius + 1` frames more than ``maximumPeaksPerRankWindow(configuration:)``.
    /// Throws ``SignatureError/Code/invalidFile`` naming the first offending field.
    public func validateStructure(configuration: SignatureConfiguration = .current) throws {
        func bad(_ why: String) -> SignatureError { SignatureError(.invalidFile, "not a valid signature file: \(why)") }
        guard duration.isFinite, duration >= 0, duration <= Signature.maximumDuration else {
            throw bad("duration \(duration) s is outside 0…\(Int(Signature.maximumDuration)) s")
        }
        let lastFrame = configuration.lastFrame(duration: duration)
        // The peak picker keeps one maximum per ±peakBinRadius bins of a frame (ties aside).
        let perFrame = (configuration.maxBin - configuration.minBin) / (configuration.peakBinRadius + 1) + 1
        let window = configuration.rankRadius, perWindow = Signature.maximumPeaksPerRankWindow(configuration: configuration)
        var previous = -1, inFrame = 0, windowStart = 0
        for (i, p) in peaks.enumerated() {
            let frame = Int(p.frame)
            guard frame >= previous else { throw bad("peak \(i) is out of frame order (frame \(frame) after \(previous))") }
            guard frame <= lastFrame else { throw bad("peak \(i) at frame \(frame) lies beyond the \(Signature.seconds(duration)) the signature covers") }
            inFrame = frame == previous ? inFrame + 1 : 1
            guard inFrame <= perFrame else { throw bad("frame \(frame) holds more than \(perFrame) peaks") }
            while Int(peaks[windowStart].frame) < frame - window { windowStart += 1 }
            guard i - windowStart < perWindow else {
                throw bad("more than \(perWindow) peaks within \(window + 1) frames of frame \(frame)")
            }
            previous = frame
            guard Int(p.bin) >= configuration.minBin, Int(p.bin) < configuration.maxBin else {
                throw bad("peak \(i) has bin \(p.bin), outside \(configuration.minBin)..<\(configuration.maxBin)")
            }
            guard Int(p.rank) < configuration.deepRankLimit else {
                throw bad("peak \(i) has rank \(p.rank), not below \(configuration.deepRankLimit)")
            }
            // Levels are of the tilted spectrum (see SignatureConfiguration.tiltDecibels); 0.01 dB covers rounding.
            let lowest = configuration.levelFloor + Float(configuration.tiltDecibels(bin: Int(p.bin))) - 0.01
            guard p.level.isFinite, p.level >= lowest, p.level < 100 else {
                throw bad("peak \(i) has level \(p.level) dB, outside \(lowest)…100 for bin \(p.bin)")
            }
        }
    }

    /// `2.50 s`, `0.998 s`: seconds as a person reads them; digits are cut, not rounded, so a value just
    /// under a limit never reads as the limit.
    static func seconds(_ s: Double) -> String {
        s >= 1 || s == 0 ? String(format: "%.2f s", (s * 100).rounded(.down) / 100)
                         : String(format: "%.3f s", (s * 1000).rounded(.down) / 1000)
    }

    /// An identity of the signature's content (algorithm version and peaks, not the duration's last
    /// digits): `sig-` and 32 hex digits. Catalogs store it as a track's content hash when the track
    /// was added from a signature file, where no decoded audio exists to digest.
    public var contentIdentity: String {
        var a: UInt64 = 0xCBF2_9CE4_8422_2325, b: UInt64 = 0x6C62_272E_07BB_0142
        func mix(_ v: UInt64) {
            for k in 0..<8 {
                let byte = (v >> (8 * UInt64(k))) & 0xFF
                a = (a ^ byte) &* 0x0000_0100_0000_01B3
                b = (b ^ byte) &* 0x0000_0100_0000_01B3
                b ^= b >> 29
            }
        }
        mix(UInt64(configurationVersion))
        for p in peaks {
            mix(UInt64(p.frame) << 32 | UInt64(p.bin) << 16 | UInt64(p.rank))
            mix(UInt64(p.level.bitPattern))
        }
        return "sig-" + String(format: "%016llx%016llx", a, b)
    }
}

extension Signature {
    /// The stretch of this signature from frame `frames.lowerBound` (up to, not including, `frames.upperBound`),
    /// as a signature of its own: peaks shifted to start at frame 0, duration the stretch's (cut at the end).
    /// Peaks must be in frame order, as generated.
    public func window(frames: Range<UInt32>, configuration: SignatureConfiguration = .current) -> Signature {
        func firstIndex(atOrAfter frame: UInt32) -> Int {
            var lo = 0, hi = peaks.count
            while lo < hi {
                let mid = (lo + hi) / 2
                if peaks[mid].frame < frame { lo = mid + 1 } else { hi = mid }
            }
            return lo
        }
        let slice = peaks[firstIndex(atOrAfter: frames.lowerBound)..<firstIndex(atOrAfter: frames.upperBound)].map {
            Peak(frame: $0.frame - frames.lowerBound, bin: $0.bin, rank: $0.rank, level: $0.level)
        }
        let fd = configuration.frameDuration
        let start = Double(frames.lowerBound) * fd
        return Signature(configurationVersion: configurationVersion,
                         duration: max(0, min(duration, Double(frames.upperBound) * fd) - start), peaks: slice)
    }
}

// MARK: - File format

/// Binary signature file format, version 1 (little-endian):
///
/// | bytes | field |
/// |---|---|
/// | 6 | magic `EARSIG` |
/// | 2 | file format version (1) |
/// | 2 | signature algorithm version |
/// | 2 | reserved (0) |
/// | 8 | duration in seconds (IEEE-754 double) |
/// | 4 | peak count N |
/// | 12 × N | peaks: frame (u32), bin (u16), rank (u16), level (f32) |
/// | 4 | FNV-1a 32-bit checksum of every byte before it |
extension Signature {
    public static let fileMagic = Array("EARSIG".utf8)
    public static let fileFormatVersion: UInt16 = 1

    /// Encodes the signature in the file format above.
    public func dataRepresentation() -> Data {
        var out = Data()
        out.reserveCapacity(28 + peaks.count * 12)
        out.append(contentsOf: Signature.fileMagic)
        out.appendLE(Signature.fileFormatVersion)
        out.appendLE(configurationVersion)
        out.appendLE(UInt16(0))
        out.appendLE(duration.bitPattern)
        out.appendLE(UInt32(peaks.count))
        for p in peaks {
            out.appendLE(p.frame)
            out.appendLE(p.bin)
            out.appendLE(p.rank)
            out.appendLE(p.level.bitPattern)
        }
        out.appendLE(fnv1a32(out))
        return out
    }

    /// Decodes a signature file's bytes; throws ``SignatureError/Code/invalidFile`` on any damage or any
    /// field its algorithm's generator could not have written (see ``validateStructure(configuration:)``),
    /// and ``SignatureError/Code/versionMismatch`` for an algorithm version this build does not know.
    public init(dataRepresentation data: Data) throws {
        func bad(_ why: String) -> SignatureError { SignatureError(.invalidFile, "not a valid signature file: \(why)") }
        let limit = Signature.maximumFileBytes()
        guard data.count <= limit else { throw bad("\(data.count) bytes, more than a \(Int(Signature.maximumDuration / 3600))-hour signature can hold (\(limit))") }
        let bytes = [UInt8](data)
        guard bytes.count >= 28, Array(bytes[0..<6]) == Signature.fileMagic else { throw bad("missing EARSIG header") }
        var r = ByteReader(bytes: bytes, offset: 6)
        let format: UInt16 = r.read()
        guard format == Signature.fileFormatVersion else { throw bad("file format version \(format) is not supported") }
        let version: UInt16 = r.read()
        let _: UInt16 = r.read()
        let duration = Double(bitPattern: r.read())
        let n = Int(r.read() as UInt32)
        guard bytes.count == 24 + n * 12 + 4 else { throw bad("truncated or extended (\(bytes.count) bytes for \(n) peaks)") }
        let stored = UInt32(littleEndian: bytes[(bytes.count - 4)...].withUnsafeBytes { $0.loadUnaligned(as: UInt32.self) })
        guard stored == fnv1a32(Data(bytes[0..<(bytes.count - 4)])) else { throw bad("checksum mismatch (damaged)") }
        guard let configuration = SignatureConfiguration.released(version: version) else {
            throw SignatureError(.versionMismatch, "signature made by algorithm version \(version); this build reads \(SignatureConfiguration.current.version)")
        }
        var peaks: [Peak] = []
        peaks.reserveCapacity(n)
        for _ in 0..<n {
            let frame: UInt32 = r.read()
            let bin: UInt16 = r.read()
            let rank: UInt16 = r.read()
            let level = Float(bitPattern: r.read())
            peaks.append(Peak(frame: frame, bin: bin, rank: rank, level: level))
        }
        self.init(configurationVersion: version, duration: duration, peaks: peaks)
        try validateStructure(configuration: configuration)
    }

    /// At most this many peaks lie within any `rankRadius + 1` frames: a peak is kept only while fewer than
    /// `deepRankLimit` peaks within ±`rankRadius` frames are stronger, so equal levels aside there are at
    /// most `deepRankLimit`; twice that leaves room for ties.
    public static func maximumPeaksPerRankWindow(configuration: SignatureConfiguration = .current) -> Int {
        2 * configuration.deepRankLimit
    }

    /// The largest signature file accepted, from ``maximumDuration`` and
    /// ``maximumPeaksPerRankWindow(configuration:)`` (12 bytes a peak); files beyond it are refused unread.
    public static func maximumFileBytes(configuration: SignatureConfiguration = .current) -> Int {
        let frames = configuration.lastFrame(duration: maximumDuration) + 1
        let windows = frames / (configuration.rankRadius + 1) + 1
        return 28 + 12 * windows * maximumPeaksPerRankWindow(configuration: configuration)
    }
}

struct ByteReader {
    let bytes: [UInt8]
    var offset: Int
    mutating func read<T: FixedWidthInteger>() -> T {
        let size = MemoryLayout<T>.size
        var v: T = 0
        for i in 0..<size { v |= T(bytes[offset + i]) << (8 * i) }
        offset += size
        return v
    }
}

extension Data {
    mutating func appendLE<T: FixedWidthInteger>(_ v: T) {
        Swift.withUnsafeBytes(of: v.littleEndian) { append(contentsOf: $0) }
    }
}

func fnv1a32(_ data: Data) -> UInt32 {
    var h: UInt32 = 0x811C_9DC5
    for b in data { h = (h ^ UInt32(b)) &* 0x0100_0193 }
    return h
}
