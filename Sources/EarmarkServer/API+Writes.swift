import EarmarkKit
import Foundation
import HTTPTypes
import Hummingbird

/// The routes that change the catalog (`POST /v1/tracks`, `PATCH` and `DELETE /v1/tracks/{id}`,
/// `POST /v1/catalog/import`, through ``CatalogWriter``), the export and `/metrics`.
extension API {
    static let writeRoutes: [(method: HTTPRequest.Method, path: String)] = [
        (.post, "/v1/tracks"),
        (.patch, "/v1/tracks/{id}"),
        (.delete, "/v1/tracks/{id}"),
        (.get, "/v1/catalog/export"),
        (.post, "/v1/catalog/import"),
        (.get, "/metrics"),
    ]

    /// The answer of one of ``writeRoutes``, or nil when `method` and `path` are not one of them.
    func respondWrites(method: HTTPRequest.Method, path: String, request: Request,
                       context: some RequestContext) async throws -> Response? {
        switch (method, path) {
        case (.post, "/v1/tracks"): return try await addTrack(request, context: context)
        case (.patch, "/v1/tracks/{id}"): return try await updateTrack(request, context: context)
        case (.delete, "/v1/tracks/{id}"): return try await removeTrack(request, context: context)
        case (.get, "/v1/catalog/export"): return try await export(request, context: context)
        case (.post, "/v1/catalog/import"): return try await importCatalog(request, context: context)
        case (.get, "/metrics"): return try await metricsText(request)
        default: return nil
        }
    }

    /// The writer; nil only without a write token, when ``AccessControl`` refuses every write before this.
    private func requireWriter() throws -> CatalogWriter {
        guard let writer else { throw APIError(.forbidden, "writes_disabled", "this server refuses writes: it was started without --token-file") }
        return writer
    }

    /// The `{id}` of a track route.
    static func trackID(_ context: some RequestContext) throws -> Int64 {
        let text = context.parameters.get("id") ?? ""
        guard let id = Int64(text), id > 0 else {
            throw APIError.invalidParameter("id", "\"\(text.prefix(40))\" is not a track id (a positive integer)")
        }
        return id
    }

    // MARK: POST /v1/tracks

    /// `POST /v1/tracks?title&artist&album&metadata&name&analyze&transcribe`: the body is an audio file, added as
    /// `earmark catalog add FILE --title … [--analyze [--no-transcribe]]` adds it, with `upload:NAME` as its source path.
    /// 201 with the track as `GET /v1/tracks/{id}` answers it.
    private func addTrack(_ request: Request, context: some RequestContext) async throws -> Response {
        let writer = try requireWriter()
        let query = try QueryParameters(request.uri, allowed: ["title", "artist", "album", "metadata", "name", "analyze", "transcribe"])
        let sourceName = try query.string("name", maxLength: 255) ?? ""
        let name = sourceName.isEmpty ? "upload" : sourceName
        var description = TrackDescription(title: try query.string("title"), artist: try query.string("artist"),
                                           album: try query.string("album"))
        if description.title == nil { description.title = PathName.stem(name) }
        if let text = try query.string("metadata", maxLength: 65_536) {
            guard let object = try? JSONDecoder().decode([String: JSONValue].self, from: Data(text.utf8)) else {
                throw APIError.invalidParameter("metadata", "not a JSON object, e.g. {\"isrc\":\"GBXXX0000001\"}")
            }
            description.metadata = object
        }
        let analyze = try query.bool("analyze", default: false)
        let transcribe = try query.bool("transcribe", default: true)
        if let media = ClipFormat.mediaType(request.headers[.contentType]) {
            // application/x-www-form-urlencoded is what `curl --data-binary` sends unless told otherwise: no type at all.
            guard media.hasPrefix("audio/") || media.hasPrefix("video/") || media == "application/octet-stream"
                || media == "application/x-www-form-urlencoded" else {
                throw APIError(.unsupportedMediaType, "unsupported_media_type",
                               "Content-Type \(media) is not audio; send the file's bytes as audio/* or application/octet-stream")
            }
        }
        guard adds.tryEnter() else {
            throw APIError.unavailable("busy", "\(adds.capacity) additions are running or waiting (--max-concurrent); try again shortly")
        }
        var handedOver = false
        defer { if !handedOver { adds.leave() } }
        let uploaded = try await upload.receive(request, context: context)
        let received: String
        do {
            received = try ClipFormat.named(uploaded, name: name, contentType: request.headers[.contentType])
        } catch {
            try? FileManager.default.removeItem(atPath: uploaded)
            throw error
        }
        // Not audio, or damaged where it starts: the same answers as /v1/match, before the writer is busied.
        do {
            try await workers.run { _ in
                let reader = try AudioFileReader(path: received)
                _ = try reader.next()
            }
        } catch {
            try? FileManager.default.removeItem(atPath: received)
            throw APIError.from(error, path: received, name: name)
        }
        handedOver = true
        let (adds, fields, source) = (adds, description, "upload:" + sourceName)
        let (outcome, info) = try await Deadline.run(limit: matchTimeout, "adding the track") {
            defer { adds.leave() }
            return try await writer.add(file: received, source: source, description: fields, analyze: analyze, transcribe: transcribe)
        }
        switch outcome.status {
        case .added:
            guard let info, let track = outcome.track else { throw APIError(.internalServerError, "internal_error", "the track was added but cannot be read back") }
            var response = JSONBody.response(data: info, status: .created)
            response.headers[HTTPField.Name.location] = "/v1/tracks/\(track.id)"
            return response
        case .duplicate, .moved, .unchanged:
            let id = outcome.track.map { "#\($0.id)" } ?? "a stored track"
            throw APIError(.conflict, "duplicate_audio", "the catalog already holds this audio as track \(id)",
                           headers: outcome.track.map { HTTPFields([HTTPField(name: .location, value: "/v1/tracks/\($0.id)")]) } ?? [:])
        case .failed:
            let message = (outcome.error ?? "the file could not be added").replacingOccurrences(of: received, with: name)
            throw APIError(.unprocessableContent, "add_failed", message)
        }
    }

