import EarmarkCatalog
import EarmarkMatching
import EarmarkSignature

/// How a stream is matched.
public struct StreamingOptions: Sendable, Equatable {
    /// Seconds of the most recent audio each attempt matches. Default 12.
    public var window: Double = 12
    /// Stream seconds between attempts. Default 1.
    public var interval: Double = 1
    /// Seconds of audio needed before the first attempt. Default 2.
    public var firstAttempt: Double = 2
    /// Skews (speed, tempo, pitch changes; ``MatchOptions/skewTrials``, nearest first) tried per attempt
    /// while nothing matches as is. Each costs about as much as a plain attempt, so the grid is spread
    /// over successive attempts, round and round; 0 never searches skews. Default 4.
    public var skewTrialsPerAttempt = 4
    /// A match at least this significant (``Match/significance``) is reported at once; a weaker one
    /// (above ``MatchOptions/minimumSignificance``) only when the next attempt finds the same track at
    /// the same position. Default 12.
    public var immediateSignificance: Double = 12
    /// A matched track counts as gone after this many seconds of audio without it. Default 6.
    public var lostAfter: Double = 6
    /// At most this many seconds of audio wait to be processed; when matching falls behind, the
    /// oldest is dropped (and reported). Default 10.
    public var maximumBacklog: Double = 10
    /// When the backlog is full: true drops the oldest audio (live input must not wait), false makes
    /// ``StreamingSession/append(_:)`` wait for room (replaying a file as fast as it decodes). Default true.
    public var dropsWhenBehind = true
    /// Decision rules of each attempt. nil (the default): ``matchOptions(for:)`` of the catalog's landmark
    /// design, as file matching takes ``MatchOptions/defaults(for:)``.
    public var match: MatchOptions? = nil

    public init() {}

    /// The decision rules of a stream's attempts on a catalog of `configuration`'s landmark design: file
    /// matching's (``MatchOptions/defaults(for:)``), with the same floors on aligned hashes for every design.
    ///
    /// An attempt every second meets thousands of chances an hour, and non-catalog music fits some track
    /// over a second or two now and then (a look-alike: same key, same figure), so a stream asks for at
    /// least ``minimumHitsFloor`` aligned hashes to match at all and ``supportingHitsFloor`` for the hash
    /// bonus. The floors are counts, not multiples of file matching's: a design's defaults are lower when
    /// its keys are rarer by chance, but a look-alike stretch aligns about as many triplets as pairs (the
    /// reference keeps 3 of either per anchor): with triplets, 5 aligned (2.5 × the file default) and 10 (the
    /// former pair floor) each let non-catalog music match once in 82 minutes, at 11 (listen bench,
    /// docs/benchmarks.md). A match that covers only part of the window does not search skews: there a
    /// track often fills only part of the window, and the skew grid is spread over attempts instead.
    public static func matchOptions(for configuration: SignatureConfiguration) -> MatchOptions {
        var m = MatchOptions.defaults(for: configuration)
        m.skewWhenPartial = false
        m.minimumHits = max(m.minimumHits, minimumHitsFloor)
        m.supportingHits = max(m.supportingHits, supportingHitsFloor)
        return m
    }

    /// Aligned distinct hashes a stream's match needs at least, whatever the landmark design. 12.
    public static let minimumHitsFloor = 12
    /// Aligned distinct hashes a stream's match needs at least for the hash bonus, whatever the design. 15.
    public static let supportingHitsFloor = 15

    public static let `default` = StreamingOptions()
}

