import EarmarkClassification
@testable import EarmarkSpeech
import Foundation
import Testing

@Suite("Word alignment pieces: DTW, median filter, word splitting, speech range widening")
struct WordAlignmentTests {
    @Test("DTW follows the attended frames; each token starts where the path first reaches it")
    func dtwFindsTheDiagonal() {
        // Token 0 attends frames 0–1, token 1 frames 2–3, end of text frames 4–5 (1 = attended, −1 not).
        // (With 0 for "not attended" a path through extra cells would tie, and ties go sideways, as in Whisper.)
        var matrix = [Float](repeating: -1, count: 3 * 6)
        for (row, cols) in [(0, [0, 1]), (1, [2, 3]), (2, [4, 5])] { for c in cols { matrix[row * 6 + c] = 1 } }
        let path = WordAlignment.dtw(matrix.map { -$0 }, rows: 3, cols: 6)
        #expect(path.map(\.row) == [0, 0, 1, 1, 2, 2])
        #expect(path.map(\.col) == [0, 1, 2, 3, 4, 5])
        let times = WordAlignment.times(matrix: matrix, rows: 3, frames: 6, wordTokenCounts: [1, 1])
        #expect(times.map(\.start) == [0, 0.04])
        #expect(times.map(\.end) == [0.04, 0.08])
        #expect(WordAlignment.dtw([], rows: 0, cols: 4).isEmpty)
    }

    @Test("the median filter removes a one-frame spike and reflects at the edges")
    func medianFilter() {
        var x: [Float] = [5, 0, 0, 9, 0, 0, 1, 1, 1, 1, 1, 1, 1, 7]
        WordAlignment.medianFilter(&x, rows: 2, cols: 7, width: 3)
        #expect(x == [0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1])
    }

    @Test("tokens become words at spaces and punctuation, never inside a UTF-8 character; punctuation then joins its word")
    func wordsSplit() throws {
        let tokenizer = try SpeechModel(data: TinyModel.data(), name: "tiny").tokenizer
        // " ab" "." " é" (two tokens for é) " c"
        let words = WordAlignment.words([0x20, 0x61, 0x62, 0x2E, 0x20, 0xC3, 0xA9, 0x20, 0x63], tokenizer: tokenizer, language: "en")
        #expect(words.map(\.text) == [" ab", ".", " é", " c"])
        #expect(words.map(\.tokens.count) == [3, 1, 3, 2])
        let unspaced = WordAlignment.words([0xC3, 0xA9, 0x61], tokenizer: tokenizer, language: "ja")
        #expect(unspaced.map(\.text) == ["é", "a"])
        let timed = zip(words, [0.0, 0.3, 0.4, 0.9]).map { TranscriptWord(start: $1, end: $1 + 0.1, text: $0.text, tokens: $0.tokens) }
        let merged = WhisperRecognizer.mergePunctuation(timed)
        #expect(merged.map(\.text) == [" ab.", " é", " c"])
        #expect(merged[0].start == 0 && merged[0].end == 0.1 && merged[0].tokens.count == 4)
    }

    @Test("speech ranges are widened, clamped to the recording and joined where they meet")
    func widen() {
        let ranges = [TimeRange(start: 0.2, end: 1), TimeRange(start: 1.8, end: 2.5), TimeRange(start: 5, end: 6)]
        let wide = SpeechDetector.widen(ranges, by: 0.5, within: 5.8)
        #expect(wide == [TimeRange(start: 0, end: 3), TimeRange(start: 4.5, end: 5.8)])
    }
}
