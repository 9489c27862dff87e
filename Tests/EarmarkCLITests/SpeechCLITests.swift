import EarmarkTestSupport
import Foundation
import Testing

@Suite("Transcripts in listen, catalog add --analyze, catalog info and match",
       .enabled(if: TestSpeechModel.available, Comment(rawValue: TestSpeechModel.skipReason)))
struct SpeechCLITests {
    static func words(_ text: String) -> [String] {
        text.lowercased().split { !$0.isLetter && !$0.isNumber }.map(String.init)
    }

    static func events(_ output: String) -> [[String: Any]] {
        output.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    @Test("listen --transcribe streams volatile then final transcript events beside the others; the finals say what transcribe says")
    func listenTranscribes() throws {
        let env = try TranscribeCLITests.environment()
        let tmp = try TemporaryDirectory("listen-transcribe")
        // Two real prompts with a pause, then a stretch of music from the catalog.
        try Run.sox(["-n", "-r", "16000", "-c", "1", "-b", "16", tmp.path("pause.wav"), "trim", "0", "3"])
        for stem in ["agent-alreadyon", "privacy-unident"] {
            try Fixtures.cut(URL(fileURLWithPath: try SpeechPrompts.path(stem)), start: 0, seconds: 60, to: tmp.file("\(stem).wav"),
                             rate: 16_000, channels: 1)
        }
        try Fixtures.cut(try TestAudio.set().reference("pingus-4"), start: 30, seconds: 10, to: tmp.file("music.wav"), rate: 16_000, channels: 1)
        try Run.sox([tmp.path("agent-alreadyon.wav"), tmp.path("pause.wav"), tmp.path("privacy-unident.wav"), tmp.path("pause.wav"),
                     tmp.path("music.wav"), tmp.path("input.wav")])
        let catalog = tmp.path("c.earcat")
        #expect(try EarmarkCLI.run(["catalog", "add", "--catalog", catalog, try TestAudio.set().reference("pingus-4").path]).status == 0)

        let listen = try EarmarkCLI.run(["listen", "--catalog", catalog, "--input", tmp.path("input.wav"), "--fast", "--json", "--transcribe"],
                                        environment: env, timeout: 900)
        #expect(listen.status == 0, "\(listen)")
        let events = Self.events(listen.stdoutText)
        let transcripts = events.filter { $0["event"] as? String == "transcript" }
        let finals = transcripts.filter { $0["final"] as? Bool == true }
        #expect(events.contains { $0["event"] as? String == "match" }, "the music still matches: \(listen.stdoutText)")
        #expect(events.last?["event"] as? String == "end")
        #expect(transcripts.first?["final"] as? Bool == false, "a volatile result comes first")
        #expect(finals.count == 2, "\(finals)")
        for t in transcripts {
            let start = t["start"] as? Double ?? -1, end = t["end"] as? Double ?? -1
            #expect(start >= 0 && end >= start && (t["time"] as? Double ?? 0) >= end, "\(t)")
            #expect(t["language"] as? String == "en")
            let words = t["words"] as? [[String: Any]] ?? []
            #expect(!words.isEmpty && words.allSatisfy { ($0["start"] as? Double ?? -1) >= start - 1e-6 && ($0["end"] as? Double ?? .infinity) <= end + 1e-6 })
        }
        // Nothing is said over the music (it starts at about 15 s).
        #expect(finals.allSatisfy { ($0["end"] as? Double ?? 99) < 15 })

        // Streams decode greedily: the file's greedy transcript is what their finals must say.
        let file = try EarmarkCLI.run(["transcribe", "--json", "--beam", "1", tmp.path("input.wav")], environment: env, timeout: 600)
        let expected = (try JSONSerialization.jsonObject(with: file.stdout) as? [String: Any])?["text"] as? String ?? "?"
        #expect(Self.words(finals.compactMap { $0["text"] as? String }.joined(separator: " ")) == Self.words(expected))

        // Text output: one line per final result.
        let text = try EarmarkCLI.run(["listen", "--catalog", catalog, "--input", tmp.path("agent-alreadyon.wav"), "--fast", "--transcribe"],
                                      environment: env, timeout: 600)
        #expect(text.status == 0)
        #expect(text.stdoutText.contains("0:00  says: \u{201C}That agent is already logged on. Please enter your agent number followed by the pound key.\u{201D}"),
                "\(text.stdoutText)")
        #expect(try EarmarkCLI.run(["listen", "--catalog", catalog, "--language", "en", "--input", tmp.path("music.wav")]).status == 64)
    }

