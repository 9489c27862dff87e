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

    public init(catalogPath: String, options: MatchOptions = .default, busyTimeout: Double = 10) throws {
        let catalog = try Catalog(path: catalogPath, readOnly: true, busyTimeout: busyTimeout)
        matcher = Matcher(catalog: catalog, options: options)
    }

    /// Decodes (or reads) `path` and matches it.
    public func match(path: String) throws -> MatchResult {
        let f = try Fingerprinter.fingerprint(path: path, configuration: matcher.configuration, digest: false)
        return try matcher.match(f.signature)
    }

    /// Decodes `path` once, matches it, measures its loudness and, with a `sound` model, classifies it
    /// (both nil for a signature file).
    public func matchAnalyzing(path: String, sound: SoundModel? = nil)
        throws -> (result: MatchResult, loudness: LoudnessResult?, sound: SoundAnalysis?) {
        let f = try Fingerprinter.fingerprint(path: path, configuration: matcher.configuration, digest: false,
                                              loudness: true, sound: sound)
        return (try matcher.match(f.signature), f.loudness, f.sound)
    }

    /// The key the catalog stored for `match`'s track (kind `key`) over the matched stretch of the
    /// reference: the key range covering most of it; nil when no key was stored.
    public func keyAtMatch(_ match: Match) throws -> KeyRange? {
        guard let stored = try matcher.catalog.analyses(trackID: match.track.id).first(where: { $0.kind == KeyResult.kind }),
              let key = try? JSONDecoder().decode(KeyResult.self, from: stored.json) else { return nil }
        let (a, b) = (match.referenceStart, max(match.referenceEnd, match.referenceStart))
        return key.ranges.max { x, y in
            (min(b, x.end) - max(a, x.start)) < (min(b, y.end) - max(a, y.start))
        }
    }

    /// Matches a signature made elsewhere.
    public func match(_ signature: Signature) throws -> MatchResult {
        try matcher.match(signature)
    }
}
