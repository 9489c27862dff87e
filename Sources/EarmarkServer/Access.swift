import Hummingbird

/// Who may call what: writes need the write token, reads the read token when one is set (or the write token);
/// `/healthz` and `/readyz` are always open.
struct AccessControl: Sendable {
    /// What a route needs.
    enum Level: Sendable { case open, read, write }

    let writeToken: [UInt8]?
    let readToken: [UInt8]?

    init(writeToken: String?, readToken: String?) {
        self.writeToken = writeToken.map { Array($0.utf8) }
        self.readToken = readToken.map { Array($0.utf8) }
    }

    /// The level of a route: its method and path as ``API/routes`` writes them.
    static func level(method: HTTPRequest.Method, path: String) -> Level {
        switch (method, path) {
        case (.get, "/healthz"), (.get, "/readyz"): return .open
        case (.post, "/v1/tracks"), (.patch, "/v1/tracks/{id}"), (.delete, "/v1/tracks/{id}"), (.post, "/v1/catalog/import"):
            return .write
        default: return .read
        }
    }

    /// Throws 403 `writes_disabled` for a write when the server has no write token, and 401 (with
    /// `WWW-Authenticate: Bearer`) when the request's bearer token is missing or not one that the level accepts.
    /// With `acceptingQueryToken` (only `GET /v1/listen`: a browser cannot set headers on a WebSocket), the
    /// query parameter `access_token` serves when there is no `Authorization` header.
    func check(_ level: Level, _ request: Request, acceptingQueryToken: Bool = false) throws {
        let queryToken = acceptingQueryToken ? request.uri.queryParameters["access_token"].map(String.init) : nil
        switch verdict(level, authorization: request.headers[.authorization], queryToken: queryToken) {
        case .allowed:
            return
        case .writesDisabled:
            throw APIError(.forbidden, "writes_disabled", "this server refuses writes: it was started without --token-file")
        case .missing:
            throw APIError(.unauthorized, "unauthorized", "this endpoint needs Authorization: Bearer <token>",
                           headers: [.wwwAuthenticate: "Bearer realm=\"earmark\""])
        case .invalid:
            throw APIError(.unauthorized, "invalid_token", "the bearer token is not valid for this endpoint",
                           headers: [.wwwAuthenticate: "Bearer realm=\"earmark\", error=\"invalid_token\""])
        }
    }

    enum Verdict { case allowed, writesDisabled, missing, invalid }

    /// Whether a request at `level` with this `Authorization` header (or, without one, this `access_token`
    /// query parameter) may go on, and if not, why.
    func verdict(_ level: Level, authorization: String?, queryToken: String? = nil) -> Verdict {
        let accepted: [[UInt8]]
        switch level {
        case .open:
            return .allowed
        case .read:
            guard let readToken else { return .allowed }
            accepted = [readToken] + (writeToken.map { [$0] } ?? [])
        case .write:
            guard let writeToken else { return .writesDisabled }
            accepted = [writeToken]
        }
        let fromQuery = authorization == nil ? queryToken.flatMap { $0.isEmpty ? nil : Array($0.utf8) } : nil
        guard let presented = AccessControl.bearerToken(authorization) ?? fromQuery else { return .missing }
        // Every accepted token is compared, whichever matches, so the time taken tells nothing either.
        var matched = false
        for token in accepted where AccessControl.constantTimeEqual(presented, token) { matched = true }
        return matched ? .allowed : .invalid
    }

    /// The token of an `Authorization: Bearer <token>` header (the scheme in any case), or nil.
    static func bearerToken(_ header: String?) -> [UInt8]? {
        guard let header else { return nil }
        let parts = header.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else { return nil }
        let token = parts[1].trimmingCharacters(in: .whitespaces)
        return token.isEmpty ? nil : Array(token.utf8)
    }

    /// Whether `presented` equals `expected`, in a time that depends only on the length of `expected`.
    static func constantTimeEqual(_ presented: [UInt8], _ expected: [UInt8]) -> Bool {
        var difference: UInt8 = presented.count == expected.count ? 0 : 1
        for i in expected.indices {
            difference |= (i < presented.count ? presented[i] : 0) ^ expected[i]
        }
        return difference == 0
    }
}