    @Test("catalog add --analyze stores kind speech for a track with speech only; info shows it; match --transcribe attaches the clip's")
    func storedAndAttached() throws {
        let env = try TranscribeCLITests.environment()
        let tmp = try TemporaryDirectory("speech-catalog")
        let catalog = tmp.path("c.earcat")
        let prompt = try SpeechPrompts.path("agent-alreadyon")
        let expected = "That agent is already logged on. Please enter your agent number followed by the pound key."
        try Fixtures.cut(try TestAudio.set().reference("pingus-4"), start: 20, seconds: 40, to: tmp.file("music.wav"))
        let add = try EarmarkCLI.run(["catalog", "add", "--catalog", catalog, "--analyze", tmp.path("music.wav"), prompt],
                                     environment: env, timeout: 900)
        #expect(add.status == 0, "\(add)")

        let music = try EarmarkCLI.run(["catalog", "info", "--catalog", catalog, "--json", "1"], environment: env)
        let musicAnalysis = (try JSONSerialization.jsonObject(with: music.stdout) as? [String: Any])?["analysis"] as? [String: Any] ?? [:]
        #expect(musicAnalysis["sound"] != nil && musicAnalysis["speech"] == nil, "\(music.stdoutText)")

        let info = try EarmarkCLI.run(["catalog", "info", "--catalog", catalog, "--json", "2"], environment: env)
        let analysis = (try JSONSerialization.jsonObject(with: info.stdout) as? [String: Any])?["analysis"] as? [String: Any] ?? [:]
        let speech = try #require(analysis["speech"] as? [String: Any], "\(info.stdoutText)")
        #expect(speech["language"] as? String == "en")
        #expect(speech["text"] as? String == expected)
        #expect(speech["model"] as? String != nil)
        // One segment (the default short window's reading) or Whisper's two (the whole window's).
        let segments = speech["segments"] as? [[String: Any]] ?? []
        #expect((1...2).contains(segments.count))
        let words = segments.flatMap { $0["words"] as? [[String: Any]] ?? [] }
        #expect(words.compactMap { $0["word"] as? String }.joined(separator: " ") == expected)
        let text = try EarmarkCLI.run(["catalog", "info", "--catalog", catalog, "2"], environment: env)
        let count = segments.count == 1 ? "1 segment" : "\(segments.count) segments"
        #expect(text.stdoutText.contains("speech:     en, \(count), 16 words: \u{201C}That agent is already logged on."), "\(text.stdoutText)")
        #expect(text.stdoutText.contains("  0:00–0:0") && text.stdoutText.contains("  That agent is already logged on."), "\(text.stdoutText)")

        let match = try EarmarkCLI.run(["match", "--catalog", catalog, "--json", "--transcribe", prompt], environment: env, timeout: 600)
        #expect(match.status == 0, "\(match)")
        let m = try #require(try JSONSerialization.jsonObject(with: match.stdout) as? [String: Any])
        #expect((m["matches"] as? [[String: Any]])?.first.flatMap { ($0["track"] as? [String: Any])?["id"] as? Int } == 2)
        #expect((m["transcript"] as? [String: Any])?["text"] as? String == expected)
        #expect(m["sound"] is NSNull, "classification is only reported with --classify")
        let plain = try EarmarkCLI.run(["match", "--catalog", catalog, "--json", prompt], environment: env)
        #expect((try JSONSerialization.jsonObject(with: plain.stdout) as? [String: Any])?["transcript"] == nil)
        let human = try EarmarkCLI.run(["match", "--catalog", catalog, "--transcribe", tmp.path("music.wav")], environment: env, timeout: 600)
        #expect(human.status == 0)
        #expect(human.stdoutText.contains("\n    says: nothing (no speech)"), "\(human.stdoutText)")
    }
}
