import EarmarkAudio
import EarmarkClassification
import EarmarkSpeech
import EarmarkTestSupport
import Foundation
import Testing

@Suite("Streams are transcribed as they arrive: volatile results, then final ones equal to the file's",
       .enabled(if: TestSpeechModel.available, Comment(rawValue: TestSpeechModel.skipReason)))
struct SpeechStreamTests {
    static func detector() throws -> SpeechDetector {
        SpeechDetector(soundModel: try SoundModel(path: try TestModel.set().model.path))
    }

    static func words(_ text: String) -> [String] {
        text.lowercased().split { !$0.isLetter && !$0.isNumber }.map(String.init)
    }

    /// Feeds 16-kHz `samples` in buffers of `step` samples; returns every result in order.
    static func stream(_ samples: [Float], options: SpeechStreamOptions, step: Int = 1600) throws -> [SpeechResult] {
        let analyzer = try SpeechAnalyzer(recognizer: WhisperRecognizer(model: try TestSpeechModel.model()), detector: try detector(),
                                          options: options)
        var results: [SpeechResult] = []
        var from = 0
        while from < samples.count {
            let to = min(samples.count, from + step)
            results += try analyzer.append(PCMBuffer(samples: Array(samples[from..<to]), sampleRate: 16_000))
            from = to
        }
        return results + (try analyzer.finish())
    }

    /// Three real prompts (Asterisk's, 8 kHz) with pauses between them, as one 16-kHz file.
    static func promptSequence(in tmp: TemporaryDirectory) throws -> String {
        var parts: [String] = []
        for (i, (stem, pause)) in [("agent-alreadyon", 0.7), ("vm-intro", 3.0), ("privacy-unident", 3.0)].enumerated() {
            let silence = tmp.path("pause\(i).wav"), prompt = tmp.path("prompt\(i).wav")
            try Run.sox(["-n", "-r", "16000", "-c", "1", "-b", "16", silence, "trim", "0", String(pause)])
            try Fixtures.cut(URL(fileURLWithPath: try SpeechPrompts.path(stem)), start: 0, seconds: 60, to: URL(fileURLWithPath: prompt),
                             rate: 16_000, channels: 1)
            parts += [silence, prompt]
        }
        try Run.sox(["-n", "-r", "16000", "-c", "1", "-b", "16", tmp.path("tail.wav"), "trim", "0", "1.5"])
        let joined = tmp.path("sequence.wav")
        try Run.sox(parts + [tmp.path("tail.wav"), joined])
        return joined
    }

    @Test("a prompt sequence in 100-ms buffers: volatile results, then finals with the file's text and segment times (±0.2 s)")
    func promptSequenceMatchesFile() throws {
        let tmp = try TemporaryDirectory("speech-stream")
        let samples = try SpeechAudio.load(path: try Self.promptSequence(in: tmp))
        let transcription = TranscriptionOptions(language: nil, wordTimestamps: true, beamSize: 1)
        let recognizer = WhisperRecognizer(model: try TestSpeechModel.model())
        let file = try recognizer.transcribe(samples: samples, options: transcription,
                                             speech: try Self.detector().ranges(samples: samples, sampleRate: 16_000))
        let results = try Self.stream(samples, options: SpeechStreamOptions(transcription: transcription))
        let finals = results.filter(\.isFinal), volatiles = results.filter { !$0.isFinal }
        for r in results {
            print(String(format: "%@ %6.2f–%6.2f (audio %6.2f–%6.2f) %@", r.isFinal ? "final   " : "volatile", r.start, r.end,
                         r.audio.start, r.audio.end, r.text))
        }
        #expect(!file.segments.isEmpty)
        #expect(!volatiles.isEmpty, "no volatile result")
        #expect(results.first?.isFinal == false && results.last?.isFinal == true)
        // Each final comes after a volatile result for its stretch (every prompt is longer than the re-decoding interval).
        #expect(finals.count == 3, "\(finals.map(\.text))")
        var previousEnd = 0.0
        for (i, r) in results.enumerated() where r.isFinal {
            #expect(i > 0 && !results[i - 1].isFinal, "final result \(r.text) without a volatile one before it")
            #expect(r.audio.start >= previousEnd - 1e-9 && r.audio.end > r.audio.start)
            previousEnd = r.audio.end
        }
        let streamed = finals.flatMap(\.segments)
        #expect(Self.words(finals.map(\.text).joined(separator: " ")) == Self.words(file.text),
                "stream: \(finals.map(\.text)) file: \(file.text)")
        #expect(streamed.count == file.segments.count)
        for (s, f) in zip(streamed, file.segments) {
            #expect(abs(s.start - f.start) <= 0.2 && abs(s.end - f.end) <= 0.2,
                    "segment \(s.text): stream \(s.start)–\(s.end), file \(f.start)–\(f.end)")
        }
        for r in finals {
            #expect(!r.words.isEmpty && r.words.allSatisfy { $0.start <= $0.end && $0.start >= r.audio.start - 1e-6 })
            #expect(r.start >= r.audio.start - 1e-6 && r.end <= r.audio.end + 1e-6)
            #expect(r.language == file.language)
        }
    }

    @Test("music and digital silence give no result; the session's AsyncSequence ends after finish()")
    func noSpeechGivesNothing() async throws {
        let audio = try TestAudio.set()
        let music = try SpeechAudio.load(path: try audio.reference("pingus-4").path)
        #expect(try Self.stream(Array(music.prefix(16_000 * 20)), options: SpeechStreamOptions()).isEmpty)

        let analyzer = try SpeechAnalyzer(recognizer: WhisperRecognizer(model: try TestSpeechModel.model()), detector: try Self.detector())
        let session = SpeechAnalysisSession(analyzer: analyzer)
        for _ in 0..<50 { session.append(PCMBuffer(samples: [Float](repeating: 0, count: 4410), sampleRate: 44_100)) }
        session.finish()
        var count = 0
        for try await _ in session.results { count += 1 }
        #expect(count == 0)
    }

    @Test("speech without a pause is made final in parts no longer than the longest stretch, text kept")
    func longSpeechIsCut() async throws {
        let samples = try SpeechAudio.load(path: try SpeechPrompts.path("vm-options"))
        let recognizer = WhisperRecognizer(model: try TestSpeechModel.model())
        let options = TranscriptionOptions(language: "en", beamSize: 1)
        let file = try recognizer.transcribe(samples: samples, options: options)
        let analyzer = try SpeechAnalyzer(recognizer: recognizer, detector: try Self.detector(),
                                          options: SpeechStreamOptions(transcription: options, maximumStretch: 8, reportsVolatile: false))
        // Through the session, at 8 kHz as the prompt is recorded (resampled once by the analyzer).
        let session = SpeechAnalysisSession(analyzer: analyzer)
        let reader = try MultichannelFileReader(path: try SpeechPrompts.path("vm-options"))
        while let buffer = try reader.next() { session.append(buffer) }
        session.finish()
        var finals: [SpeechResult] = []
        for try await r in session.results { finals.append(r) }
        for r in finals { print(String(format: "final %6.2f–%6.2f %@", r.audio.start, r.audio.end, r.text)) }
        #expect(finals.allSatisfy { $0.isFinal })
        #expect(finals.count >= 2)
        #expect(finals.allSatisfy { $0.audio.duration <= 8 + 1 })
        let streamed = Self.words(finals.map(\.text).joined(separator: " ")), expected = Self.words(file.text)
        let common = Set(streamed).intersection(expected).count
        #expect(common * 10 >= Set(expected).count * 9, "stream: \(streamed) file: \(expected)")
    }
}
