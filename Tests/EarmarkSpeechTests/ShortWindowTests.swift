import EarmarkSpeech
import EarmarkTestSupport
import Foundation
import Testing

@Suite("Short windows (shortWindowPadding, on by default): the audio and 8 s of padding encoded, the whole window when that fails",
       .enabled(if: TestSpeechModel.available, Comment(rawValue: TestSpeechModel.skipReason)))
struct ShortWindowTests {
    static func words(_ text: String) -> [String] {
        text.lowercased().split { !$0.isLetter && !$0.isNumber && $0 != "'" }.map(String.init)
    }

    @Test("a 2.4-s and a 5.5-s prompt: fewer positions encoded, the same words as whole windows")
    func shortPromptsSameWordsFewerPositions() throws {
        // The default decoder weights (int8), as `earmark transcribe` runs.
        let recognizer = WhisperRecognizer(model: try TestSpeechModel.int8Model())
        let positions = recognizer.model.architecture.audioContext
        for stem in ["conf-getpin", "agent-alreadyon"] {
            let samples = try SpeechAudio.load(path: try SpeechPrompts.path(stem))
            let frames = recognizer.frontEnd.spectrogram(samples).frames
            var whole = TranscriptionOptions(language: "en")
            whole.shortWindowPadding = nil
            let full = try recognizer.transcribe(samples: samples, options: whole)
            #expect(recognizer.network.encodedPositions == positions, "\(stem): whole window")

            // The default options.
            let short = try recognizer.transcribe(samples: samples, options: TranscriptionOptions(language: "en"))
            let encoded = recognizer.network.encodedPositions
            // The audio's frames and 8 s (800 frames) of padding, two frames a position.
            #expect(abs(encoded - (frames + 800) / 2) <= 1, "\(stem): \(encoded) positions for \(frames) frames")
            print("\(stem): \(frames) frames, \(encoded) positions: \(short.text) | whole window: \(full.text)")
            #expect(Self.words(short.text) == Self.words(full.text), "\(stem): \(short.text) | whole window: \(full.text)")
            #expect(Self.words(short.text) == Self.words(try SpeechPrompts.transcript(stem)), "\(stem): \(short.text)")
        }
    }

    @Test("one-word prompts the short encoding reads as a loop ('Friends Friends …', 'C C C …') are read again on the whole window")
    func loopsFallBackToWholeWindow() throws {
        let recognizer = WhisperRecognizer(model: try TestSpeechModel.int8Model())
        let positions = recognizer.model.architecture.audioContext
        // 0.85 s and 0.86 s at 8 kHz: with 8 s of padding the first loops to the token limit (the compression ratio
        // catches it), the second repeats "C" eight times (too short for the ratio: the repeated-token rule).
        for (stem, word) in [("vm-Friends", "friends"), ("letters/c", "c")] {
            let samples = try SpeechAudio.load(path: try SpeechPrompts.path(stem))
            let result = try recognizer.transcribe(samples: samples, options: TranscriptionOptions(language: "en"))
            print("\(stem): \(result.text), \(recognizer.network.encodedPositions) positions")
            // Whether the short reading loops depends on the last bits of the encoder's sums (another CPU's kernels
            // may read the word once): then the short reading may stand, but only as the word alone.
            #expect(recognizer.network.encodedPositions == positions || Self.words(result.text) == [word],
                    "\(stem): the short reading was kept: \(result.text)")
            #expect(Self.words(result.text).filter { $0 == word }.count <= 1, "\(stem): \(result.text)")
        }
    }
}
