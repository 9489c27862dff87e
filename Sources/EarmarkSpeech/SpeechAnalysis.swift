import Foundation

/// A recording's transcript as `catalog add --analyze` stores it with a track (kind `speech`) and
/// `match --transcribe` attaches it to a clip: language, segments and their words, times in seconds of the recording.
public struct SpeechAnalysis: Codable, Sendable, Equatable {
    public static let kind = "speech"
    public static let version = 1

    /// One word with its time range.
    public struct Word: Codable, Sendable, Equatable {
        public var start: Double
        public var end: Double
        /// The word with any punctuation attached, without its leading space.
        public var word: String

        public init(start: Double, end: Double, word: String) {
            self.start = start
            self.end = end
            self.word = word
        }
    }

    /// One stretch of text with its time range and words.
    public struct Segment: Codable, Sendable, Equatable {
        public var start: Double
        public var end: Double
        /// The segment's text, trimmed.
        public var text: String
        /// Its words (empty when word times were not asked for).
        public var words: [Word]

        public init(start: Double, end: Double, text: String, words: [Word] = []) {
            self.start = start
            self.end = end
            self.text = text
            self.words = words
        }
    }

    /// Name of the speech model that transcribed.
    public var model: String
    /// Whisper's code of the language transcribed.
    public var language: String
    /// Seconds of audio read.
    public var duration: Double
    /// The whole transcript, segments joined.
    public var text: String
    public var segments: [Segment]

    /// The analysis of a file's or a stream's final results.
    public init(model: String, duration: Double, results: [SpeechResult]) {
        self.model = model
        self.duration = duration
        let finals = results.filter(\.isFinal)
        language = finals.first { !$0.segments.isEmpty }?.language ?? finals.first?.language ?? ""
        segments = finals.flatMap(\.segments).map(Self.segment)
        text = finals.map(\.text).filter { !$0.isEmpty }.joined(separator: " ")
    }

    /// The analysis of a file transcription.
    public init(model: String, transcription: Transcription) {
        self.model = model
        duration = transcription.duration
        language = transcription.language
        segments = transcription.segments.map(Self.segment)
        text = transcription.text
    }

    /// A segment with its times to the millisecond (Whisper's steps are 20 ms; stream offsets only add float noise).
    static func segment(_ s: TranscriptSegment) -> Segment {
        func ms(_ t: Double) -> Double { (t * 1000).rounded() / 1000 }
        return Segment(start: ms(s.start), end: ms(s.end), text: s.text.trimmingCharacters(in: .whitespaces),
                       words: s.words.map { Word(start: ms($0.start), end: ms($0.end), word: $0.text.trimmingCharacters(in: .whitespaces)) })
    }

    /// Whether anything was said.
    public var hasSpeech: Bool { !segments.isEmpty }

    /// One line for people: language, segment count and the start of the text.
    public var summaryText: String {
        guard hasSpeech else { return "no speech" }
        let words = segments.reduce(0) { $0 + max($1.words.count, $1.text.split(separator: " ").count) }
        var quote = text
        if quote.count > 60 { quote = String(quote.prefix(57)) + "…" }
        return "\(language), \(segments.count) segment\(segments.count == 1 ? "" : "s"), \(words) word\(words == 1 ? "" : "s"): \u{201C}\(quote)\u{201D}"
    }
}
