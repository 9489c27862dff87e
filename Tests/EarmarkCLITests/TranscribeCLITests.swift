import EarmarkTestSupport
import Foundation
import Testing

@Suite("earmark transcribe", .enabled(if: TestSpeechModel.available, Comment(rawValue: TestSpeechModel.skipReason)))
struct TranscribeCLITests {
    @Test("a real prompt: the shipped transcript, two timed segments, JSON and text; bad input exits 2 or 64")
    func transcribePrompt() throws {
        let env: [String: String?] = ["EARMARK_SPEECH_MODEL": try TestSpeechModel.set().model.path]
        let prompt = try SpeechPrompts.path("agent-alreadyon")
        let out = try EarmarkCLI.run(["transcribe", "--format", "json", "--language", "auto", prompt], environment: env, timeout: 600)
        #expect(out.status == 0, "\(out)")
        let json = try #require(try JSONSerialization.jsonObject(with: out.stdout) as? [String: Any])
        #expect(json["language"] as? String == "en")
        #expect(json["text"] as? String == "That agent is already logged on. Please enter your agent number followed by the pound key.")
        let segments = try #require(json["segments"] as? [[String: Any]])
        #expect(segments.count == 2)
        #expect(segments.first?["start"] as? Double == 0)
        #expect(segments.first?["text"] as? String == "That agent is already logged on.")
        #expect(json["error"] is NSNull)

        let tmp = try TemporaryDirectory("transcribe")
        try Data("not audio".utf8).write(to: tmp.file("text.wav"))
        let text = try EarmarkCLI.run(["transcribe", "--language", "en", prompt, tmp.path("text.wav")], environment: env, timeout: 600)
        #expect(text.status == 2)
        #expect(text.stdoutText.contains("Please enter your agent number followed by the pound key."))
        #expect(text.stdoutText.contains("[0:00.00 → 0:02.24] That agent is already logged on."))
        #expect(text.stderrText.contains("text.wav"))

        #expect(try EarmarkCLI.run(["transcribe"], environment: env).status == 64)
        #expect(try EarmarkCLI.run(["transcribe", "--language", "xx", prompt], environment: env).status == 64)
        #expect(try EarmarkCLI.run(["transcribe", "--format", "srt", prompt], environment: env).status == 64)
        let missing = try EarmarkCLI.run(["transcribe", prompt], environment: ["EARMARK_SPEECH_MODEL": tmp.path("none.emodel")])
        #expect(missing.status == 2)
        #expect(missing.stderrText.contains("no speech model"))
        try Data("EARWHSPR".utf8).write(to: tmp.file("short.emodel"))
        let truncated = try EarmarkCLI.run(["transcribe", "--model", tmp.path("short.emodel"), prompt])
        #expect(truncated.status == 2)
        #expect(truncated.stderrText.contains("not a usable speech model"))
    }
}
