import EarmarkKit
@testable import EarmarkServer
import EarmarkTestSupport
import Foundation
import HummingbirdWSClient
import Logging
import NIOCore
import NIOWebSocket
import Testing

/// `GET /v1/listen` over a real WebSocket on loopback, against the catalog of the real reference tracks.
@Suite struct ListenTests {
    /// 12 s of pingus-4 from 40 s, as 16 kHz mono s16le (what the page sends), paced at four times real time:
    /// a match of the right track at the right place, then `end` after the client's `{"end": true}`.
    @Test func streamOfACatalogTrackIsMatched() async throws {
        let catalog = try await ReferenceCatalog.shared.value()
        let pcm = try Self.pcm(try catalog.audio.reference("pingus-4"), start: 40, seconds: 12, rate: 16_000)
        try await TestServer.with(catalog: catalog.path) { server in
            let result = try await Self.stream(port: server.port, start: #"{"format":"s16le","sampleRate":16000,"channels":1}"#,
                                               pcm: pcm, bytesPerSecond: 32_000, pace: 4, end: true)
            let events = result.events
            let match = try #require(events.first { $0["event"] as? String == "match" }, "\(result)")
            #expect((match["track"] as? [String: Any])?["id"] as? Int == Int(catalog.ids["pingus-4"] ?? -1), "\(match)")
            let streamTime = try #require(match["streamTime"] as? Double)
            let offset = try #require(match["matchOffset"] as? Double)
            #expect(abs(offset - (40 + streamTime)) < 0.5, "\(match)")
            let predicted = try #require(match["predictedCurrentMatchOffset"] as? Double)
            #expect(predicted >= offset && predicted < 40 + 12 + 1, "\(match)")
            let end = try #require(events.last)
            #expect(end["event"] as? String == "end", "\(events)")
            #expect(end["reason"] as? String == "input ended")
            #expect(end["matches"] as? Int == 1)
            #expect(abs((end["time"] as? Double ?? 0) - 12) < 0.5, "\(end)")
            #expect(result.closeCode == .normalClosure)
            try await waitUntil { server.server.streamsInProgress == 0 }
        }
    }

    /// `classify: true` adds `sound` events, as `listen --classify --json` prints them.
    @Test func classifyAddsSoundEvents() async throws {
        let catalog = try await ReferenceCatalog.shared.value()
        let model = try await HTTPTestClient.onDispatchThread { try TestModel.set().model.path }
        let pcm = try Self.pcm(try catalog.audio.reference("pingus-5"), start: 20, seconds: 6, rate: 22_050)
        try await TestServer.with(catalog: catalog.path, configure: { $0.soundModelPath = model }) { server in
            let result = try await Self.stream(port: server.port, start: #"{"format":"s16le","sampleRate":22050,"channels":1,"classify":true}"#,
                                               pcm: pcm, bytesPerSecond: 44_100, pace: 0, end: true)
            let sounds = result.events.filter { $0["event"] as? String == "sound" }
            #expect(sounds.count >= 5, "\(result)")
            let labels = sounds.first?["labels"] as? [[String: Any]] ?? []
            #expect(!labels.isEmpty && labels.count <= 3, "\(result)")
            #expect(labels.first?["label"] is String && labels.first?["confidence"] is Double)
            #expect(sounds.allSatisfy { ($0["duration"] as? Double ?? 0) > 0.9 && $0["start"] is Double })
            #expect(result.events.last?["event"] as? String == "end", "\(result)")
        }
    }

    /// `classify: true` without a sound model: `model_unavailable`, and a close with 1013 (try again later).
    @Test func classifyWithoutAModelIsRefused() async throws {
        let catalog = try await ReferenceCatalog.shared.value()
        try await TestServer.with(catalog: catalog.path, configure: { $0.soundModelPath = "/nonexistent/model.json" }) { server in
            let result = try await Self.stream(port: server.port, start: #"{"format":"f32le","sampleRate":16000,"channels":1,"classify":true}"#,
                                               pcm: Data(), bytesPerSecond: 1, pace: 0, end: false)
            #expect(result.events.first?["code"] as? String == "model_unavailable", "\(result)")
            #expect(result.closeCode == .unknown(1013), "\(result)")
        }
    }

