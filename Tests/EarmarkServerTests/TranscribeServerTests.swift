import EarmarkKit
@testable import EarmarkServer
import EarmarkTestSupport
import Foundation
import Testing

/// `POST /v1/transcribe` and `transcribe` on the listen WebSocket, on a real server on loopback.
@Suite(.enabled(if: TestSpeechModel.available, Comment(rawValue: TestSpeechModel.skipReason)))
struct TranscribeServerTests {
    static let expected = "That agent is already logged on. Please enter your agent number followed by the pound key."

    static func models() async throws -> (speech: String, sound: String) {
        try await HTTPTestClient.onDispatchThread { (try TestSpeechModel.set().model.path, try TestModel.set().model.path) }
    }

    /// The answer is what `earmark transcribe --format json --words` prints; music gives an empty transcript;
    /// an unknown language and an empty body are 400.
    @Test func transcribeAnswersWhatTheCommandLinePrints() async throws {
        let catalog = try await ReferenceCatalog.shared.value()
        let (speech, sound) = try await Self.models()
        let prompt = try SpeechPrompts.path("agent-alreadyon")
        let cli = try await HTTPTestClient.onDispatchThread {
            try EarmarkCLI.run(["transcribe", "--format", "json", "--words", "--model", speech, "--sound-model", sound, prompt], timeout: 600)
        }
        #expect(cli.status == 0, "\(cli)")
        let expected = try #require(try JSONSerialization.jsonObject(with: cli.stdout) as? NSDictionary)
        #expect(expected["text"] as? String == Self.expected)
        let folder = try TemporaryDirectory("serve-transcribe")
        let music = folder.file("music.wav")
        try Fixtures.cut(try catalog.audio.reference("pingus-4"), start: 30, seconds: 8, to: music)
        try await TestServer.with(catalog: catalog.path, configure: { $0.speechModelPath = speech; $0.soundModelPath = sound }) { server in
            let name = prompt.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
            let reply = try await server.post("/v1/transcribe?words=true&name=\(name)", body: try Data(contentsOf: URL(fileURLWithPath: prompt)),
                                              headers: [("Content-Type", "audio/wav")])
            #expect(reply.status == 200, "\(reply.text)")
            #expect(reply.object as NSDictionary == expected)

            let quiet = try await server.post("/v1/transcribe?language=en", body: try Data(contentsOf: music))
            #expect(quiet.status == 200, "\(quiet.text)")
            #expect(quiet.object["text"] as? String == "")
            #expect((quiet.object["segments"] as? [Any])?.isEmpty == true)
            #expect((quiet.object["speech"] as? [Any])?.isEmpty == true)
            #expect(quiet.object["path"] as? String == "upload")

            let unknown = try await server.post("/v1/transcribe?language=xx", body: try Data(contentsOf: music))
            #expect(unknown.status == 400 && unknown.errorCode == "invalid_parameter", "\(unknown.text)")
            let empty = try await server.post("/v1/transcribe", body: Data())
            #expect(empty.status == 400, "\(empty.text)")
            let notAudio = try await server.post("/v1/transcribe", body: Data("not audio at all".utf8))
            #expect(notAudio.status == 415, "\(notAudio.text)")
        }
    }

    /// `transcribe: true` adds `transcript` events; the final one says what the prompt says, and `end` comes after it.
    @Test func listenTranscribeAddsTranscriptEvents() async throws {
        let catalog = try await ReferenceCatalog.shared.value()
        let (speech, sound) = try await Self.models()
        let pcm = try ListenTests.pcm(URL(fileURLWithPath: try SpeechPrompts.path("agent-alreadyon")), start: 0, seconds: 60, rate: 16_000)
            + Data(count: 32_000 * 3)   // 3 s of silence after it
        try await TestServer.with(catalog: catalog.path, configure: { $0.speechModelPath = speech; $0.soundModelPath = sound }) { server in
            let result = try await ListenTests.stream(port: server.port,
                                                      start: #"{"format":"s16le","sampleRate":16000,"channels":1,"transcribe":true,"language":"en"}"#,
                                                      pcm: pcm, bytesPerSecond: 32_000, pace: 4, end: true)
            let transcripts = result.events.filter { $0["event"] as? String == "transcript" }
            let finals = transcripts.filter { $0["final"] as? Bool == true }
            #expect(finals.count == 1, "\(result)")
            #expect(finals.first?["text"] as? String == Self.expected, "\(result)")
            let words = finals.first.flatMap { $0["words"] as? [Any] } ?? []
            #expect(!words.isEmpty)
            #expect(finals.first?["language"] as? String == "en")
            #expect(result.events.last?["event"] as? String == "end", "\(result)")
            #expect(result.closeCode == .normalClosure)

            let refused = try await ListenTests.stream(port: server.port, start: #"{"format":"s16le","sampleRate":16000,"channels":1,"language":"en"}"#,
                                                       pcm: Data(), bytesPerSecond: 32_000, pace: 0, end: true)
            #expect(refused.events.first?["code"] as? String == "invalid_start", "\(refused)")
            #expect(refused.closeCode == .policyViolation)
        }
    }
}
