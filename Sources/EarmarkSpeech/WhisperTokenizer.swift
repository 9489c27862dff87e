import Foundation

/// Whisper's vocabulary: byte-level BPE text tokens, then special tokens (`<|endoftext|>`, languages,
/// tasks, `<|notimestamps|>`), then 1,501 time tokens `<|0.00|>` … `<|30.00|>`, 0.02 s apart.
///
/// Text tokens are stored as GPT-2 byte-level strings: every byte is shown as one printable character
/// (printable ASCII and Latin-1 bytes as themselves, the other 68 bytes as U+0100 onwards, in byte
/// order). Decoding maps each character back to its byte and reads the joined bytes as UTF-8, so a
/// character split across tokens comes out whole once all of its tokens are joined.
public struct WhisperTokenizer: Sendable {
    /// The bytes of every text token (empty for special and time tokens).
    private let bytes: [[UInt8]]
    /// The vocabulary strings as stored (special tokens as `<|…|>`).
    public let tokens: [String]
    public let special: WhisperSpecialTokens
    public let languages: [WhisperLanguage]

    init(vocabulary: [UInt8], special: WhisperSpecialTokens, languages: [WhisperLanguage], vocabularySize: Int,
         fileName: String) throws {
        let lines = vocabulary.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
        guard lines.count == vocabularySize else {
            throw SpeechModelError(.inconsistent, "\(fileName): the vocabulary has \(lines.count) tokens, the architecture \(vocabularySize)")
        }
        let table = WhisperTokenizer.byteForCharacter()
        var tokens: [String] = []
        var bytes: [[UInt8]] = []
        tokens.reserveCapacity(lines.count)
        bytes.reserveCapacity(lines.count)
        for (id, line) in lines.enumerated() {
            let text = String(decoding: line, as: UTF8.self)
            tokens.append(text)
            if id < special.endOfText {
                var raw: [UInt8] = []
                for scalar in text.unicodeScalars {
                    guard Int(scalar.value) < table.count, table[Int(scalar.value)] >= 0 else {
                        throw SpeechModelError(.inconsistent, "\(fileName): text token \(id) holds a character outside the byte-level alphabet")
                    }
                    raw.append(UInt8(table[Int(scalar.value)]))
                }
                bytes.append(raw)
            } else {
                bytes.append([])
            }
        }
        self.tokens = tokens
        self.bytes = bytes
        self.special = special
        self.languages = languages
    }

    /// GPT-2's byte-to-character table inverted: index = character code, value = byte (−1: no byte).
    static func byteForCharacter() -> [Int] {
        var table = [Int](repeating: -1, count: 512)
        var next = 256
        for byte in 0..<256 {
            let printable = (33...126).contains(byte) || (161...172).contains(byte) || (174...255).contains(byte)
            if printable {
                table[byte] = byte
            } else {
                table[next] = byte
                next += 1
            }
        }
        return table
    }

    /// Whether `id` is a time token.
    public func isTimestamp(_ id: Int) -> Bool { id >= special.timestampBegin && id < tokens.count }

    /// Seconds of a time token (0.02 s steps from `<|0.00|>`).
    public func time(of id: Int) -> Double { Double(id - special.timestampBegin) * 0.02 }

    /// The text of a token sequence: text tokens joined and read as UTF-8 (invalid bytes become U+FFFD);
    /// special and time tokens are left out.
    public func decode(_ ids: [Int]) -> String {
        var joined: [UInt8] = []
        for id in ids where id >= 0 && id < special.endOfText { joined += bytes[id] }
        return String(decoding: joined, as: UTF8.self)
    }

    /// The raw bytes of one text token (empty for other tokens).
    public func bytes(of id: Int) -> [UInt8] { id >= 0 && id < bytes.count ? bytes[id] : [] }
}
