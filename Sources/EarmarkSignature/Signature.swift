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

    /// Throws when the signature cannot be matched: made by another algorithm, too short, or silent.
    public func validateForMatching(configuration: SignatureConfiguration = .current) throws {
        guard configurationVersion == configuration.version else {
            throw SignatureError(.versionMismatch,
                                 "signature made by algorithm version \(configurationVersion); this build uses \(configuration.version)")
        }
        guard duration >= 1.0 else {
            throw SignatureError(.signatureDurationInvalid, String(format: "audio too short to match (%.2f s; at least 1 s is needed)", duration))
        }
        let referencePeaks = peaks.lazy.filter { Int($0.rank) < configuration.referenceRankLimit }.count
        guard referencePeaks >= 8 else {
            throw SignatureError(.signatureInvalid, "no usable sound in the audio (silence or near-silence)")
        }
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

    /// Decodes a signature file's bytes; throws ``SignatureError/Code/invalidFile`` on any damage.
    public init(dataRepresentation data: Data) throws {
        let bytes = [UInt8](data)
        func bad(_ why: String) -> SignatureError { SignatureError(.invalidFile, "not a valid signature file: \(why)") }
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
        guard duration.isFinite, duration >= 0 else { throw bad("invalid duration") }
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
