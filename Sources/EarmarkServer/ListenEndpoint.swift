import EarmarkKit
import Foundation
import Hummingbird
import HummingbirdCore
import HummingbirdWebSocket
import Logging
import NIOCore
import NIOWebSocket

/// `GET /v1/listen`: a WebSocket that identifies a live stream, as `earmark listen --json` does.
///
/// The client sends a ``ListenStart`` text message, then binary frames of PCM; the server answers with text
/// messages, each one object that `listen --json` prints (match, noMatch, discontinuity, dropped, error, sound
/// with `classify`, and `end` last). Each socket gets its own ``StreamingSession`` (its own catalog connection and
/// matching thread) and a decoding thread; the event loop only moves bytes. docs/serve.md has the protocol.
final class ListenEndpoint: Sendable {
    static let path = "/v1/listen"
    static let routes: [(method: HTTPRequest.Method, path: String)] = [(.get, path)]
    /// Largest message (and frame) accepted, in bytes.
    static let maxMessageBytes = 1 << 20
    /// Seconds a client has to send its start message.
    static let startTimeout: Duration = .seconds(10)

    let workers: CatalogWorkers
    let streams: ListenStreams
    /// With `--read-token-file`, a stream needs the read (or write) token, as a bearer header or `access_token`.
    let access: AccessControl
    let lockTimeout: Double
    /// The speech model for streams with `transcribe` (nil: the default one).
    let speechModelPath: String?

    init(workers: CatalogWorkers, configuration: ServerConfiguration, access: AccessControl) {
        self.workers = workers
        self.access = access
        streams = ListenStreams(capacity: configuration.maxConcurrentStreams)
        lockTimeout = configuration.lockTimeout
        speechModelPath = configuration.speechModelPath
    }

    /// Whether a request for a stream carries a token that `access` accepts for reads: `Authorization: Bearer`,
    /// or without that header the query parameter `access_token` (a browser cannot set a WebSocket's headers).
    static func allowed(_ access: AccessControl, authorization: String?, uri: URI) -> Bool {
        access.verdict(.read, authorization: authorization,
                       queryToken: uri.queryParameters["access_token"].map(String.init)) == .allowed
    }

    /// The route a request to `/v1/listen` takes when it is not upgraded: 401 without a valid read token (with
    /// `--read-token-file`), 503 when it was refused (all streams taken, or shutting down), 426 when it asked for
    /// no WebSocket at all.
    func register<Context: RequestContext>(on router: Router<Context>) {
        router.get(RouterPath(Self.path)) { [streams, access] request, _ -> Response in
            try access.check(.read, request, acceptingQueryToken: true)
            _ = try QueryParameters(request.uri, allowed: ["access_token"])
            if streams.draining { throw APIError.unavailable("shutting_down", "the server is shutting down") }
            if !streams.admits {
                throw APIError.unavailable("busy", "\(streams.capacity) streams are running (--max-streams); try again shortly")
            }
            throw APIError(.init(code: 426, reasonPhrase: "Upgrade Required"), "upgrade_required",
                           "GET /v1/listen is a WebSocket: ask with Upgrade: websocket (see docs/serve.md)",
                           headers: [.upgrade: "websocket", .connection: "Upgrade"])
        }
    }

