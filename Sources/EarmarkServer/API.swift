import EarmarkKit
import Foundation
import Hummingbird

/// The routes of `earmark serve` and their handlers. docs/openapi.yaml describes each; a test checks that the
/// two list the same routes.
struct API: Sendable {
    let workers: CatalogWorkers
    let upload: ClipUpload
    /// Admission of matches (receiving, waiting or running) and of catalog reads; over either, 503.
    let matches: Gate
    let reads: Gate
    /// Admission of `POST /v1/tracks` (receiving, waiting or adding); over it, 503.
    let adds: Gate
    /// Who may call what (`--token-file`, `--read-token-file`).
    let access: AccessControl
    /// The `GET /v1/listen` streams, counted by `/metrics`.
    let streams: ListenStreams
    /// The one writer of the catalog; nil without a write token.
    let writer: CatalogWriter?
    let metrics: ServerMetrics
    /// Longest time a match or an addition may take once its upload is received (`--match-timeout`).
    let matchTimeout: Duration
    /// Set when a graceful shutdown begins: `/readyz` answers 503 from then on.
    let draining = LockedValue(false)
    /// The speech model for `POST /v1/transcribe` (`--speech-model`); nil: the default one.
    var speechModelPath: String? = nil

    /// Every route: method and path, path parameters in braces as OpenAPI writes them.
    static let routes: [(method: HTTPRequest.Method, path: String)] = [
        (.get, "/healthz"),
        (.get, "/readyz"),
        (.post, "/v1/match"),
        (.get, "/v1/tracks"),
        (.get, "/v1/tracks/{id}"),
        (.get, "/v1/tracks/{id}/timeline.svg"),
        (.get, "/v1/catalog"),
    ] + API.writeRoutes + API.speechRoutes

    /// The methods served at `path` (empty when no route has that path), for a 405's `Allow`.
    static func methods(at path: String) -> [HTTPRequest.Method] {
        allRoutes.filter { matches($0.path, path) }.map(\.method)
    }

    /// The route pattern that `path` is served by (`/v1/tracks/{id}` for `/v1/tracks/3`), or nil; a literal
    /// route wins over a pattern (`/v1/catalog/export`).
    static func route(of path: String) -> String? {
        let candidates = allRoutes.map(\.path).filter { matches($0, path) }
        return candidates.first { $0 == path } ?? candidates.first
    }

    private static func matches(_ route: String, _ path: String) -> Bool {
        let segments = path.split(separator: "/", omittingEmptySubsequences: false)
        let pattern = route.split(separator: "/", omittingEmptySubsequences: false)
        return pattern.count == segments.count
            && zip(pattern, segments).allSatisfy { p, s in p == s || (p.hasPrefix("{") && p.hasSuffix("}") && !s.isEmpty) }
    }

    func register<Context: RequestContext>(on router: Router<Context>) {
        for (method, path) in API.routes {
            router.on(RouterPath(path), method: method) { request, context in
                try await self.respond(method: method, path: path, request: request, context: context)
            }
        }
    }

    private func respond(method: HTTPRequest.Method, path: String, request: Request, context: some RequestContext) async throws -> Response {
        try access.check(AccessControl.level(method: method, path: path), request)
        switch (method, path) {
        case (.get, "/healthz"):
            _ = try QueryParameters(request.uri, allowed: [])
            return try JSONBody.response(["status": "ok"])
        case (.get, "/readyz"):
            _ = try QueryParameters(request.uri, allowed: [])
            guard !draining.withLock({ $0 }) else { throw APIError.unavailable("not_ready", "the server is shutting down") }
            return try JSONBody.response(["status": "ready"])
        case (.post, "/v1/match"):
            return try await match(request, context: context)
        case (.get, "/v1/tracks"):
            return try await tracks(request)
        case (.get, "/v1/tracks/{id}"):
            return try await track(request, context: context)
        case (.get, "/v1/tracks/{id}/timeline.svg"):
            return try await timeline(request, context: context)
        case (.get, "/v1/catalog"):
            _ = try QueryParameters(request.uri, allowed: [])
            return try JSONBody.response(try await reading { try $0.stats() })
        default:
            if let response = try await respondWrites(method: method, path: path, request: request, context: context) { return response }
            if let response = try await respondSpeech(method: method, path: path, request: request, context: context) { return response }
            throw APIError(.notFound, "not_found", "no such endpoint; see docs/openapi.yaml")
        }
    }