/// The synchronous core of a streaming session: 44.1 kHz mono audio in, ``SessionEvent``s out.
///
/// Audio is fingerprinted as it arrives (one incremental ``SignatureGenerator``), the settled peaks
/// of the last ``StreamingOptions/window`` seconds are kept, and every ``StreamingOptions/interval``
/// seconds of stream they are matched as one clip. Attempts are scheduled on stream time, in
/// steps of 0.1 s whatever the size of the appended buffers, so the same audio always gives the same
/// events. ``StreamingSession`` runs it on its own thread for live input.
public final class StreamMatcher {
    public let options: StreamingOptions
    /// The decision rules of each attempt: ``StreamingOptions/match``, or when that is nil
    /// ``StreamingOptions/matchOptions(for:)`` of the catalog's landmark design.
    public let matchOptions: MatchOptions
    private let matcher: Matcher
    private let clock: (any SessionClock)?
    private let configuration: SignatureConfiguration
    private let generator: SignatureGenerator
    /// Settled peaks of the window, by frame; `peaks[peakStart...]` are live.
    private var peaks: [Peak] = []
    private var peakStart = 0
    /// Stream seconds already appended are `generator.duration`; timestamps are shifted by this
    /// after the input's clock went backwards.
    private var timeShift = 0.0
    private var nextAttempt: Double
    private var skewCursor = 0
    /// Clock reading and stream time of the newest audio, to map stream time to the clock.
    private var latestClock: Double?
    private var current: Current?
    /// A weak match waiting for the next attempt to confirm it.
    private var pending: (track: Int64, alignment: Double, timeScale: Double)?
    private var reportedNoMatch = false
    private var finished = false

    private struct Current {
        var track: Int64
        /// Track position at stream time 0 on the matched line, and its slope.
        var alignment: Double
        var timeScale: Double
        var frequencySkew: Double
        /// Stream time of the end of the newest audio that matched it.
        var lastSeen: Double
        func position(atStream t: Double) -> Double { alignment + timeScale * t }
    }

    /// - Parameters:
    ///   - matcher: matches each window; owned by this object from now on.
    ///   - clock: moves the predicted offset; nil uses stream time (replaying a file faster than real time).
    public init(matcher: Matcher, options: StreamingOptions = .default, clock: (any SessionClock)? = nil) {
        self.matcher = matcher
        self.options = options
        self.clock = clock
        configuration = matcher.configuration
        matchOptions = options.match ?? StreamingOptions.matchOptions(for: matcher.configuration)
        generator = SignatureGenerator(configuration: configuration)
        nextAttempt = options.firstAttempt
    }

    /// Seconds of stream so far, gaps included.
    public var streamDuration: Double { generator.duration }

    /// Appends 44.1 kHz mono samples and returns the events they caused.
    /// - Parameters:
    ///   - time: stream time of the first sample, or nil to continue where the last buffer ended.
    ///     A jump forward is a gap; a jump back is reported and the audio continues at the current end.
    ///   - clockTime: reading of the session clock when the buffer arrived (nil: read it now).
    public func append(_ samples: [Float], at time: Double? = nil, clockTime: Double? = nil) -> [SessionEvent] {
        guard !finished else { return [] }
        var events: [SessionEvent] = []
        var start: Double? = nil
        if let t = time, t.isFinite {
            let shifted = t + timeShift
            let end = generator.duration
            let tolerance = 1.5 / configuration.sampleRate
            if shifted > end + tolerance {
                events.append(.discontinuity(at: end, gap: shifted - end))
                start = shifted
            } else if shifted < end - tolerance {
                events.append(.discontinuity(at: end, gap: shifted - end))
                timeShift += end - shifted
            }
        }
        let arrival = clockTime ?? clock?.now()
        // Feed in pieces that end on the stream's 0.1-s marks, so attempts fall on the same stream
        // times whatever the buffer sizes.
        let piece = Int(configuration.sampleRate / 10)
        let startPosition = Int(((start ?? generator.duration) * configuration.sampleRate).rounded())
        var i = 0
        repeat {
            let j = min(samples.count, i + piece - (startPosition + i) % piece)
            samples[i..<j].withUnsafeBufferPointer { buf in
                try? generator.append(buf, at: i == 0 ? start : nil)
            }
            if let arrival {
                // The clock reading of this piece's end, as if the buffer's audio arrived at the pace it plays.
                latestClock = arrival - Double(samples.count - j) / configuration.sampleRate
            }
            i = j
            collectPeaks()
            if (startPosition + j) % piece == 0, generator.settledDuration >= nextAttempt {
                events += attempt(at: generator.settledDuration)
            }
        } while i < samples.count
        return events
    }

