import Foundation

/// A word of a transcript with its time range.
public struct TranscriptWord: Codable, Sendable, Equatable {
    /// Seconds from the start of the recording.
    public var start: Double
    public var end: Double
    /// The word as decoded, with its leading space and any punctuation attached to it.
    public var text: String
    /// Its tokens.
    public var tokens: [Int]
}

/// Word times from the decoder's cross-attention, the method of Whisper's `word_timestamps`: the text is read
/// again after `<|notimestamps|>`, the alignment heads' attention over the window is normalised per head
/// and frame, median-filtered along time and averaged, and dynamic time warping finds the monotonic path from
/// the first token to the end of text through the most attended frames; a word starts at the frame where
/// the path reaches its first token and ends where it reaches the next word's.
enum WordAlignment {
    /// Seconds per encoder position (two mel frames of 10 ms).
    static let secondsPerPosition = 0.02
    /// Width of the median filter along time, in encoder positions (Whisper's 7).
    static let medianWidth = 7
    /// Languages written without spaces between words: split at character boundaries only.
    static let unspaced: Set<String> = ["zh", "ja", "th", "lo", "my", "yue"]
    /// Punctuation joined to the following word, and to the preceding one (Whisper's lists).
    static let prepended: Set<String> = ["\"", "'", "\u{201C}", "\u{00BF}", "(", "[", "{", "-"]
    static let appended: Set<String> = ["\"", "'", ".", "\u{3002}", ",", "\u{FF0C}", "!", "\u{FF01}", "?", "\u{FF1F}", ":",
                                        "\u{FF1A}", "\u{201D}", ")", "]", "}", "\u{3001}"]
    static let asciiPunctuation = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"

    /// Splits text tokens into words: first into pieces that decode to whole characters, then (unless the
    /// language is written without spaces) a piece starting with a space or made of punctuation starts a word.
    static func words(_ tokens: [Int], tokenizer: WhisperTokenizer, language: String) -> [(text: String, tokens: [Int])] {
        var pieces: [(text: String, tokens: [Int])] = []
        var current: [Int] = []
        for t in tokens {
            current.append(t)
            let text = tokenizer.decode(current)
            if !text.contains("\u{FFFD}") {
                pieces.append((text, current))
                current = []
            }
        }
        if !current.isEmpty { pieces.append((tokenizer.decode(current), current)) }
        if unspaced.contains(language) { return pieces }
        var out: [(text: String, tokens: [Int])] = []
        for p in pieces {
            let stripped = p.text.trimmingCharacters(in: .whitespaces)
            let punctuation = stripped.isEmpty || asciiPunctuation.contains(stripped)
            if out.isEmpty || p.text.hasPrefix(" ") || punctuation {
                out.append(p)
            } else {
                out[out.count - 1].text += p.text
                out[out.count - 1].tokens += p.tokens
            }
        }
        return out
    }

    /// Monotonic path through `cost` (`rows × cols`, row-major) from (0, 0) to the last cell, each step down,
    /// right or diagonal, with the smallest sum; returns for each step its (row, column), in order.
    static func dtw(_ cost: [Float], rows: Int, cols: Int) -> [(row: Int, col: Int)] {
        guard rows > 0, cols > 0 else { return [] }
        let w = cols + 1
        var total = [Float](repeating: .infinity, count: (rows + 1) * w)
        // 0 diagonal, 1 from above (next token, same frame), 2 from the left (same token, next frame).
        var trace = [UInt8](repeating: 0, count: (rows + 1) * w)
        total[0] = 0
        for i in 1...rows {
            for j in 1...cols {
                let c0 = total[(i - 1) * w + j - 1], c1 = total[(i - 1) * w + j], c2 = total[i * w + j - 1]
                let best: Float, step: UInt8
                if c0 < c1 && c0 < c2 { best = c0; step = 0 } else if c1 < c0 && c1 < c2 { best = c1; step = 1 } else { best = c2; step = 2 }
                total[i * w + j] = cost[(i - 1) * cols + j - 1] + best
                trace[i * w + j] = step
            }
        }
        for j in 0...cols { trace[j] = 2 }
        for i in 0...rows { trace[i * w] = 1 }
        var path: [(row: Int, col: Int)] = []
        var i = rows, j = cols
        while i > 0 || j > 0 {
            path.append((i - 1, j - 1))
            switch trace[i * w + j] {
            case 0: i -= 1; j -= 1
            case 1: i -= 1
            default: j -= 1
            }
        }
        return path.reversed().filter { $0.row >= 0 && $0.col >= 0 }
    }