    /// A bad start message, a binary first message, and frames that are not whole samples: an `error` event
    /// with its code, then a close with 1008 (policy violation). The server goes on serving.
    @Test func protocolErrorsCloseWithAnErrorEvent() async throws {
        let catalog = try await ReferenceCatalog.shared.value()
        try await TestServer.with(catalog: catalog.path) { server in
            let starts = [
                #"{"format":"mp3","sampleRate":16000,"channels":1}"#, #"{"format":"f32le","sampleRate":100,"channels":1}"#,
                #"{"format":"f32le","sampleRate":16000,"channels":0}"#, #"{"format":"f32le","sampleRate":16000,"channels":1,"colour":1}"#,
                #"{"format":"f32le","sampleRate":"fast","channels":1}"#, "not json", "[1,2]",
            ]
            for start in starts {
                let result = try await Self.stream(port: server.port, start: start, pcm: Data(), bytesPerSecond: 1, pace: 0, end: false)
                #expect(result.events.first?["event"] as? String == "error", "\(start): \(result)")
                #expect(result.events.first?["code"] as? String == "invalid_start", "\(start): \(result)")
                #expect((result.events.first?["message"] as? String)?.isEmpty == false)
                #expect(result.closeCode == .policyViolation, "\(start): \(result)")
            }
            let binaryFirst = try await Self.stream(port: server.port, start: nil, pcm: Data([1, 2, 3, 4]), bytesPerSecond: 1, pace: 0, end: false)
            #expect(binaryFirst.events.first?["code"] as? String == "invalid_start", "\(binaryFirst)")
            #expect(binaryFirst.closeCode == .policyViolation)

            // Three bytes of 16-bit samples: an error, then the end of the session (reason error), then 1008.
            let ragged = try await Self.stream(port: server.port, start: #"{"format":"s16le","sampleRate":16000,"channels":1}"#,
                                               pcm: Data([1, 2, 3]), bytesPerSecond: 1, pace: 0, end: false)
            #expect(ragged.events.first?["code"] as? String == "invalid_frame", "\(ragged)")
            #expect(ragged.events.last?["event"] as? String == "end" && ragged.events.last?["reason"] as? String == "error", "\(ragged)")
            #expect(ragged.closeCode == .policyViolation)

            #expect(try await server.get("/healthz").status == 200)
            #expect(try await server.get("/v1/listen").status == 426)
            try await waitUntil { server.server.streamsInProgress == 0 }
        }
    }

    /// Over --max-streams the upgrade is refused with 503, Retry-After and a JSON error; a place freed is
    /// taken again.
    @Test func streamsOverTheCapGet503() async throws {
        let catalog = try await ReferenceCatalog.shared.value()
        try await TestServer.with(catalog: catalog.path, configure: { $0.maxConcurrentStreams = 1 }) { server in
            let holder = try await Self.upgrade(port: server.port)
            #expect(holder.reply.status == 101, "\(holder.reply.text)")
            try await waitUntil { server.server.streamsInProgress == 1 }
            let refused = try await Self.upgrade(port: server.port)
            refused.socket.close()
            #expect(refused.reply.status == 503, "\(refused.reply.text)")
            #expect(refused.reply.errorCode == "busy")
            #expect(refused.reply.headers["retry-after"] == "1")
            holder.socket.close()
            try await waitUntil { server.server.streamsInProgress == 0 }
            let again = try await Self.upgrade(port: server.port)
            again.socket.close()
            #expect(again.reply.status == 101)
        }
    }

