import Foundation

/// Identifies clips (audio files or `.earsig` signature files) against one open catalog.
///
/// ```swift
/// let recognizer = try Recognizer(catalogPath: Catalog.defaultPath)
/// let result = try recognizer.match(path: "clip.wav")
/// print(result.matches.first?.track.title ?? "no match")
/// ```
public final class Recognizer {
    public let matcher: Matcher

    /// - Parameter options: nil: the defaults of the catalog's landmark design (``MatchOptions/defaults(for:)``).
    public init(catalogPath: String, options: MatchOptions? = nil, busyTimeout: Double = 10) throws {
        matcher = Matcher(catalog: try CatalogStores.open(catalogPath, access: .read, busyTimeout: busyTimeout), options: options)
    }

    /// Decodes (or reads) `path` and matches it (see ``match(_:progress:)``).
    public func match(path: String) throws -> MatchResult {
        let f = try Fingerprinter.fingerprint(path: path, configuration: matcher.configuration, digest: false)
        return try match(f.signature)
    }

    /// Decodes `path` once, matches it, measures its loudness and, with a `sound` model, classifies it
    /// (both nil for a signature file). `progress` gets (seconds matched, seconds in all) of a long recording.
    public func matchAnalyzing(path: String, sound: SoundModel? = nil, progress: (Double, Double) -> Void = { _, _ in })
        throws -> (result: MatchResult, loudness: LoudnessResult?, sound: SoundAnalysis?) {
        let f = try Fingerprinter.fingerprint(path: path, configuration: matcher.configuration, digest: false,
                                              analyses: Analyses(loudness: true, sound: sound))
        return (try match(f.signature, progress: progress), f.loudness, f.sound)
    }

    /// What the catalog stored about `match`'s track (`catalog add --analyze`), at the matched stretch
    /// of the reference: the key range covering most of it and the tempo of the beats inside it.
    public func context(of match: Match) throws -> MatchContext {
        let stored = try matcher.catalog.analyses(trackID: match.track.id)
        let (a, b) = (match.referenceStart, max(match.referenceEnd, match.referenceStart))
        var context = MatchContext()
        if let data = stored.first(where: { $0.kind == KeyResult.kind }), let key = try? JSONDecoder().decode(KeyResult.self, from: data.json) {
            context.key = key.ranges.max { x, y in (min(b, x.end) - max(a, x.start)) < (min(b, y.end) - max(a, y.start)) }
        }
        if let data = stored.first(where: { $0.kind == RhythmResult.kind }),
           let rhythm = try? JSONDecoder().decode(RhythmResult.self, from: data.json) {
            let inside = rhythm.beats.filter { $0 >= a && $0 <= b }
            if inside.count >= 3, let first = inside.first, let last = inside.last, last > first {
                context.bpm = 60 * Double(inside.count - 1) / (last - first)
            } else {
                context.bpm = rhythm.bpm
            }
        }
        return context
    }

    /// Matches a signature: as one clip, or, when longer than ``Matcher/longQueryDuration``, window by window,
    /// with one match per stretch in which a track was heard (``Matcher/matchSegments(_:window:hop:progress:)``).
    public func match(_ signature: Signature, progress: (Double, Double) -> Void = { _, _ in }) throws -> MatchResult {
        guard signature.duration > Matcher.longQueryDuration else { return try matcher.match(signature) }
        return try matcher.matchSegments(signature) { progress($0, signature.duration) }
    }
}

/// Stored music metadata of a matched track at the matched stretch.
public struct MatchContext: Codable, Sendable, Equatable {
    /// The key range covering most of the matched stretch.
    public var key: KeyRange?
    /// Beats per minute of the beats inside the matched stretch (the track's overall tempo when it holds too few).
    public var bpm: Double?
    public init(key: KeyRange? = nil, bpm: Double? = nil) {
        self.key = key
        self.bpm = bpm
    }
}
