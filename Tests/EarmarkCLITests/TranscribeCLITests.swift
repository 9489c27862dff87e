import EarmarkTestSupport
import Foundation
import Testing

@Suite("earmark transcribe", .enabled(if: TestSpeechModel.available, Comment(rawValue: TestSpeechModel.skipReason)))
struct TranscribeCLITests {
    static func environment() throws -> [String: String?] {
        ["EARMARK_SPEECH_MODEL": try TestSpeechModel.set().model.path, "EARMARK_MODEL": try TestModel.set().model.path]
    }

    @Test("--words in JSON, SRT and VTT; real music gives no speech and no text; a missing sound model exits 2")
    func wordsSubtitlesAndMusic() throws {
        let env = try Self.environment()
        let prompt = try SpeechPrompts.path("agent-alreadyon")
        let out = try EarmarkCLI.run(["transcribe", "--words", "--json", prompt], environment: env, timeout: 600)
        #expect(out.status == 0, "\(out)")
        let json = try #require(try JSONSerialization.jsonObject(with: out.stdout) as? [String: Any])
        let segments = try #require(json["segments"] as? [[String: Any]])
        let words = segments.flatMap { ($0["words"] as? [[String: Any]]) ?? [] }
        #expect(words.compactMap { $0["word"] as? String }.joined(separator: " ")
                == "That agent is already logged on. Please enter your agent number followed by the pound key.")
        #expect(words.allSatisfy { ($0["start"] as? Double ?? -1) >= 0 && ($0["end"] as? Double ?? -1) >= ($0["start"] as? Double ?? 0) })
        let speech = try #require(json["speech"] as? [[String: Any]])
        #expect(speech.count == 1)

        // Greedy decoding's times on the whole 30-s window, as Whisper segments it (beam search, the default, ends the
        // first segment at 2.30 s; the default short window reads this prompt as one segment, 0–5.51 s).
        let srt = try EarmarkCLI.run(["transcribe", "--beam", "1", "--whole-windows", "--format", "srt", prompt], environment: env, timeout: 600)
        #expect(srt.status == 0)
        #expect(srt.stdoutText.hasPrefix("1\n00:00:00,000 --> 00:00:02,240\nThat agent is already logged on.\n\n2\n00:00:02,240 --> "), "\(srt.stdoutText)")
        let vtt = try EarmarkCLI.run(["transcribe", "--words", "--whole-windows", "--format", "vtt", prompt], environment: env, timeout: 600)
        #expect(vtt.status == 0)
        #expect(vtt.stdoutText.hasPrefix("WEBVTT\n\n00:00:00.000 --> 00:00:02.000\nThat <00:00:00.340>agent <00:00:00.720>is"), "\(vtt.stdoutText)")

        let music = try TestAudio.set().reference("pingus-4").path
        let quiet = try EarmarkCLI.run(["transcribe", "--json", music], environment: env, timeout: 600)
        #expect(quiet.status == 0)
        let m = try #require(try JSONSerialization.jsonObject(with: quiet.stdout) as? [String: Any])
        #expect(m["text"] as? String == "")
        #expect(m["language"] is NSNull)
        #expect((m["speech"] as? [Any])?.isEmpty == true)
        #expect((m["segments"] as? [Any])?.isEmpty == true)

        let tmp = try TemporaryDirectory("transcribe-words")
        var noSound = env
        noSound["EARMARK_MODEL"] = tmp.path("none.emodel")
        let missing = try EarmarkCLI.run(["transcribe", prompt], environment: noSound)
        #expect(missing.status == 2)
        #expect(missing.stderrText.contains("--all-audio"))
    }

    @Test("a real prompt: the shipped transcript, timed segments (two on the whole window), JSON and text; bad input exits 2 or 64")
    func transcribePrompt() throws {
        let env = try Self.environment()
        let prompt = try SpeechPrompts.path("agent-alreadyon")
        let out = try EarmarkCLI.run(["transcribe", "--format", "json", "--language", "auto", prompt], environment: env, timeout: 600)
        #expect(out.status == 0, "\(out)")
        let json = try #require(try JSONSerialization.jsonObject(with: out.stdout) as? [String: Any])
        #expect(json["language"] as? String == "en")
        #expect(json["text"] as? String == "That agent is already logged on. Please enter your agent number followed by the pound key.")
        // The default short window may read the prompt as one segment or as Whisper's two.
        let segments = try #require(json["segments"] as? [[String: Any]])
        #expect((1...2).contains(segments.count))
        #expect(segments.first?["start"] as? Double == 0)
        #expect((segments.first?["text"] as? String)?.hasPrefix("That agent is already logged on.") == true)
        #expect(segments.compactMap { $0["text"] as? String }.joined(separator: " ") == json["text"] as? String)
        #expect(json["error"] is NSNull)

        let tmp = try TemporaryDirectory("transcribe")
        try Data("not audio".utf8).write(to: tmp.file("text.wav"))
        let text = try EarmarkCLI.run(["transcribe", "--beam", "1", "--whole-windows", "--language", "en", prompt, tmp.path("text.wav")],
                                      environment: env, timeout: 600)
        #expect(text.status == 2)
        #expect(text.stdoutText.contains("Please enter your agent number followed by the pound key."))
        #expect(text.stdoutText.contains("[0:00.00 → 0:02.24] That agent is already logged on."))
        #expect(text.stderrText.contains("text.wav"))

        #expect(try EarmarkCLI.run(["transcribe"], environment: env).status == 64)
        #expect(try EarmarkCLI.run(["transcribe", "--language", "xx", prompt], environment: env).status == 64)
        #expect(try EarmarkCLI.run(["transcribe", "--format", "xml", prompt], environment: env).status == 64)
        #expect(try EarmarkCLI.run(["transcribe", "--beam", "0", prompt], environment: env).status == 64)
        #expect(try EarmarkCLI.run(["transcribe", "--json", "--format", "srt", prompt], environment: env).status == 64)
        let missing = try EarmarkCLI.run(["transcribe", prompt], environment: ["EARMARK_SPEECH_MODEL": tmp.path("none.emodel")])
        #expect(missing.status == 2)
        #expect(missing.stderrText.contains("no speech model"))
        try Data("EARWHSPR".utf8).write(to: tmp.file("short.emodel"))
        let truncated = try EarmarkCLI.run(["transcribe", "--model", tmp.path("short.emodel"), prompt])
        #expect(truncated.status == 2)
        #expect(truncated.stderrText.contains("not a usable speech model"))
    }
}