    /// With a read token, a stream needs it: without one, or with a wrong one, the upgrade is refused with 401 and a
    /// JSON error; the token as `access_token` (what the page sends) or as a bearer header is let through, and a
    /// stream with it is matched.
    @Test func aReadTokenGuardsStreams() async throws {
        let catalog = try await ReferenceCatalog.shared.value()
        try await TestServer.with(catalog: catalog.path, configure: {
            $0.readToken = WriteTests.readToken
            $0.writeToken = WriteTests.writeToken
        }) { server in
            for (target, headers, code) in [
                ("/v1/listen", [], "unauthorized"),
                ("/v1/listen?access_token=nope", [], "invalid_token"),
                ("/v1/listen?access_token=", [], "unauthorized"),
                ("/v1/listen", ["Authorization: Bearer nope"], "invalid_token"),
                // A header, when there is one, decides.
                ("/v1/listen?access_token=\(WriteTests.readToken)", ["Authorization: Bearer nope"], "invalid_token"),
            ] {
                let refused = try await Self.upgrade(port: server.port, target: target, headers: headers)
                refused.socket.close()
                #expect(refused.reply.status == 401, "\(target) \(headers): \(refused.reply.text)")
                #expect(refused.reply.errorCode == code, "\(target) \(headers): \(refused.reply.text)")
                #expect(refused.reply.headers["www-authenticate"]?.hasPrefix("Bearer") == true)
            }
            for (target, headers) in [("/v1/listen?access_token=\(WriteTests.readToken)", []),
                                      ("/v1/listen?access_token=\(WriteTests.writeToken)", []),
                                      ("/v1/listen", ["Authorization: Bearer \(WriteTests.readToken)"])] {
                let admitted = try await Self.upgrade(port: server.port, target: target, headers: headers)
                admitted.socket.close()
                #expect(admitted.reply.status == 101, "\(target) \(headers): \(admitted.reply.text)")
            }
            try await waitUntil { server.server.streamsInProgress == 0 }
            // Without an upgrade, the token still comes first: 401, then 426.
            #expect(try await server.get("/v1/listen").status == 401)
            #expect(try await server.get("/v1/listen?access_token=\(WriteTests.readToken)").status == 426)
            let pcm = try Self.pcm(try catalog.audio.reference("pingus-4"), start: 40, seconds: 12, rate: 16_000)
            let result = try await Self.stream(port: server.port, query: "?access_token=\(WriteTests.readToken)",
                                               start: #"{"format":"s16le","sampleRate":16000,"channels":1}"#,
                                               pcm: pcm, bytesPerSecond: 32_000, pace: 4, end: true)
            let match = try #require(result.events.first { $0["event"] as? String == "match" }, "\(result)")
            #expect((match["track"] as? [String: Any])?["id"] as? Int == Int(catalog.ids["pingus-4"] ?? -1), "\(match)")
        }
    }

