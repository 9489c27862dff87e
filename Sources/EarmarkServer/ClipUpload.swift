import EarmarkKit
import Foundation
import Hummingbird

/// Receives a request body into a file, never holding it whole in memory, and refuses one over the limit or
/// one that stalls.
struct ClipUpload {
    /// The private folder uploads are written to.
    let folder: String
    let limit: Int
    /// Longest pause between two pieces of the body (`--upload-timeout`).
    var stallTimeout: Duration = .seconds(30)
    let fileIO = FileIO()

    /// Makes a private folder (mode 0700) inside `parent`.
    static func makeFolder(in parent: String) throws -> String {
        let path = URL(fileURLWithPath: parent).appendingPathComponent("earmark-serve-\(getpid())-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        return path
    }

    /// Streams the body of `request` into a new file of the folder and returns its path.
    /// - Throws: ``APIError`` 413 when the body (or its announced length) is over the limit, 400 when it is empty,
    ///   408 when no byte of it arrived for ``stallTimeout`` (the partial file is deleted in every case).
    /// - Parameter expecting: what the body should be, for the message of an empty one.
    func receive(_ request: Request, context: some RequestContext,
                 expecting: String = "the clip's bytes (an audio file or a .earsig)") async throws -> String {
        if let announced = request.headers[.contentLength].flatMap({ Int($0) }), announced > limit {
            throw APIError.bodyTooLarge(limit: limit)
        }
        let path = folder + "/" + UUID().uuidString
        let counted = CountingBody(base: request.body, limit: limit)
        let (fileIO, stallTimeout) = (fileIO, stallTimeout)
        do {
            // The body is written by one task while another watches the time since its last piece; a stall ends
            // the write (the body's sequence ends when its reader is cancelled).
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await fileIO.writeFile(contents: counted, path: path, context: context) }
                group.addTask { try await counted.watch(stallTimeout: stallTimeout) }
                try await group.next()
                group.cancelAll()
            }
        } catch {
            try? FileManager.default.removeItem(atPath: path)
            if counted.stalled {
                throw APIError(.requestTimeout, "upload_timeout",
                               "no part of the body arrived for \(stallTimeout) (--upload-timeout); the upload was dropped",
                               headers: [.connection: "close"])
            }
            // The file system may wrap the error the body threw: ask the counter.
            if counted.exceeded { throw APIError.bodyTooLarge(limit: limit) }
            throw APIError(.badRequest, "upload_failed", "the body could not be received: \(error)")
        }
        guard counted.received > 0 else {
            try? FileManager.default.removeItem(atPath: path)
            throw APIError(.badRequest, "empty_body", "the body is empty; send \(expecting)")
        }
        return path
    }
}

/// The request body, counted as it passes; iterating past `limit` bytes throws.
struct CountingBody: AsyncSequence, Sendable {
    typealias Element = ByteBuffer
    let base: RequestBody
    let limit: Int
    private let total = LockedValue(Progress())

    struct Progress {
        var bytes = 0
        var exceeded = false
        var stalled = false
        /// When the reader began waiting for the next piece from the network; nil while it writes one to disk.
        var waitingSince: ContinuousClock.Instant?
    }

    init(base: RequestBody, limit: Int) {
        self.base = base
        self.limit = limit
    }

    var received: Int { total.withLock { $0.bytes } }
    var exceeded: Bool { total.withLock { $0.exceeded } }
    /// Whether ``watch(stallTimeout:)`` found the body stalled.
    var stalled: Bool { total.withLock { $0.stalled } }

    /// Returns never; throws once the reader has waited `stallTimeout` for the next piece of the body (or when
    /// cancelled). Time spent writing pieces to disk does not count.
    func watch(stallTimeout: Duration) async throws {
        let tick = Swift.min(stallTimeout / 4, .seconds(1))
        while true {
            try await Task.sleep(for: tick)
            let stalled = total.withLock { t in
                if let since = t.waitingSince, ContinuousClock.now - since >= stallTimeout { t.stalled = true }
                return t.stalled
            }
            if stalled { throw CancellationError() }
        }
    }

    struct AsyncIterator: AsyncIteratorProtocol {
        var base: RequestBody.AsyncIterator
        let limit: Int
        let total: LockedValue<Progress>

        mutating func next() async throws -> ByteBuffer? {
            total.withLock { $0.waitingSince = .now }
            let piece: ByteBuffer?
            do {
                piece = try await base.next()
            } catch {
                total.withLock { $0.waitingSince = nil }
                throw error
            }
            total.withLock { $0.waitingSince = nil }
            guard let buffer = piece else { return nil }
            let over = total.withLock { t in
                t.bytes += buffer.readableBytes
                if t.bytes > limit { t.exceeded = true }
                return t.exceeded
            }
            if over { throw APIError.bodyTooLarge(limit: limit) }
            return buffer
        }
    }

    func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(base: base.makeAsyncIterator(), limit: limit, total: total)
    }
}

/// Telling the format of an uploaded clip where its bytes alone do not.
enum ClipFormat {
    /// The first bytes of `path` (empty when it cannot be read).
    static func head(of path: String, count: Int = 16) -> [UInt8] {
        guard let handle = FileHandle(forReadingAtPath: path) else { return [] }
        defer { try? handle.close() }
        return [UInt8]((try? handle.read(upToCount: count)) ?? Data())
    }

    /// The file extension that makes the decoders read the clip right, or nil when its bytes suffice.
    ///
    /// A `.earsig` signature is known by its magic; an MP3 by an ID3 tag or an MPEG frame header; otherwise
    /// the extension of `name`, then `contentType`, decide. libsndfile and ffmpeg recognise the rest by content.
    /// Gives the upload at `file` the extension of its format where decoders need it (they choose by content,
    /// but an MP3 without an ID3 tag and a `.earsig` are known by their names); returns its path now.
    static func named(_ file: String, name: String, contentType: String?) throws -> String {
        guard let ext = fileExtension(head: head(of: file), name: name, contentType: contentType) else { return file }
        try FileManager.default.moveItem(atPath: file, toPath: file + "." + ext)
        return file + "." + ext
    }

    static func fileExtension(head: [UInt8], name: String, contentType: String?) -> String? {
        if head.starts(with: Signature.fileMagic) { return "earsig" }
        if startsLikeMPEGAudio(head) { return "mp3" }
        let ext = URL(fileURLWithPath: name).pathExtension.lowercased()
        if audioFileExtensions.contains(ext) { return ext }
        return mediaTypes[mediaType(contentType) ?? ""]
    }

    /// The media type of a Content-Type header (`audio/wav; rate=…` → `audio/wav`), lower-cased; "" for an empty header, nil without one.
    static func mediaType(_ contentType: String?) -> String? {
        contentType.map { $0.split(separator: ";").first.map { $0.trimmingCharacters(in: .whitespaces).lowercased() } ?? "" }
    }

    /// Media types a client may name a clip by, with the extension each stands for.
    static let mediaTypes: [String: String] = [
        "audio/wav": "wav", "audio/x-wav": "wav", "audio/wave": "wav", "audio/vnd.wave": "wav",
        "audio/flac": "flac", "audio/x-flac": "flac", "audio/ogg": "ogg", "audio/opus": "opus",
        "audio/mpeg": "mp3", "audio/mp3": "mp3", "audio/aiff": "aiff", "audio/x-aiff": "aiff",
        "audio/mp4": "m4a", "audio/aac": "aac", "audio/webm": "webm", "video/mp4": "mp4", "video/webm": "webm",
        "application/vnd.earmark.earsig": "earsig",
    ]
}
