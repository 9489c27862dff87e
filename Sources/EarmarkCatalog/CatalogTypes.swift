import Foundation

/// An error raised by the catalog store. The catalog is left as it was before the failing call.
public struct CatalogError: Error, CustomStringConvertible, Sendable, Equatable {
    public enum Code: String, Sendable {
        /// No catalog at the path (and creating one was not asked for).
        case notFound
        /// Another process holds the write lock longer than the busy timeout.
        case locked
        /// The file or its folder is not writable.
        case readOnly
        /// The file is not an Earmark catalog or is damaged.
        case damaged
        /// The catalog was built with another signature algorithm or a newer schema.
        case versionMismatch
        /// No track with the given id.
        case noSuchTrack
        /// Invalid argument (metadata that is not a JSON object, …).
        case invalidArgument
        /// Reading or writing failed (a full disk, an I/O error, an error the database server reports).
        case ioError
        /// The catalog's database server cannot be reached, or the connection to it was lost: try again later,
        /// or another server (a replica).
        case unavailable
    }
    public var code: Code
    public var message: String
    public var path: String?
    public init(_ code: Code, _ message: String, path: String? = nil) {
        self.code = code
        self.message = message
        self.path = path
    }
    public var description: String { path.map { "\($0): \(message)" } ?? message }
}

/// A JSON value, for free-form track metadata.
public enum JSONValue: Sendable, Equatable, Codable {
    case string(String), number(Double), bool(Bool), null
    case array([JSONValue]), object([String: JSONValue])

    public init(from decoder: any Decoder) throws {
        let c = try decoder.singleValueContainer()
        if c.decodeNil() { self = .null }
        else if let b = try? c.decode(Bool.self) { self = .bool(b) }
        else if let n = try? c.decode(Double.self) { self = .number(n) }
        else if let s = try? c.decode(String.self) { self = .string(s) }
        else if let a = try? c.decode([JSONValue].self) { self = .array(a) }
        else { self = .object(try c.decode([String: JSONValue].self)) }
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        switch self {
        case .string(let s): try c.encode(s)
        case .number(let n): try c.encode(n)
        case .bool(let b): try c.encode(b)
        case .null: try c.encodeNil()
        case .array(let a): try c.encode(a)
        case .object(let o): try c.encode(o)
        }
    }
}

/// A reference track in a catalog.
public struct Track: Sendable, Equatable, Codable {
    /// Stable id: assigned once, never reused after removal.
    public var id: Int64
    public var title: String?
    public var artist: String?
    public var album: String?
    /// Free-form metadata (a JSON object).
    public var metadata: [String: JSONValue]
    /// Seconds of audio.
    public var duration: Double
    /// The file the track was added from.
    public var sourcePath: String?
    /// 128-bit digest (32 hex digits) of the decoded 44.1 kHz mono audio at 16 bits; identical audio is stored once.
    /// A track added from a `.earsig` signature file has its signature's identity instead (`sig-` and 32 hex
    /// digits, ``Signature/contentIdentity``): identical signatures are stored once.
    public var contentHash: String
    /// Landmark postings stored for the track.
    public var landmarkCount: Int
    /// When it was added (ISO 8601, UTC).
    public var addedAt: String

    /// For the package's other catalog stores.
    package init(id: Int64, title: String?, artist: String?, album: String?, metadata: [String: JSONValue], duration: Double,
                 sourcePath: String?, contentHash: String, landmarkCount: Int, addedAt: String) {
        self.id = id
        self.title = title
        self.artist = artist
        self.album = album
        self.metadata = metadata
        self.duration = duration
        self.sourcePath = sourcePath
        self.contentHash = contentHash
        self.landmarkCount = landmarkCount
        self.addedAt = addedAt
    }
}

/// What is needed to add a track.
public struct NewTrack: Sendable {
    public var title: String?
    public var artist: String?
    public var album: String?
    public var metadata: [String: JSONValue]
    public var duration: Double
    public var sourcePath: String?
    public var sourceSize: Int64?
    public var sourceModified: Double?
    public var contentHash: String

    public init(title: String? = nil, artist: String? = nil, album: String? = nil, metadata: [String: JSONValue] = [:],
                duration: Double, sourcePath: String? = nil, sourceSize: Int64? = nil, sourceModified: Double? = nil,
                contentHash: String) {
        self.title = title
        self.artist = artist
        self.album = album
        self.metadata = metadata
        self.duration = duration
        self.sourcePath = sourcePath
        self.sourceSize = sourceSize
        self.sourceModified = sourceModified
        self.contentHash = contentHash
    }
}

/// Totals of a catalog.
public struct CatalogStats: Sendable, Codable, Equatable {
    public var path: String
    public var schemaVersion: Int
    public var signatureVersion: Int
    public var trackCount: Int
    public var totalDuration: Double
    public var landmarkCount: Int
    public var fileBytes: Int64
    /// File bytes per hour of indexed audio.
    public var bytesPerHour: Double

    /// For the package's other catalog stores.
    package init(path: String, schemaVersion: Int, signatureVersion: Int, trackCount: Int, totalDuration: Double, landmarkCount: Int,
                 fileBytes: Int64, bytesPerHour: Double) {
        self.path = path
        self.schemaVersion = schemaVersion
        self.signatureVersion = signatureVersion
        self.trackCount = trackCount
        self.totalDuration = totalDuration
        self.landmarkCount = landmarkCount
        self.fileBytes = fileBytes
        self.bytesPerHour = bytesPerHour
    }
}

/// One stored analysis result of a track: a kind ("loudness", …), the version of the analysis that made
/// it, and its JSON (the shape the analysis documents).
public struct TrackAnalysis: Sendable, Equatable {
    public var kind: String
    public var version: Int
    public var json: Data
    public init(kind: String, version: Int, json: Data) {
        self.kind = kind
        self.version = version
        self.json = json
    }
}
