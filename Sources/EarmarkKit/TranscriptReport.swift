import Foundation

/// What `earmark transcribe --format json` prints for one file and `POST /v1/transcribe` answers:
/// `{path, model, language, languageProbability, duration, text, segments: [{start, end, text, words}], speech, error}`.
public struct TranscriptReport: Encodable, Sendable {
    /// A word and its time range, seconds.
    public struct Word: Encodable, Sendable {
        public var start: Double
        public var end: Double
        public var word: String
    }
    /// A segment and its time range; `words` only when they were asked for.
    public struct Segment: Encodable, Sendable {
        public var start: Double
        public var end: Double
        public var text: String
        public var words: [Word]?
    }
    public var path: String
    public var model: String
    public var language: String?
    public var languageProbability: Double?
    public var duration: Double?
    public var text: String?
    public var segments: [Segment] = []
    public var speech: [TimeRange]?
    public var error: String?

    public init(path: String, model: String, result: Transcription, words: Bool = false) {
        self.path = path
        self.model = model
        // Nothing read (no speech) and no language given: no language to report.
        let known = !(result.speech?.isEmpty ?? false) || result.languageProbability > 0
        language = known ? result.language : nil
        languageProbability = known ? result.languageProbability : nil
        duration = result.duration
        text = result.text
        segments = result.segments.map { s in
            Segment(start: s.start, end: s.end, text: s.text.trimmingCharacters(in: .whitespaces),
                    words: words ? s.words.map { Word(start: $0.start, end: $0.end, word: $0.text.trimmingCharacters(in: .whitespaces)) } : nil)
        }
        speech = result.speech
    }

    /// A file that could not be transcribed.
    public init(path: String, model: String, error: String) {
        self.path = path
        self.model = model
        self.error = error
    }

    enum CodingKeys: String, CodingKey { case path, model, language, languageProbability, duration, text, segments, speech, error }
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(path, forKey: .path)
        try c.encode(model, forKey: .model)
        try c.encode(language, forKey: .language)
        try c.encode(languageProbability, forKey: .languageProbability)
        try c.encode(duration, forKey: .duration)
        try c.encode(text, forKey: .text)
        try c.encode(segments, forKey: .segments)
        try c.encode(speech, forKey: .speech)
        try c.encode(error, forKey: .error)
    }
}
