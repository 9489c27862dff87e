import Foundation

/// The outcome for one clip: the object `earmark match --json` prints for it and `POST /v1/match` answers.
///
/// Both build it with ``Recognizer/report(path:name:sound:progress:)``, so the two cannot drift. Encoded, it is
/// `{path, matches, queryDuration, queryLandmarks, candidateHits, loudness, sound, error}`, with absent values as
/// null; each match carries the matched track's stored `key` and `bpm` at the matched stretch beside its own fields.
public struct ClipReport: Encodable, Sendable {
    /// The clip as the caller named it (a path on the command line; the `name` parameter over HTTP).
    public var path: String
    public var matches: [Match] = []
    /// Stored key and tempo of each match's track at the matched stretch (parallel to `matches`).
    public var contexts: [MatchContext] = []
    public var queryDuration: Double?
    public var queryLandmarks: Int?
    public var candidateHits: Int?
    /// EBU R 128 loudness of the clip (audio clips only).
    public var loudness: LoudnessResult?
    /// Sound classification of the clip (when asked for).
    public var sound: SoundAnalysis?
    /// What the clip says (when a transcript was asked for; encoded only then).
    public var transcript: SpeechAnalysis?
    /// Why the clip could not be matched (the command line reports failed clips in place).
    public var error: String?

    public init(path: String, result: MatchResult, loudness: LoudnessResult? = nil, sound: SoundAnalysis? = nil) {
        self.path = path
        self.loudness = loudness
        self.sound = sound
        matches = result.matches
        queryDuration = result.queryDuration
        queryLandmarks = result.queryLandmarks
        candidateHits = result.candidateHits
    }

    /// A clip that failed: empty matches, null numbers and `error`.
    public init(path: String, error: String) {
        self.path = path
        self.error = error
    }

    enum CodingKeys: String, CodingKey { case path, matches, queryDuration, queryLandmarks, candidateHits, loudness, sound, transcript, error }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(path, forKey: .path)
        try c.encode(matches.indices.map { MatchWithContext(match: matches[$0], context: contexts.indices.contains($0) ? contexts[$0] : MatchContext()) },
                     forKey: .matches)
        try c.encode(queryDuration, forKey: .queryDuration)   // null when absent
        try c.encode(queryLandmarks, forKey: .queryLandmarks)
        try c.encode(candidateHits, forKey: .candidateHits)
        try c.encode(loudness, forKey: .loudness)
        try c.encode(sound, forKey: .sound)
        try c.encodeIfPresent(transcript, forKey: .transcript)
        try c.encode(error, forKey: .error)
    }
}

/// A match as JSON, with the track's stored key and tempo at the matched stretch added to its fields.
struct MatchWithContext: Encodable {
    var match: Match
    var context: MatchContext
    enum CodingKeys: String, CodingKey { case key, bpm }
    func encode(to encoder: any Encoder) throws {
        try match.encode(to: encoder)
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(context.key, forKey: .key)
        try c.encode(context.bpm, forKey: .bpm)
    }
}

extension Recognizer {
    /// Decodes the clip at `path` once, matches it, measures its loudness, classifies it with a `sound` model,
    /// and adds each matched track's stored key and tempo: the report `earmark match` prints.
    /// - Parameters:
    ///   - name: what the report calls the clip (default: `path`).
    ///   - progress: (seconds matched, seconds in all) of a long recording.
    /// - Throws: ``AudioError`` or ``SignatureError`` for a clip that cannot be read or matched, ``CatalogError``
    ///   when the catalog fails.
    ///   - speech: with a `sound` model, also transcribe the clip's speech with this model (``ClipReport/transcript``).
    public func report(path: String, name: String? = nil, sound: SoundModel? = nil, speech: SpeechModel? = nil,
                       progress: (Double, Double) -> Void = { _, _ in }) throws -> ClipReport {
        let f = try Fingerprinter.fingerprint(path: path, configuration: matcher.configuration, digest: false,
                                              analyses: Analyses(loudness: true, sound: sound, speech: speech))
        let result = try match(f.signature, progress: progress)
        var report = ClipReport(path: name ?? path, result: result, loudness: f.loudness, sound: f.sound)
        report.transcript = f.speech
        report.contexts = try result.matches.map { try context(of: $0) }
        return report
    }
}

/// The JSON object `catalog info --json` prints and `GET /v1/tracks/{id}` answers: the track's fields (absent
/// ones left out) with `"analysis": {kind: result}` holding every stored analysis in its stored shape.
public func trackInfoJSON(_ track: Track, analyses: [TrackAnalysis], prettyPrinted: Bool) throws -> Data {
    var object = try JSONSerialization.jsonObject(with: JSONEncoder().encode(track)) as? [String: Any] ?? [:]
    var analysis: [String: Any] = [:]
    for a in analyses { analysis[a.kind] = try JSONSerialization.jsonObject(with: a.json) }
    object["analysis"] = analysis
    var options: JSONSerialization.WritingOptions = [.sortedKeys, .withoutEscapingSlashes]
    if prettyPrinted { options.insert(.prettyPrinted) }
    return try JSONSerialization.data(withJSONObject: object, options: options)
}
