import EarmarkKit
import Foundation
import NIOWebSocket

/// The first message of a `GET /v1/listen` WebSocket: how the binary frames that follow encode audio.
///
/// `{"format": "f32le", "sampleRate": 16000, "channels": 1, "classify": true}`: `format` is `f32le` (32-bit
/// float) or `s16le` (16-bit integer), both little-endian and interleaved; `sampleRate` in Hz (8000–192000);
/// `channels` 1–8; `classify` (default false) adds `sound` events; `transcribe` (default false) adds `transcript`
/// events, in `language` (a code such as "en", or "auto", the default). Any other field is an error.
struct ListenStart: Sendable, Equatable {
    var format: PCMStreamReader.SampleFormat
    var sampleRate: Double
    var channels: Int
    var classify = false
    var transcribe = false
    /// With `transcribe`: Whisper's language code, or nil to detect it.
    var language: String?

    /// Bytes per frame (one sample of every channel).
    var frameBytes: Int { (format == .s16le ? 2 : 4) * channels }

    /// Reads a start message, or throws the error to answer it with (`invalid_start`).
    static func parse(_ text: String) throws(ListenError) -> ListenStart {
        func invalid(_ message: String) -> ListenError { ListenError(code: "invalid_start", message: message, close: .policyViolation) }
        let data = Data(text.utf8)
        guard (try? JSONSerialization.jsonObject(with: data)) is [String: Any] else {
            throw invalid("the first message must be a JSON object such as {\"format\":\"f32le\",\"sampleRate\":16000,\"channels\":1}")
        }
        let fields: Fields
        do {
            fields = try JSONDecoder().decode(Fields.self, from: data)
        } catch let e as FieldError {
            throw invalid(e.message)
        } catch {
            throw invalid("the first message is not a start message: \(error)")
        }
        guard let name = fields.format, let format = PCMStreamReader.SampleFormat(rawValue: name), format == .f32le || format == .s16le else {
            throw invalid("format must be \"f32le\" or \"s16le\"")
        }
        guard let rate = fields.sampleRate, rate.isFinite, (8000...192_000).contains(rate) else {
            throw invalid("sampleRate must be a number of Hz from 8000 to 192000")
        }
        guard let channels = fields.channels, (1...8).contains(channels) else {
            throw invalid("channels must be an integer from 1 to 8")
        }
        let language = fields.language?.lowercased()
        if let language, language.isEmpty || language.count > 16 || !language.allSatisfy({ $0.isLetter || $0 == "-" }) {
            throw invalid("language must be a code such as \"en\", or \"auto\"")
        }
        if language != nil && fields.transcribe != true { throw invalid("language needs \"transcribe\": true") }
        return ListenStart(format: format, sampleRate: rate, channels: channels, classify: fields.classify ?? false,
                           transcribe: fields.transcribe ?? false, language: language == "auto" ? nil : language)
    }

    /// The start message's fields, each of its JSON type; any other field is refused.
    private struct Fields: Decodable {
        var format: String?
        var sampleRate: Double?
        var channels: Int?
        var classify: Bool?
        var transcribe: Bool?
        var language: String?

        private struct Key: CodingKey {
            var stringValue: String
            var intValue: Int? { nil }
            init(stringValue: String) { self.stringValue = stringValue }
            init?(intValue: Int) { nil }
        }

        init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: Key.self)
            let known = ["format", "sampleRate", "channels", "classify", "transcribe", "language"]
            if let unknown = c.allKeys.map(\.stringValue).sorted().first(where: { !known.contains($0) }) {
                throw FieldError(message: "\(unknown.prefix(40)): no such field (the fields are format, sampleRate, channels, classify, transcribe and language)")
            }
            func field<T: Decodable>(_ name: String, _ type: T.Type, _ what: String) throws -> T? {
                do { return try c.decodeIfPresent(type, forKey: Key(stringValue: name)) } catch {
                    throw FieldError(message: "\(name) must be \(what)")
                }
            }
            format = try field("format", String.self, "\"f32le\" or \"s16le\"")
            sampleRate = try field("sampleRate", Double.self, "a number of Hz from 8000 to 192000")
            channels = try field("channels", Int.self, "an integer from 1 to 8")
            classify = try field("classify", Bool.self, "true or false")
            transcribe = try field("transcribe", Bool.self, "true or false")
            language = try field("language", String.self, "a code such as \"en\", or \"auto\"")
        }
    }

    private struct FieldError: Error { var message: String }

    /// Whether a text message after the start is the end message, `{"end": true}`.
    static func isEnd(_ text: String) -> Bool {
        (try? JSONDecoder().decode([String: Bool].self, from: Data(text.utf8))) == ["end": true]
    }
}

/// Why a listen socket is refused or closed: sent as `{"event": "error", "time", "code", "message"}`, then the
/// socket is closed with `close`.
struct ListenError: Error, Sendable, Equatable {
    var code: String
    var message: String
    var close: WebSocketErrorCode

    /// 1013, "try again later" (RFC 6455's registry): the server is at its limit or shutting down.
    static let tryAgainLater = WebSocketErrorCode.unknown(1013)

    /// The error line: `listen --json`'s error event with a `code`.
    func line(time: Double) -> String {
        struct Line: Encodable {
            var event = "error"
            var time: Double
            var code: String
            var message: String
        }
        return (try? ListenJSON.encode(Line(time: time, code: code, message: message))).map { String(decoding: $0, as: UTF8.self) } ?? ""
    }

    /// The error for a failure to start a session: the codes and messages of the HTTP API's errors.
    static func from(_ error: any Error) -> ListenError {
        let api = APIError.from(error)
        return ListenError(code: api.code, message: api.message, close: api.status == .serviceUnavailable ? tryAgainLater : .unexpectedServerError)
    }
}