    /// `/metrics` counts the streams running (`earmark_listen_streams`).
    @Test func metricsCountStreams() async throws {
        let catalog = try await ReferenceCatalog.shared.value()
        try await TestServer.with(catalog: catalog.path) { server in
            // The gauge's value, as the text format writes it ("2.0").
            func streams() async throws -> Double? {
                try await server.get("/metrics").text.split(separator: "\n")
                    .first { $0.hasPrefix("earmark_listen_streams ") }.flatMap { Double($0.split(separator: " ")[1]) }
            }
            #expect(try await streams() == 0)
            // Each sends its start message, so that a slow machine cannot end them by the 10-s start timeout
            // between the upgrade and the scrape.
            let first = try await Self.upgrade(port: server.port)
            let second = try await Self.upgrade(port: server.port)
            for socket in [first.socket, second.socket] {
                try socket.write(Self.maskedTextFrame(#"{"format":"s16le","sampleRate":16000,"channels":1}"#))
            }
            try await waitUntil { server.server.streamsInProgress == 2 }
            #expect(try await server.get("/metrics").text.contains("# TYPE earmark_listen_streams gauge"))
            #expect(try await streams() == 2)
            first.socket.close()
            second.socket.close()
            try await waitUntil { server.server.streamsInProgress == 0 }
            #expect(try await streams() == 0)
        }
    }

    /// A server shutting down ends each stream with `end` (reason interrupted) and closes it with 1001.
    @Test func shutdownSendsEnd() async throws {
        let catalog = try await ReferenceCatalog.shared.value()
        let pcm = try Self.pcm(try catalog.audio.reference("sorcerer"), start: 20, seconds: 30, rate: 16_000)
        let server = try await TestServer.start(catalog: catalog.path) { _ in }
        let stopper = Task {
            try await waitUntil { server.server.streamsInProgress == 1 }
            try await Task.sleep(for: .seconds(1))
            try await server.stop()
        }
        let result = try await Self.stream(port: server.port, start: #"{"format":"s16le","sampleRate":16000,"channels":1}"#,
                                           pcm: pcm, bytesPerSecond: 32_000, pace: 1, end: false)
        try await stopper.value
        #expect(result.events.last?["event"] as? String == "end", "\(result)")
        #expect(result.events.last?["reason"] as? String == "interrupted", "\(result)")
        #expect(result.closeCode == .goingAway, "\(result)")
    }

    // MARK: Helpers

    struct StreamResult: Sendable, CustomStringConvertible {
        var lines: [String]
        var closeCode: WebSocketErrorCode?
        var events: [[String: Any]] { lines.compactMap { (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any] } }
        var description: String { "close \(closeCode.map { "\($0)" } ?? "none"): " + lines.joined(separator: "\n") }
    }

    /// Connects, sends `start` (when given) and `pcm` in 0.1-s binary messages at `pace` times real time (0: at
    /// once), then `{"end": true}` with `end`, and collects every text message until the server closes.
    static func stream(port: Int, query: String = "", start: String?, pcm: Data, bytesPerSecond: Int, pace: Double,
                       end: Bool) async throws -> StreamResult {
        let lines = LockedValue<[String]>([])
        var logger = Logger(label: "listen-test")
        logger.logLevel = .warning
        let close = try await WebSocketClient.connect(url: "ws://127.0.0.1:\(port)/v1/listen\(query)",
                                                      configuration: .init(maxFrameSize: 1 << 20), logger: logger) { inbound, outbound, _ in
            let sender = Task {
                if let start { try await outbound.write(.text(start)) }
                let chunk = max(1, bytesPerSecond / 10)
                var offset = 0
                while offset < pcm.count {
                    let n = min(chunk, pcm.count - offset)
                    try await outbound.write(.binary(ByteBuffer(bytes: pcm[offset..<offset + n])))
                    offset += n
                    if pace > 0 { try await Task.sleep(for: .milliseconds(Int(100 / pace))) }
                }
                if end { try await outbound.write(.text(#"{"end":true}"#)) }
            }
            defer { sender.cancel() }
            for try await message in inbound.messages(maxSize: 1 << 20) {
                if case .text(let text) = message { lines.withLock { $0.append(text) } }
            }
        }
        return StreamResult(lines: lines.withLock { $0 }, closeCode: close?.closeCode)
    }

    /// A raw upgrade request to `target` (with more header lines); the socket stays open (the caller closes it).
    static func upgrade(port: Int, target: String = "/v1/listen", headers: [String] = []) async throws -> (socket: Socket, reply: HTTPReply) {
        try await HTTPTestClient.onDispatchThread {
            let socket = try Socket(port: port)
            try socket.write(Data(("GET \(target) HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                                   + headers.map { $0 + "\r\n" }.joined()
                                   + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n").utf8))
            return (socket, try socket.readReply())
        }
    }

    /// One WebSocket text frame as a client sends it (masked; `text` under 126 bytes), for a socket from ``upgrade``.
    static func maskedTextFrame(_ text: String) -> Data {
        let payload = Array(text.utf8)
        precondition(payload.count < 126)
        let mask: [UInt8] = [0x5A, 0x13, 0xC7, 0x2E]
        return Data([0x81, 0x80 | UInt8(payload.count)] + mask + payload.enumerated().map { $0.element ^ mask[$0.offset % 4] })
    }

    /// `seconds` of `source` from `start`, mono at `rate` Hz, as 16-bit little-endian samples.
    static func pcm(_ source: URL, start: Double, seconds: Double, rate: Int) throws -> Data {
        let folder = try TemporaryDirectory("listen-pcm")
        let wav = folder.file("clip.wav")
        try Fixtures.cut(source, start: start, seconds: seconds, to: wav, rate: rate, channels: 1)
        let handle = try FileHandle(forReadingFrom: wav)
        defer { try? handle.close() }
        let reader = try PCMStreamReader(fileDescriptor: handle.fileDescriptor)
        var out = Data()
        while let buffer = try reader.next() {
            for s in buffer.samples {
                let v = Int16(max(-32_768, min(32_767, (s * 32_768).rounded())))
                withUnsafeBytes(of: v.littleEndian) { out.append(contentsOf: $0) }
            }
        }
        return out
    }
}