    // MARK: Matching

    /// `POST /v1/match`: the body is one clip; the answer is the object `earmark match --json` prints for it.
    private func match(_ request: Request, context: some RequestContext) async throws -> Response {
        let query = try QueryParameters(request.uri, allowed: ["maxMatches", "classify", "name"])
        let maxMatches = try query.int("maxMatches", default: MatchOptions.default.maximumMatches, in: 1...100)
        let classify = try query.bool("classify", default: false)
        let name = try query.string("name", maxLength: 255) ?? "upload"
        guard matches.tryEnter() else {
            throw APIError.unavailable("busy", "\(matches.capacity) matches are running or waiting (--max-concurrent); try again shortly")
        }
        // The place is held until the match ends, even when its answer was a 504 before that.
        var handedOver = false
        defer { if !handedOver { matches.leave() } }
        let file = try await upload.receive(request, context: context)
        handedOver = true
        let (workers, matches, contentType) = (workers, matches, request.headers[.contentType])
        let report = try await Deadline.run(limit: matchTimeout, "the match") {
            defer { matches.leave() }
            return try await workers.match(file: file, name: name, contentType: contentType, maxMatches: maxMatches, classify: classify)
        }
        return try JSONBody.response(report)
    }

    // MARK: Catalog

    /// Runs a catalog read on the workers, within the read admission limit.
    func reading<T: Sendable>(_ body: @escaping @Sendable (any CatalogStore) throws -> T) async throws -> T {
        guard reads.tryEnter() else {
            throw APIError.unavailable("busy", "\(reads.capacity) catalog reads are running or waiting; try again shortly")
        }
        defer { reads.leave() }
        return try await workers.read(body)
    }

    /// One page of `GET /v1/tracks`.
    struct TrackPage: Encodable, Sendable {
        var tracks: [Track]
        /// Tracks that match `q` (all tracks without it).
        var total: Int
        var offset: Int
        var limit: Int
        /// The offset of the next page; null on the last.
        var nextOffset: Int?

        enum CodingKeys: String, CodingKey { case tracks, total, offset, limit, nextOffset }
        func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(tracks, forKey: .tracks)
            try c.encode(total, forKey: .total)
            try c.encode(offset, forKey: .offset)
            try c.encode(limit, forKey: .limit)
            try c.encode(nextOffset, forKey: .nextOffset)   // null on the last page
        }
    }

    /// `GET /v1/tracks?limit&offset&q`: tracks by id, `q` searching title, artist and album (case and accents ignored).
    private func tracks(_ request: Request) async throws -> Response {
        let query = try QueryParameters(request.uri, allowed: ["limit", "offset", "q"])
        let limit = try query.int("limit", default: 50, in: 1...1000)
        let offset = try query.int("offset", default: 0, in: 0...Int(Int32.max))
        let q = try query.string("q", maxLength: 200)?.trimmingCharacters(in: .whitespaces) ?? ""
        let page = try await reading { catalog -> TrackPage in
            var all = try catalog.tracks()
            if !q.isEmpty {
                all = all.filter { t in
                    [t.title, t.artist, t.album].contains { $0?.range(of: q, options: [.caseInsensitive, .diacriticInsensitive]) != nil }
                }
            }
            let slice = offset < all.count ? Array(all[offset..<min(all.count, offset + limit)]) : []
            let next = offset + slice.count < all.count ? offset + slice.count : nil
            return TrackPage(tracks: slice, total: all.count, offset: offset, limit: limit, nextOffset: next)
        }
        return try JSONBody.response(page)
    }

    /// `GET /v1/tracks/{id}`: the object `earmark catalog info ID --json` prints.
    private func track(_ request: Request, context: some RequestContext) async throws -> Response {
        _ = try QueryParameters(request.uri, allowed: [])
        let id = try API.trackID(context)
        let data = try await reading { catalog -> Data? in
            guard let track = try catalog.track(id: id) else { return nil }
            return try trackInfoJSON(track, analyses: try catalog.analyses(trackID: id), prettyPrinted: false)
        }
        guard let data else { throw APIError(.notFound, "no_such_track", "no track with id \(id)") }
        return JSONBody.response(data: data)
    }
}