    /// Ends the stream: settles the last peaks, makes a last attempt and returns its events, the last of
    /// them ``SessionEvent/ended(at:)``.
    public func finish() -> [SessionEvent] {
        guard !finished else { return [] }
        generator.finish()
        collectPeaks()
        var events: [SessionEvent] = []
        let end = generator.settledDuration
        if end >= min(1, options.firstAttempt), end > nextAttempt - options.interval + 0.25 {
            events += attempt(at: end)
        }
        if current == nil, !reportedNoMatch {
            reportedNoMatch = true
            events.append(.noMatch(at: end, previous: nil))
        }
        finished = true
        return events + [.ended(at: generator.duration)]
    }

    private func collectPeaks() {
        let settled = generator.takeSettledPeaks()
        if !settled.isEmpty { peaks += settled }
        // Drop peaks that have left the window (in batches, to keep the array cheap).
        let oldest = UInt32(max(0, (generator.settledDuration - options.window) / configuration.frameDuration))
        while peakStart < peaks.count, peaks[peakStart].frame < oldest { peakStart += 1 }
        if peakStart > 4096, peakStart * 2 > peaks.count {
            peaks.removeFirst(peakStart)
            peakStart = 0
        }
    }

    private func attempt(at horizon: Double) -> [SessionEvent] {
        nextAttempt = horizon + options.interval
        let fd = configuration.frameDuration
        let startFrame = UInt32(max(0, ((horizon - options.window) / fd).rounded(.up)))
        let endFrame = UInt32(horizon / fd)
        let windowStart = Double(startFrame) * fd
        var windowPeaks: [Peak] = []
        windowPeaks.reserveCapacity(peaks.count - peakStart)
        for p in peaks[peakStart...] where p.frame >= startFrame && p.frame < endFrame {
            var q = p
            q.frame -= startFrame
            windowPeaks.append(q)
        }
        let signature = Signature(configurationVersion: configuration.version, duration: horizon - windowStart,
                                  peaks: windowPeaks)
        // Skews cost a lookup each, so each attempt tries only a few, unless the current track is itself
        // skewed: then its skew is the one to keep checking.
        var attemptOptions = matchOptions
        // While the current track keeps matching as it is, a skew search could only find a worse fit of it.
        let confirmed = current.map { horizon - $0.lastSeen <= 1.5 * options.interval + 1 } ?? false
        let grid = matchOptions.skewTrials
        if !confirmed, options.skewTrialsPerAttempt > 0, !grid.isEmpty {
            // The next slice of the grid; the significance is charged for the whole grid.
            attemptOptions.skewTrials = (0..<min(grid.count, options.skewTrialsPerAttempt)).map { grid[(skewCursor + $0) % grid.count] }
            attemptOptions.skewSearchSize = grid.count
            skewCursor = (skewCursor + options.skewTrialsPerAttempt) % grid.count
        } else if let c = current, abs(c.timeScale - 1) > 0.002 || abs(c.frequencySkew) > 0.002 {
            attemptOptions.skewTrials = [Skew(time: c.timeScale, frequency: 1 + c.frequencySkew)]
        } else {
            attemptOptions.skewTrials = []
        }
        matcher.options = attemptOptions

        let result: MatchResult
        do {
            result = try matcher.match(signature)
        } catch is SignatureError {
            // Silence or too little sound in the window: nothing to match, which is not a failure.
            return noMatch(at: horizon)
        } catch {
            return [.error(at: horizon, message: "\(error)")]
        }
        // The track playing now is the one whose matched stretch reaches furthest into the window's end.
        let windowLength = horizon - windowStart
        let recent = StreamMatcher.decisive(result.matches).filter { $0.queryEnd >= windowLength - options.lostAfter / 2 }
        guard let best = recent.max(by: { ($0.queryEnd, $0.significance) < ($1.queryEnd, $1.significance) }) else {
            return noMatch(at: horizon)
        }
        let alignment = best.matchOffset - best.timeScale * windowStart
        let lastSeen = windowStart + best.queryEnd
        // Repetitive music can fit a short stretch at several places; while the current position is one
        // of them, it stands, so the report does not flip between repeats.
        let fits = [best.matchOffset] + best.alternativeOffsets
        if var c = current, c.track == best.track.id {
            if fits.contains(where: { abs(c.position(atStream: horizon) - ($0 - best.timeScale * windowStart + best.timeScale * horizon)) < 1.0 }) {
                c.lastSeen = max(c.lastSeen, lastSeen)
                current = c
                return []
            }
            // The same track elsewhere: a seek, a loop, or a better fit of a short ambiguous stretch of
            // repeating music. If the current position still fits the window nearly as well, it stands, so
            // two near-equal fits do not take turns.
            if let kept = try? matcher.evidence(of: signature, trackID: c.track, offset: c.position(atStream: windowStart),
                                                skew: Skew(time: c.timeScale, frequency: 1 + c.frequencySkew)),
               let found = try? matcher.evidence(of: signature, trackID: c.track, offset: best.matchOffset,
                                                 skew: Skew(time: best.timeScale, frequency: 1 + best.frequencySkew)),
               kept >= 0.8 * found {
                c.lastSeen = max(c.lastSeen, lastSeen)
                current = c
                return []
            }
        }
        // A stream makes an attempt every second, so a coincidence that passes the threshold once in a few
        // thousand clips would turn up every hour or so. A weak match is therefore reported only when the
        // next attempt finds the same track on the same line; a strong one at once.
        if best.significance < options.immediateSignificance {
            let line = (track: best.track.id, position: alignment + best.timeScale * horizon)
            defer { pending = (line.track, alignment, best.timeScale) }
            guard let p = pending, p.track == line.track,
                  abs(p.alignment + p.timeScale * horizon - line.position) < 1.0 else { return [] }
        }
        pending = nil
        let streamTime = windowStart + best.queryStart
        var m = best
        // Report the position at the start of the matched stretch, as a file match does for a clip.
        m.matchOffset = alignment + best.timeScale * streamTime
        m.alternativeOffsets = best.alternativeOffsets.map { $0 + best.timeScale * best.queryStart }
        // The newest audio is "now" (its arrival on the clock, or its stream time without a clock).
        let now = latestClock ?? generator.duration
        let predicted = alignment + best.timeScale * generator.duration
        let event = StreamMatch(match: m, streamTime: streamTime, detectedAt: generator.duration,
                                predictedCurrentMatchOffset: predicted, clockTime: now,
                                relocated: current?.track == best.track.id)
        current = Current(track: best.track.id, alignment: alignment, timeScale: best.timeScale,
                          frequencySkew: best.frequencySkew, lastSeen: lastSeen)
        reportedNoMatch = false
        return [.match(event)]
    }