    // MARK: PATCH and DELETE /v1/tracks/{id}

    /// The body of `PATCH /v1/tracks/{id}`: fields left out are kept; a metadata key set to null is deleted.
    struct TrackPatch: Decodable {
        var title: String?
        var artist: String?
        var album: String?
        var metadata: [String: JSONValue]?

        enum CodingKeys: String, CodingKey, CaseIterable { case title, artist, album, metadata }

        init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: AnyKey.self)
            let known = Set(CodingKeys.allCases.map(\.rawValue))
            if let unknown = c.allKeys.map(\.stringValue).sorted().first(where: { !known.contains($0) }) {
                throw APIError(.badRequest, "invalid_body", "\(unknown): no such field (the fields are title, artist, album and metadata)")
            }
            func text(_ key: CodingKeys) throws -> String? {
                let k = AnyKey(key.rawValue)
                guard c.contains(k) else { return nil }
                guard let value = try? c.decode(String.self, forKey: k) else {
                    throw APIError(.badRequest, "invalid_body", "\(key.rawValue): must be a string (a field cannot be cleared)")
                }
                return value
            }
            title = try text(.title)
            artist = try text(.artist)
            album = try text(.album)
            if c.contains(AnyKey("metadata")) {
                guard let m = try? c.decode([String: JSONValue].self, forKey: AnyKey("metadata")) else {
                    throw APIError(.badRequest, "invalid_body", "metadata: must be an object of keys to values (null deletes a key)")
                }
                metadata = m
            }
        }

        struct AnyKey: CodingKey {
            var stringValue: String
            var intValue: Int? { nil }
            init(_ s: String) { stringValue = s }
            init?(stringValue: String) { self.stringValue = stringValue }
            init?(intValue: Int) { nil }
        }
    }

    /// `PATCH /v1/tracks/{id}` with a JSON body: `earmark catalog update ID --title … --set k=v --unset k`.
    private func updateTrack(_ request: Request, context: some RequestContext) async throws -> Response {
        let writer = try requireWriter()
        _ = try QueryParameters(request.uri, allowed: [])
        let id = try API.trackID(context)
        let media = ClipFormat.mediaType(request.headers[.contentType]) ?? ""
        guard media == "application/json" || media == "application/merge-patch+json" else {
            throw APIError(.unsupportedMediaType, "unsupported_media_type", "the body must be JSON (Content-Type: application/json)")
        }
        let limit = 1_048_576
        let body: ByteBuffer
        do {
            body = try await request.body.collect(upTo: limit)
        } catch {
            throw APIError(.contentTooLarge, "body_too_large", "a PATCH body is at most \(limit) bytes")
        }
        let patch: TrackPatch
        do {
            patch = try JSONDecoder().decode(TrackPatch.self, from: Data(buffer: body))
        } catch let e as APIError {
            throw e
        } catch {
            throw APIError(.badRequest, "malformed_json", "the body is not a JSON object of title, artist, album and metadata")
        }
        let removals = Set((patch.metadata ?? [:]).filter { $0.value == .null }.keys)
        let assignments = (patch.metadata ?? [:]).filter { $0.value != .null }
        guard patch.title != nil || patch.artist != nil || patch.album != nil || !assignments.isEmpty || !removals.isEmpty else {
            throw APIError(.badRequest, "nothing_to_change", "give title, artist, album or metadata")
        }
        do {
            let info = try await writer.update(id: id, title: patch.title, artist: patch.artist, album: patch.album,
                                               metadata: assignments.isEmpty ? nil : assignments, removingKeys: removals)
            return JSONBody.response(data: info)
        } catch let e as CatalogError where e.code == .invalidArgument {
            throw APIError(.badRequest, "invalid_body", e.message)
        }
    }

    /// `DELETE /v1/tracks/{id}`: `earmark catalog remove ID`; 204.
    private func removeTrack(_ request: Request, context: some RequestContext) async throws -> Response {
        let writer = try requireWriter()
        _ = try QueryParameters(request.uri, allowed: [])
        try await writer.remove(id: try API.trackID(context))
        return Response(status: .noContent)
    }

    // MARK: Export and metrics

    /// `GET /v1/catalog/export`: the file `earmark catalog export FILE` writes, made in the upload folder and sent
    /// from there in pieces (never whole in memory), then deleted.
    private func export(_ request: Request, context: some RequestContext) async throws -> Response {
        _ = try QueryParameters(request.uri, allowed: [])
        let path = upload.folder + "/export-\(UUID().uuidString).earcat"
        let size: Int
        do {
            size = try await reading { catalog -> Int in
                try catalog.export(to: path)
                return (try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
            }
        } catch {
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
            throw error
        }
        let file: ResponseBody
        do {
            file = try await upload.fileIO.loadFile(path: path, context: context, chunkLength: 256 * 1024)
        } catch {
            try? FileManager.default.removeItem(atPath: path)
            throw error
        }
        let body = ResponseBody(contentLength: size) { writer in
            defer { try? FileManager.default.removeItem(atPath: path) }
            try await file.write(writer)
        }
        return Response(status: .ok, headers: [.contentType: "application/vnd.sqlite3",
                                               .contentDisposition: "attachment; filename=\"catalog.earcat\""], body: body)
    }

    // MARK: POST /v1/catalog/import

    /// `POST /v1/catalog/import`: the body is a catalog file (what `GET /v1/catalog/export` and `earmark catalog
    /// export` write), merged in as `earmark catalog merge FILE` merges it (see ``CatalogWriter/merge(file:)``).
    /// 200 with the object `catalog merge --json` prints.
    private func importCatalog(_ request: Request, context: some RequestContext) async throws -> Response {
        let writer = try requireWriter()
        _ = try QueryParameters(request.uri, allowed: [])
        if let media = ClipFormat.mediaType(request.headers[.contentType]) {
            // application/x-www-form-urlencoded is what `curl --data-binary` sends unless told otherwise: no type at all.
            guard ["application/vnd.sqlite3", "application/x-sqlite3", "application/octet-stream",
                   "application/x-www-form-urlencoded"].contains(media) else {
                throw APIError(.unsupportedMediaType, "unsupported_media_type",
                               "Content-Type \(media) is not a catalog file; send its bytes as application/vnd.sqlite3 or application/octet-stream")
            }
        }
        // Imports share the admission of additions: receiving, waiting for the writer or merging.
        guard adds.tryEnter() else {
            throw APIError.unavailable("busy", "\(adds.capacity) additions are running or waiting (--max-concurrent); try again shortly")
        }
        var handedOver = false
        defer { if !handedOver { adds.leave() } }
        let uploaded = try await upload.receive(request, context: context,
                                                expecting: "a catalog file, as `earmark catalog export` or GET /v1/catalog/export writes it")
        // Not a catalog at all (audio, text, another database): refused before the writer is busied.
        guard Catalog.hasCatalogHeader(ClipFormat.head(of: uploaded, count: 100)) else {
            CatalogWriter.removeCatalogFile(uploaded)
            throw APIError(.unsupportedMediaType, "not_a_catalog",
                           "the body is not an Earmark catalog file; send one that `earmark catalog export` or GET /v1/catalog/export wrote")
        }
        handedOver = true
        let adds = adds
        // A merge copies every track of the file, as many as a long upload holds: it may take ten times a match.
        let report = try await Deadline.run(limit: matchTimeout * 10, "the import") {
            defer { adds.leave() }
            return try await writer.merge(file: uploaded)
        }
        return try JSONBody.response(report)
    }

    /// `GET /metrics`: Prometheus text format.
    private func metricsText(_ request: Request) async throws -> Response {
        _ = try QueryParameters(request.uri, allowed: [])
        metrics.matchesInProgress.set(Int64(matches.count))
        metrics.listenStreams.set(Int64(streams.count))
        metrics.catalogTracks.set(Int64(try await reading { try $0.stats().trackCount }))
        return Response(status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                        body: .init(byteBuffer: ByteBuffer(string: metrics.text())))
    }
}
