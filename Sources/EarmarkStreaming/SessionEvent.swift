import EarmarkAudio
import EarmarkCatalog
import EarmarkMatching
import Foundation

/// A source of time for predicting where a matched track has got to, in seconds.
///
/// Live input uses ``MonotonicClock``; tests inject a ``ManualClock`` and move it themselves.
public protocol SessionClock: Sendable {
    /// Seconds on this clock's own scale (only differences matter).
    func now() -> Double
}

/// The system's monotonic clock (unaffected by changes to the wall-clock time).
public struct MonotonicClock: SessionClock {
    public init() {}
    public func now() -> Double { monotonicSeconds() }
}

/// A clock that moves only when told to; for tests and simulations.
public final class ManualClock: SessionClock {
    private let time: LockedValue<Double>
    public init(_ start: Double = 0) { time = LockedValue(start) }
    public func now() -> Double { time.withLock { $0 } }
    /// Moves the clock forward (or sets it, with `to:`).
    public func advance(by seconds: Double) { time.withLock { $0 += seconds } }
    public func set(to seconds: Double) { time.withLock { $0 = seconds } }
}

/// A track identified in a stream.
public struct StreamMatch: Sendable, Codable, Equatable {
    /// The match as file matching reports it, for the stretch of the stream it was found in:
    /// `match.matchOffset` is the position in the track at stream time ``streamTime``.
    public var match: Match
    /// Session seconds (from the first sample appended) where the matched stretch starts.
    public var streamTime: Double
    /// Session seconds of the newest audio received when the match was made (peaks settle about half a
    /// second behind it, so the matched stretch ends a little earlier).
    public var detectedAt: Double
    /// The position in the track (seconds) when the event was made; see ``predictedCurrentMatchOffset(at:)``.
    public var predictedCurrentMatchOffset: Double
    /// Clock reading that `predictedCurrentMatchOffset` belongs to.
    public var clockTime: Double
    /// True when this track was already the current match and is now reported at another position: a seek,
    /// a loop, or a repeat of the music that the earlier report could not tell apart from this place (it
    /// then listed this place among its ``Match/alternativeOffsets``). False for a newly identified track.
    public var relocated: Bool

    public init(match: Match, streamTime: Double, detectedAt: Double, predictedCurrentMatchOffset: Double,
                clockTime: Double, relocated: Bool = false) {
        self.match = match
        self.streamTime = streamTime
        self.detectedAt = detectedAt
        self.predictedCurrentMatchOffset = predictedCurrentMatchOffset
        self.clockTime = clockTime
        self.relocated = relocated
    }

    /// Where the track has got to at clock reading `now`, assuming it keeps playing at the matched speed.
    public func predictedCurrentMatchOffset(at now: Double) -> Double {
        predictedCurrentMatchOffset + match.timeScale * (now - clockTime)
    }
}

/// What a streaming session reports, in stream order.
public enum SessionEvent: Sendable, Equatable {
    /// A track was identified: the first one, a different one, or the same one at another position
    /// (``StreamMatch/relocated``). The same track playing on does not repeat the event.
    case match(StreamMatch)
    /// Nothing identified: after a window's worth of audio without a match, or once the matched track
    /// stopped matching (`previous` is its id). Reported once per change, not per attempt.
    case noMatch(at: Double, previous: Int64?)
    /// The input skipped: its timestamps jumped by `gap` seconds (negative: back) at stream time `at`.
    case discontinuity(at: Double, gap: Double)
    /// Matching fell behind and `seconds` of the oldest unprocessed audio were thrown away at `at`.
    case dropped(at: Double, seconds: Double)
    /// A failure that ended or interrupted matching (a damaged catalog, …).
    case error(at: Double, message: String)
    /// The stream ended after `at` seconds (always the last event).
    case ended(at: Double)

    /// Stream time of the event, in seconds.
    public var time: Double {
        switch self {
        case .match(let m): return m.detectedAt
        case .noMatch(let t, _), .discontinuity(let t, _), .dropped(let t, _), .error(let t, _), .ended(let t): return t
        }
    }
}

extension SessionEvent: Encodable {
    private enum Keys: String, CodingKey {
        case event, time, track, matchOffset, predictedCurrentMatchOffset, streamTime, confidence, score, significance
        case frequencySkew, timeScale, alternativeOffsets, relocated, previousTrack, gap, seconds, message
    }

    /// One flat JSON object with an `event` field: match, noMatch, discontinuity, dropped, error or end.
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: Keys.self)
        try c.encode(time, forKey: .time)
        switch self {
        case .match(let s):
            try c.encode("match", forKey: .event)
            try c.encode(s.match.track, forKey: .track)
            try c.encode(s.match.matchOffset, forKey: .matchOffset)
            try c.encode(s.streamTime, forKey: .streamTime)
            try c.encode(s.predictedCurrentMatchOffset, forKey: .predictedCurrentMatchOffset)
            try c.encode(s.match.confidence, forKey: .confidence)
            try c.encode(s.match.score, forKey: .score)
            try c.encode(s.match.significance, forKey: .significance)
            try c.encode(s.match.frequencySkew, forKey: .frequencySkew)
            try c.encode(s.match.timeScale, forKey: .timeScale)
            try c.encode(s.match.alternativeOffsets, forKey: .alternativeOffsets)
            try c.encode(s.relocated, forKey: .relocated)
        case .noMatch(_, let previous):
            try c.encode("noMatch", forKey: .event)
            try c.encode(previous, forKey: .previousTrack)
        case .discontinuity(_, let gap):
            try c.encode("discontinuity", forKey: .event)
            try c.encode(gap, forKey: .gap)
        case .dropped(_, let seconds):
            try c.encode("dropped", forKey: .event)
            try c.encode(seconds, forKey: .seconds)
        case .error(_, let message):
            try c.encode("error", forKey: .event)
            try c.encode(message, forKey: .message)
        case .ended:
            try c.encode("end", forKey: .event)
        }
    }
}

/// A value behind a lock, safe to share between threads (a session's queue, the server's shared state).
public final class LockedValue<Value>: @unchecked Sendable {
    // Every access goes through `lock`, which is what makes the unchecked conformance sound.
    private let lock = NSLock()
    private var value: Value
    public init(_ value: Value) { self.value = value }
    /// Runs `body` on the value with the lock held.
    public func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
