import EarmarkKit
import Foundation
import HTTPTypes
import Hummingbird

/// `POST /v1/transcribe`: what an uploaded recording says, as `earmark transcribe --format json` prints it.
extension API {
    static let speechRoutes: [(method: HTTPRequest.Method, path: String)] = [
        (.post, "/v1/transcribe"),
    ]

    /// The answer of one of ``speechRoutes``, or nil when `method` and `path` are not one of them.
    func respondSpeech(method: HTTPRequest.Method, path: String, request: Request, context: some RequestContext) async throws -> Response? {
        switch (method, path) {
        case (.post, "/v1/transcribe"): return try await transcribe(request, context: context)
        default: return nil
        }
    }

    /// `POST /v1/transcribe?language&words&name`: the body is a recording (any format `POST /v1/match` takes); the
    /// answer is `earmark transcribe --format json --language L [--words]`'s object, `path` being `name`. Only the
    /// speech the sound classifier finds is read. It shares the admission limit of matches (`--max-concurrent`).
    private func transcribe(_ request: Request, context: some RequestContext) async throws -> Response {
        let query = try QueryParameters(request.uri, allowed: ["language", "words", "name"])
        let language = (try query.string("language", maxLength: 16) ?? "auto").lowercased()
        let words = try query.bool("words", default: false)
        let name = try query.string("name", maxLength: 255) ?? "upload"
        let code = language == "auto" ? nil : language
        if let code, !code.allSatisfy({ $0.isLetter || $0 == "-" }) {
            throw APIError.invalidParameter("language", "a code such as en, or auto")
        }
        guard matches.tryEnter() else {
            throw APIError.unavailable("busy", "\(matches.capacity) matches or transcriptions are running or waiting (--max-concurrent); try again shortly")
        }
        var handedOver = false
        defer { if !handedOver { matches.leave() } }
        let file = try await upload.receive(request, context: context)
        handedOver = true
        let (workers, matches, contentType, speechModelPath) = (workers, matches, request.headers[.contentType], speechModelPath)
        // Transcribing takes longer than matching: ten times the match limit.
        let report = try await Deadline.run(limit: matchTimeout * 10, "the transcription") {
            defer { matches.leave() }
            let models: (speech: SpeechModel, sound: SoundModel)
            do {
                models = (try await SpeechModels.shared.model(path: speechModelPath), try await workers.loadSoundModel())
                if let code, models.speech.language(code: code) == nil {
                    throw APIError.invalidParameter("language", "\"\(code)\": the model does not know it (codes such as en, fr, es, de; or auto)")
                }
            } catch {
                try? FileManager.default.removeItem(atPath: file)
                if let e = error as? SoundModelError {
                    throw APIError.unavailable("model_unavailable", "the sound model that finds the speech cannot be loaded: \(e.description)",
                                               retryAfter: 60)
                }
                throw error
            }
            do {
                return try await workers.run { _ in
                    try SpeechModels.transcribe(file: file, name: name, contentType: contentType, speech: models.speech, sound: models.sound,
                                                language: code, words: words)
                }
            } catch {
                // A job cancelled or refused before it ran leaves the upload behind.
                try? FileManager.default.removeItem(atPath: file)
                throw error
            }
        }
        return try JSONBody.response(report)
    }
}

/// Whisper models for `POST /v1/transcribe` and listen streams with `transcribe`, loaded once per process.
final class SpeechModels: Sendable {
    static let shared = SpeechModels()
    private let loaded = LockedValue<[String: SpeechModel]>([:])

    /// The model at `path` (nil: the default one, see `earmark transcribe --help`), loaded on first use off the event loop.
    func model(path: String?) async throws -> SpeechModel {
        let key = path ?? ""
        if let model = loaded.withLock({ $0[key] }) { return model }
        let loaded = loaded
        return try await Task.detached {
            try loaded.withLock { models in
                if let model = models[key] { return model }
                do {
                    let model = try SpeechModel.load(path: path)
                    models[key] = model
                    return model
                } catch {
                    throw APIError.unavailable("model_unavailable", "the speech model cannot be loaded: \(error)", retryAfter: 60)
                }
            }
        }.value
    }

    /// Transcribes the upload at `file` (deleted afterwards) on the calling thread.
    static func transcribe(file: String, name: String, contentType: String?, speech: SpeechModel, sound: SoundModel,
                           language: String?, words: Bool) throws -> TranscriptReport {
        var path = file
        defer { try? FileManager.default.removeItem(atPath: path) }
        do {
            path = try ClipFormat.named(file, name: name, contentType: contentType)
            let recognizer = WhisperRecognizer(model: speech)
            let samples = try SpeechAudio.load(path: path, sampleRate: recognizer.sampleRate)
            let ranges = try SpeechDetector(soundModel: sound).ranges(samples: samples, sampleRate: recognizer.sampleRate)
            let result = try recognizer.transcribe(samples: samples, options: TranscriptionOptions(language: language, wordTimestamps: words),
                                                   speech: ranges)
            return TranscriptReport(path: name, model: speech.name, result: result, words: words)
        } catch {
            throw APIError.from(error, path: path, name: name)
        }
    }
}

/// `{"event": "error", …}` for a stream whose transcription failed (matching goes on).
struct ListenTranscriptFailure: Encodable {
    var event = "error"
    var time: Double
    var message: String
}
