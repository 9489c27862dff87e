import EarmarkSignature
import Foundation

/// Long recordings (a radio hour, a DJ set) hold many tracks, each for a while. Matching one as a single
/// clip would name one track and hold every hit of hours of audio at once, so they are matched window
/// by window, and the windows' matches of the same track at a consistent place are joined into one
/// stretch: what was heard, from when to when in the recording, and where in the track.
extension Matcher {
    /// Clips longer than this (seconds) are matched with ``matchSegments(_:window:hop:progress:)`` by `match`.
    public static let longQueryDuration: Double = 60

    /// Matches `signature` in windows of `window` seconds every `hop` seconds and returns one ``Match`` per
    /// stretch of the recording in which a track was heard, in order of time. Each match's `queryStart`/
    /// `queryEnd` are the stretch in the recording, `referenceStart`/`referenceEnd` the same stretch in the
    /// track, `matchOffset` the track's position at the recording's start; its score, evidence and skew are
    /// those of its most significant window. `progress` gets the seconds of the recording done so far.
    /// Windows without usable sound match nothing; ``MatchOptions/maximumMatches`` applies per window.
    public func matchSegments(_ signature: Signature, window: Double = 20, hop: Double = 10,
                              progress: (Double) -> Void = { _ in }) throws -> MatchResult {
        try signature.validateStructure(configuration: configuration)
        let fd = configuration.frameDuration
        let windowFrames = UInt32(max(1, (window / fd).rounded())), hopFrames = UInt32(max(1, (hop / fd).rounded()))
        let totalFrames = UInt32(min(Double(UInt32.max - windowFrames), (signature.duration / fd).rounded(.up)))
        var segments: [Segment] = []
        var landmarks = 0, hits = 0
        var start: UInt32 = 0
        while true {
            let piece = signature.window(frames: start..<(start + windowFrames), configuration: configuration)
            let offset = Double(start) * fd
            do {
                let result = try match(piece)
                landmarks += result.queryLandmarks
                hits += result.candidateHits
                for m in result.matches { Matcher.join(m, at: offset, hop: hop, into: &segments) }
            } catch let e as SignatureError where e.code == .signatureInvalid || e.code == .signatureDurationInvalid {
                // Silence, or the last sliver of the recording: nothing to hear here.
            }
            progress(min(signature.duration, offset + piece.duration))
            if start + windowFrames >= totalFrames { break }
            start += hopFrames
        }
        let matches = segments.sorted { $0.clipStart < $1.clipStart }.map { $0.match }
        return MatchResult(matches: matches, queryDuration: signature.duration, queryLandmarks: landmarks, candidateHits: hits)
    }

    /// One track heard over a stretch of a long recording, grown window by window.
    struct Segment {
        var best: Match
        var clipStart: Double, clipEnd: Double
        var referenceStart: Double, referenceEnd: Double

        var match: Match {
            var m = best
            m.queryStart = clipStart
            m.queryEnd = clipEnd
            m.referenceStart = referenceStart
            m.referenceEnd = referenceEnd
            m.matchOffset = referenceStart - clipStart * best.timeScale
            m.alternativeOffsets = []
            return m
        }
    }

    /// Adds window match `m` (its times relative to the window, which starts `offset` s into the recording)
    /// to the stretch of the same track it continues, or starts a new one. It continues a stretch when it
    /// begins no later than a hop after the stretch ends and lies on its line (track position − recording
    /// time × time scale) within a second.
    static func join(_ m: Match, at offset: Double, hop: Double, into segments: inout [Segment]) {
        let clipStart = offset + m.queryStart, clipEnd = offset + m.queryEnd
        for i in segments.indices.reversed() where segments[i].best.track.id == m.track.id {
            let s = segments[i]
            guard clipStart <= s.clipEnd + hop + 1 else { continue }
            let predicted = s.referenceEnd + (clipStart - s.clipEnd) * s.best.timeScale
            guard abs(predicted - m.referenceStart) <= 1 else { continue }
            segments[i].clipStart = min(s.clipStart, clipStart)
            segments[i].referenceStart = min(s.referenceStart, m.referenceStart)
            if clipEnd > s.clipEnd {
                segments[i].clipEnd = clipEnd
                segments[i].referenceEnd = m.referenceEnd
            }
            if m.significance > s.best.significance { segments[i].best = m }
            return
        }
        segments.append(Segment(best: m, clipStart: clipStart, clipEnd: clipEnd,
                                referenceStart: m.referenceStart, referenceEnd: m.referenceEnd))
    }
}