    /// Runs one upgraded socket to its end.
    func serve(_ inbound: WebSocketInboundStream, _ outbound: WebSocketOutboundWriter, logger: Logger) async {
        let control = ListenControl()
        let id: Int
        switch streams.enter(control) {
        case .success(let admitted): id = admitted
        case .failure(let refusal):
            await Self.refuse(refusal, outbound)
            return
        }
        defer { streams.leave(id) }
        let messages = MessageReader(inbound.messages(maxSize: Self.maxMessageBytes).makeAsyncIterator())
        let start: ListenStart
        let session: StreamingSession
        let model: SoundModel?
        var analyzer: SpeechAnalyzer?
        do {
            guard let first = try await messages.next(timeout: Self.startTimeout) else { return }   // closed at once
            guard case .text(let text) = first else {
                throw ListenError(code: "invalid_start", message: "the first message must be a text message: the JSON start message",
                                  close: .policyViolation)
            }
            start = try ListenStart.parse(text)
            model = start.classify ? try await Self.starting { try await self.workers.loadSoundModel() } : nil
            if start.transcribe { analyzer = try await speechAnalyzer(start) }
            let lockTimeout = self.lockTimeout
            session = try await Self.starting {
                try await self.workers.run { _ in
                    StreamingSession(catalog: try CatalogStores.open(self.workers.nextReadPath(), access: .read, busyTimeout: lockTimeout),
                                     options: .default, clock: MonotonicClock())
                }
            }
        } catch let error as ListenError {
            await Self.refuse(error, outbound)
            return
        } catch {
            return   // the connection broke, or the stream was cancelled
        }
        var speech: SpeechAnalysisSession?
        if let analyzer = analyzer.take() { speech = SpeechAnalysisSession(analyzer: analyzer) }
        await run(session: session, start: start, model: model, speech: speech, messages: messages, control: control, outbound: outbound)
    }

    /// The transcriber of a stream with `transcribe` (its models loaded on first use).
    private func speechAnalyzer(_ start: ListenStart) async throws(ListenError) -> sending SpeechAnalyzer {
        let speechModelPath = speechModelPath
        let (speechModel, soundModel) = try await Self.starting {
            (try await SpeechModels.shared.model(path: speechModelPath), try await self.workers.loadSoundModel())
        }
        if let code = start.language, speechModel.language(code: code) == nil {
            throw ListenError(code: "invalid_start", message: "language \"\(code)\": the model does not know it (codes such as en, fr, es, de; or auto)",
                              close: .policyViolation)
        }
        do {
            return try SpeechAnalyzer(recognizer: WhisperRecognizer(model: speechModel), detector: SpeechDetector(soundModel: soundModel),
                                      options: SpeechStreamOptions(transcription: TranscriptionOptions(language: start.language, wordTimestamps: true, beamSize: 1)))
        } catch {
            throw ListenError.from(error)
        }
    }

    /// Any failure to start a session as a ``ListenError``.
    private static func starting<T>(_ body: () async throws -> T) async throws(ListenError) -> T {
        do { return try await body() } catch let e as ListenError { throw e } catch { throw ListenError.from(error) }
    }

    private static func refuse(_ error: ListenError, _ outbound: WebSocketOutboundWriter) async {
        try? await outbound.write(.text(error.line(time: 0)))
        try? await outbound.close(error.close, reason: error.code)
    }

