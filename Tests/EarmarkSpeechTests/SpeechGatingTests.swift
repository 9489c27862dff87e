import EarmarkClassification
import EarmarkSpeech
import EarmarkTestSupport
import Foundation
import Testing

@Suite("The recogniser reads only where the sound classifier hears speech",
       .enabled(if: TestSpeechModel.available, Comment(rawValue: TestSpeechModel.skipReason)))
struct SpeechGatingTests {
    static func transcribe(_ samples: [Float]) throws -> Transcription {
        let detector = SpeechDetector(soundModel: try SoundModel(path: try TestModel.set().model.path))
        let recognizer = WhisperRecognizer(model: try TestSpeechModel.model())
        let speech = try detector.ranges(samples: samples, sampleRate: recognizer.sampleRate)
        return try recognizer.transcribe(samples: samples, speech: speech)
    }

    @Test("real music and digital silence give an empty transcript")
    func musicAndSilenceGiveNothing() throws {
        let audio = try TestAudio.set()
        for music in [try audio.reference("pingus-4"), audio.negative[1]] {
            let result = try Self.transcribe(try SpeechAudio.load(path: music.path))
            #expect(result.speech == [], "\(music.lastPathComponent): speech found in \(result.speech ?? [])")
            #expect(result.segments.isEmpty, "\(music.lastPathComponent): \(result.text)")
        }
        let silence = try Self.transcribe([Float](repeating: 0, count: 16_000 * 5))
        #expect(silence.segments.isEmpty && silence.speech == [])
    }

    @Test("a real prompt still transcribes, and after 8 s of music its text is placed after the music")
    func promptAfterMusic() throws {
        let audio = try TestAudio.set()
        let prompt = try SpeechPrompts.path("agent-alreadyon")
        let expected = try SpeechPrompts.transcript("agent-alreadyon")
        func words(_ text: String) -> [String] {
            text.lowercased().split { !$0.isLetter }.map(String.init)
        }
        let alone = try Self.transcribe(try SpeechAudio.load(path: prompt))
        #expect(words(alone.text) == words(expected), "\(alone.text)")

        let tmp = try TemporaryDirectory("gating")
        try Fixtures.cut(try audio.reference("pingus-3"), start: 10, seconds: 8, to: tmp.file("music.wav"), rate: 16_000, channels: 1)
        try Fixtures.cut(URL(fileURLWithPath: prompt), start: 0, seconds: 60, to: tmp.file("prompt.wav"), rate: 16_000, channels: 1)
        try Run.sox([tmp.path("music.wav"), tmp.path("prompt.wav"), tmp.path("joined.wav")])
        let joined = try Self.transcribe(try SpeechAudio.load(path: tmp.path("joined.wav")))
        #expect(words(joined.text) == words(expected), "\(joined.text)")
        let speech = try #require(joined.speech)
        // The prompt runs from 8.0 s to 13.5 s; the classifier's windows are 0.48 s apart, plus 0.5 s of padding.
        #expect(speech.count == 1 && speech[0].start >= 6.5 && speech[0].start <= 8.0, "\(speech)")
        let first = try #require(joined.segments.first), last = try #require(joined.segments.last)
        #expect(first.start >= 6.5 && first.start <= 8.3, "first segment starts at \(first.start)")
        #expect(last.end >= 12.5 && last.end <= 14.0, "last segment ends at \(last.end)")
    }
}