    /// The matches a stream believes: those whose track leads the hash vote (more aligned hashes than any
    /// other candidate, or as many as another matched track: the same recording twice in the catalog), and
    /// those a believed leader outvotes (the track before a change). Quiet, sustained sound aligns hashes
    /// with many tracks at once; among thousands of attempts one of them can then pass peak verification
    /// by chance while the tracks that lead the vote fail it.
    static func decisive(_ matches: [Match]) -> [Match] {
        func leads(_ m: Match) -> Bool {
            m.score > m.runnerUpScore
                || (m.score == m.runnerUpScore && matches.contains { $0.track.id != m.track.id && $0.score == m.score })
        }
        let leaders = matches.filter(leads)
        return matches.filter { m in
            leads(m) || leaders.contains { $0.track.id != m.track.id && $0.score >= m.score }
        }
    }

    private func noMatch(at horizon: Double) -> [SessionEvent] {
        pending = nil
        if let c = current {
            guard horizon - c.lastSeen >= options.lostAfter else { return [] }
            current = nil
            reportedNoMatch = true
            return [.noMatch(at: horizon, previous: c.track)]
        }
        guard !reportedNoMatch, horizon >= options.window else { return [] }
        reportedNoMatch = true
        return [.noMatch(at: horizon, previous: nil)]
    }
}