    /// Median of each `width`-wide stretch of each row (reflected at the edges), in place.
    static func medianFilter(_ x: inout [Float], rows: Int, cols: Int, width: Int) {
        guard width > 1, cols > width / 2 else { return }
        let half = width / 2
        var row = [Float](repeating: 0, count: cols)
        var window = [Float](repeating: 0, count: width)
        for r in 0..<rows {
            for c in 0..<cols { row[c] = x[r * cols + c] }
            for c in 0..<cols {
                for k in 0..<width {
                    var s = c + k - half
                    if s < 0 { s = -s }
                    if s >= cols { s = 2 * (cols - 1) - s }
                    window[k] = row[max(0, min(cols - 1, s))]
                }
                window.sort()
                x[r * cols + c] = window[half]
            }
        }
    }

    /// The alignment matrix from cross-attention logits `[head][token][frame]`: softmax over frames, each head's
    /// values standardised over the tokens at every frame, median-filtered, averaged over the heads.
    static func matrix(logits: [Float], heads: Int, tokens: Int, frames: Int) -> [Float] {
        var w = logits
        var out = [Float](repeating: 0, count: tokens * frames)
        for h in 0..<heads {
            let base = h * tokens * frames
            for t in 0..<tokens {
                let row = base + t * frames
                var top = -Float.infinity
                for f in 0..<frames { top = max(top, w[row + f]) }
                var sum: Float = 0
                for f in 0..<frames {
                    w[row + f] = expf(w[row + f] - top)
                    sum += w[row + f]
                }
                for f in 0..<frames { w[row + f] /= sum }
            }
            for f in 0..<frames {
                var mean: Double = 0
                for t in 0..<tokens { mean += Double(w[base + t * frames + f]) }
                mean /= Double(tokens)
                var variance: Double = 0
                for t in 0..<tokens {
                    let c = Double(w[base + t * frames + f]) - mean
                    variance += c * c
                }
                let std = max((variance / Double(tokens)).squareRoot(), 1e-12)
                for t in 0..<tokens { w[base + t * frames + f] = Float((Double(w[base + t * frames + f]) - mean) / std) }
            }
            var head = Array(w[base..<(base + tokens * frames)])
            medianFilter(&head, rows: tokens, cols: frames, width: medianWidth)
            for i in 0..<(tokens * frames) { out[i] += head[i] / Float(heads) }
        }
        return out
    }

    /// Start and end (seconds in the window) of each word, from the alignment `matrix` whose rows are the
    /// positions that predict each text token and then end of text (`rows = words' tokens + 1`).
    static func times(matrix: [Float], rows: Int, frames: Int, wordTokenCounts: [Int]) -> [(start: Double, end: Double)] {
        let path = dtw(matrix.map { -$0 }, rows: rows, cols: frames)
        // The frame at which the path first reaches each row.
        var reached = [Double](repeating: 0, count: rows)
        var last = -1
        for p in path where p.row != last {
            reached[p.row] = Double(p.col) * secondsPerPosition
            last = p.row
        }
        var out: [(start: Double, end: Double)] = []
        var boundary = 0
        for n in wordTokenCounts {
            let next = min(rows - 1, boundary + n)
            out.append((reached[min(boundary, rows - 1)], reached[next]))
            boundary += n
        }
        return out
    }
}
