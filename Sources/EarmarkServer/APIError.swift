import EarmarkKit
import Foundation
import Hummingbird
import NIOPosix

/// An error answer: an HTTP status and the body `{"error": {"code": "...", "message": "..."}}`.
///
/// Bad input (a body that is not audio, empty, too short, silent or too large; a malformed parameter; an unknown
/// id) is a 4xx; 503 means "try again later" and comes with `Retry-After`; 500 is left for faults of the server
/// or the catalog. docs/openapi.yaml lists the codes.
public struct APIError: Error, HTTPResponseError, Sendable, CustomStringConvertible {
    public var status: HTTPResponse.Status
    /// A stable machine-readable code in snake case, e.g. `unsupported_format`.
    public var code: String
    /// One human-readable sentence.
    public var message: String
    /// Extra headers (`Retry-After`).
    public var headers: HTTPFields = [:]

    public init(_ status: HTTPResponse.Status, _ code: String, _ message: String, headers: HTTPFields = [:]) {
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers
    }

    public var description: String { "\(status.code) \(code): \(message)" }

    public func response(from request: Request, context: some RequestContext) throws -> Response {
        var response = try JSONBody.response(ErrorBody(error: .init(code: code, message: message)), status: status)
        response.headers.append(contentsOf: headers)
        return response
    }

    private struct ErrorBody: Encodable {
        struct Detail: Encodable { var code: String, message: String }
        var error: Detail
    }

    /// 503 with `Retry-After: seconds`.
    static func unavailable(_ code: String, _ message: String, retryAfter seconds: Int = 1) -> APIError {
        APIError(.serviceUnavailable, code, message, headers: [.retryAfter: String(seconds)])
    }

    /// 400 for a query parameter that is malformed or out of range.
    static func invalidParameter(_ name: String, _ message: String) -> APIError {
        APIError(.badRequest, "invalid_parameter", "\(name): \(message)")
    }

    /// 413 for a body over `limit` bytes.
    static func bodyTooLarge(limit: Int) -> APIError {
        APIError(.contentTooLarge, "body_too_large", "the body is larger than the limit of \(limit) bytes (--max-body-mb)")
    }

    /// The answer for any error a handler throws: an ``APIError`` as it is; Hummingbird's own errors (no such
    /// route) with their status; the library's errors by their code. `path`, when given, is the temporary file
    /// an uploaded clip was stored in, and is replaced by the clip's `name` wherever a message quotes it.
    static func from(_ error: any Error, path: String? = nil, name: String = "upload") -> APIError {
        func clean(_ message: String) -> String {
            guard let path, !path.isEmpty else { return message }
            let text = message.replacingOccurrences(of: path, with: name)
            return text.hasPrefix(name + ": ") ? String(text.dropFirst(name.count + 2)) : text
        }
        switch error {
        case let e as APIError:
            return e
        case let e as HTTPError:
            let code: String
            switch e.status {
            case .notFound: code = "not_found"
            case .methodNotAllowed: code = "method_not_allowed"
            case .contentTooLarge: code = "body_too_large"
            case .badRequest: code = "bad_request"
            default: code = e.status.code < 500 ? "bad_request" : "internal_error"
            }
            let message = e.status == .notFound ? "no such endpoint; see docs/openapi.yaml" : (e.body ?? e.status.reasonPhrase)
            return APIError(e.status, code, message, headers: e.headers)
        case let e as AudioError:
            switch e.code {
            case .unsupportedFormat: return APIError(.unsupportedMediaType, "unsupported_format", clean(e.message))
            case .corrupt: return APIError(.unprocessableContent, "corrupt_audio", clean(e.message))
            case .empty: return APIError(.unprocessableContent, "no_audio", clean(e.message))
            case .invalidFormat: return APIError(.unprocessableContent, "invalid_audio", clean(e.message))
            case .unreadable: return APIError(.unprocessableContent, "unreadable_audio", clean(e.message))
            }
        case let e as SignatureError:
            switch e.code {
            case .signatureInvalid: return APIError(.unprocessableContent, "no_usable_sound", clean(e.message))
            case .signatureDurationInvalid: return APIError(.unprocessableContent, "too_short", clean(e.message))
            case .versionMismatch: return APIError(.unprocessableContent, "signature_version_mismatch", clean(e.message))
            case .invalidFile, .invalidConfiguration: return APIError(.unprocessableContent, "invalid_signature", clean(e.message))
            }
        case let e as CatalogError:
            switch e.code {
            case .noSuchTrack: return APIError(.notFound, "no_such_track", e.message)
            case .locked: return unavailable("catalog_locked", e.message, retryAfter: 5)
            case .unavailable: return unavailable("catalog_unavailable", e.message, retryAfter: 5)
            default: return APIError(.internalServerError, "catalog_error", e.description)
            }
        case let e as SoundModelError:
            return unavailable("model_unavailable", "the sound model for classify=true cannot be loaded: \(e.description)", retryAfter: 60)
        case is NIOThreadPoolError.ThreadPoolInactive, is CancellationError:
            return unavailable("shutting_down", "the server is shutting down")
        default:
            return APIError(.internalServerError, "internal_error", clean(String(describing: error)))
        }
    }
}

/// Turns every error a route throws, and Hummingbird's "no such route", into an ``APIError`` answer: 404 for a
/// path that is not served, 405 with `Allow` for a served path asked with another method.
struct ErrorMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch {
            var apiError = APIError.from(error)
            // The router finds no route for a known path with another method: that is a 405. A route that was
            // found and answered not_found itself (an unknown page file) stays a 404.
            if apiError.code == "not_found" {
                let allowed = API.methods(at: request.uri.path)
                if !allowed.isEmpty, !allowed.contains(request.method) {
                    apiError = APIError(.methodNotAllowed, "method_not_allowed",
                                        "\(request.method) is not served here; \(allowed.map(\.rawValue).joined(separator: ", ")) is",
                                        headers: [.allow: allowed.map(\.rawValue).joined(separator: ", ")])
                }
            }
            // 503 (busy, shutting down) and 504 (--match-timeout) are limits working, not faults.
            if apiError.status.code >= 500, apiError.status != .serviceUnavailable, apiError.status != .gatewayTimeout {
                context.logger.error("\(request.method) \(request.uri.path): \(apiError)")
            }
            return try apiError.response(from: request, context: context)
        }
    }
}

/// JSON answers, encoded as the command line encodes them (sorted keys, slashes unescaped), on one line.
enum JSONBody {
    static func response(_ value: some Encodable, status: HTTPResponse.Status = .ok) throws -> Response {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return response(data: try encoder.encode(value), status: status)
    }

    static func response(data: Data, status: HTTPResponse.Status = .ok) -> Response {
        var body = ByteBuffer(bytes: data)
        body.writeString("\n")
        return Response(status: status, headers: [.contentType: "application/json; charset=utf-8"], body: .init(byteBuffer: body))
    }
}