    /// Feeds the socket's audio to the session and its events to the socket until the session ends.
    private func run(session: StreamingSession, start: ListenStart, model: SoundModel?, speech: SpeechAnalysisSession?,
                     messages: MessageReader, control: ListenControl, outbound: WebSocketOutboundWriter) async {
        let (lines, out) = AsyncStream<String>.makeStream()
        let bytes = control.bytes
        var source: any AudioSource
        do {
            source = try PCMStreamReader(seekable: false, raw: (start.format, start.sampleRate, start.channels)) { bytes.read(upTo: $0) }
            if let model {
                source = try SoundTap(source, model: model) { window, time in
                    out.yield(Self.line(ListenSoundEvent(window, time: time)))
                }
            }
            if let speech { source = TranscriptTap(source, session: speech) }
        } catch {
            // Cannot happen (the start message was checked); end the session cleanly all the same.
            session.finish()
            speech?.finish()
            for await _ in session.events {}
            await Self.refuse(ListenError(code: "internal_error", message: "\(error)", close: .unexpectedServerError), outbound)
            return
        }
        session.feed(from: source)
        // Transcript events go out as they come; the end event waits for the last of them.
        let transcripts = speech.map { speech in
            Task {
                do {
                    for try await result in speech.results { out.yield(Self.line(ListenTranscriptEvent(result))) }
                } catch {
                    out.yield(Self.line(ListenTranscriptFailure(time: 0, message: "transcription failed: \(error)")))
                }
            }
        }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await Self.readAudio(messages, start: start, control: control, errors: out) }
            group.addTask {
                var summary = ListenSummary()
                var failed = false
                for await event in session.events {
                    summary.record(event)
                    if case .error = event { failed = true }
                    if case .ended = event {
                        speech?.finish()
                        await transcripts?.value
                        out.yield(Self.line(summary.end(reason: failed ? "error" : control.reason)))
                    } else {
                        out.yield(Self.line(event))
                    }
                }
                out.finish()
            }
            var open = true
            for await line in lines where open {
                do { try await outbound.write(.text(line)) } catch { open = false }
            }
            if open { try? await outbound.close(control.closeCode, reason: nil) }
            group.cancelAll()   // the audio reader, if the client has not closed
        }
    }

    /// Moves binary frames into the control's byte queue until the client ends or closes, the stream is
    /// stopped, or a message breaks the protocol (then an error line is sent and the socket closed with 1008).
    private static func readAudio(_ messages: MessageReader, start: ListenStart, control: ListenControl,
                                  errors: AsyncStream<String>.Continuation) async {
        var received = 0
        do {
            while let message = try await messages.next() {
                switch message {
                case .binary(let buffer):
                    guard buffer.readableBytes % start.frameBytes == 0 else {
                        throw ListenError(code: "invalid_frame", message: "a binary message of \(buffer.readableBytes) bytes is not a whole number of "
                                          + "\(start.frameBytes)-byte frames (\(start.format.rawValue), \(start.channels) channel\(start.channels == 1 ? "" : "s"))",
                                          close: .policyViolation)
                    }
                    received += buffer.readableBytes
                    guard await control.bytes.append(buffer) else { return }   // stopped
                case .text(let text):
                    guard ListenStart.isEnd(text) else {
                        throw ListenError(code: "invalid_message", message: "after the start message, a text message can only be {\"end\":true}",
                                          close: .policyViolation)
                    }
                    control.stop(reason: "input ended", close: .normalClosure)
                    return
                }
            }
            // The client closed: nobody is left to tell, so queued audio is not matched.
            control.stop(reason: "input ended", close: .normalClosure, discard: true)
        } catch let error as ListenError {
            errors.yield(error.line(time: Double(received / start.frameBytes) / start.sampleRate))
            control.stop(reason: "error", close: error.close)
        } catch {
            control.stop(reason: "input ended", close: .normalClosure, discard: true)   // cancelled, or the connection broke
        }
    }

    private static func line(_ value: some Encodable) -> String {
        (try? ListenJSON.encode(value)).map { String(decoding: $0, as: UTF8.self) } ?? ""
    }
}

/// The socket's message iterator, handed from the task that reads the start message to the one that reads
/// the audio.
final class MessageReader: @unchecked Sendable {
    // One task at a time calls `next`: first the handler (start message), then the audio reader it starts.
    private var iterator: WebSocketInboundMessageStream.AsyncIterator

    init(_ iterator: WebSocketInboundMessageStream.AsyncIterator) { self.iterator = iterator }

    func next() async throws -> WebSocketMessage? { try await iterator.next() }

    /// The next message, or ``ListenError`` `start_timeout` after `timeout`.
    func next(timeout: Duration) async throws -> WebSocketMessage? {
        try await withThrowingTaskGroup(of: WebSocketMessage?.self) { group in
            group.addTask { try await self.next() }
            group.addTask {
                try await Task.sleep(for: timeout)
                throw ListenError(code: "start_timeout", message: "no start message within \(timeout.components.seconds) s", close: .policyViolation)
            }
            defer { group.cancelAll() }
            return try await group.next() ?? nil
        }
    }
}

extension API {
    /// Every route the server registers: the API's, the WebSocket's and the page's.
    static var allRoutes: [(method: HTTPRequest.Method, path: String)] { routes + ListenEndpoint.routes + Page.routes }
}
