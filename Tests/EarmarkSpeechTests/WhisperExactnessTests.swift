import EarmarkSpeech
import EarmarkTestSupport
import Foundation
import Testing

/// Prompts of different lengths (1.8 s to 25 s, one window each).
let exactnessPrompts = ["all-circuits-busy-now", "conf-onlyperson", "agent-alreadyon", "basic-pbx-ivr-main"]

@Suite("Whisper in Swift against CTranslate2 (float32) on real speech", .enabled(if: TestSpeechModel.available, Comment(rawValue: TestSpeechModel.skipReason)))
struct WhisperExactnessTests {
    @Test("same log-mel, encoder output within tolerance, same language and the same greedy tokens")
    func matchesCTranslate2() throws {
        let fixture = try TestSpeechModel.set()
        let model = try TestSpeechModel.model()
        let recognizer = WhisperRecognizer(model: model)
        let recordings = try exactnessPrompts.map { try SpeechAudio.load(path: try SpeechPrompts.path($0)) }
        let references = try fixture.references(recordings)
        let frames = model.frontEnd.chunkFrames
        for (i, stem) in exactnessPrompts.enumerated() {
            let reference = references[i]
            // Front end: float32 FFT and filters against float64 numpy.
            let mel = recognizer.frontEnd.spectrogram(recordings[i]).window(start: 0, length: frames)
            #expect(mel.count == reference.mel.count)
            let melError = zip(mel, reference.mel).map { abs($0 - $1) }.max() ?? .infinity
            #expect(melError < 2e-3, "\(stem): log-mel differs by up to \(melError)")

            // Encoder on CTranslate2's own input.
            let encoded = recognizer.encode(window: reference.mel)
            #expect(encoded.count == reference.encoder.count)
            let scale = reference.encoder.map { abs($0) }.max() ?? 1
            let encoderError = zip(encoded, reference.encoder).map { abs($0 - $1) }.max() ?? .infinity
            let meanError = zip(encoded, reference.encoder).map { Double(abs($0 - $1)) }.reduce(0, +) / Double(encoded.count)
            print("\(stem): log-mel max error \(melError); encoder max error \(encoderError) (largest value \(scale)), mean \(meanError)")
            #expect(encoderError < 2e-3 * scale, "\(stem): encoder output differs by up to \(encoderError) (largest value \(scale))")

            // Greedy decoding on the same input, then from the Swift front end.
            let decoded = recognizer.decode(window: reference.mel, language: nil)
            #expect(decoded.language == reference.language)
            #expect(abs(decoded.languageProbability - reference.languageProbability) < 1e-3)
            #expect(abs(decoded.noSpeechProbability - reference.noSpeechProbability) < 1e-3)
            #expect(decoded.tokens == reference.tokens, "\(stem): \(model.tokenizer.decode(decoded.tokens)) vs \(model.tokenizer.decode(reference.tokens))")
            let own = recognizer.decode(window: mel, language: nil)
            #expect(own.tokens == reference.tokens, "\(stem) from the Swift log-mel")
        }
    }
}
