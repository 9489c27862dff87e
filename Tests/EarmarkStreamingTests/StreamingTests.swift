import EarmarkAudio
@testable import EarmarkCatalog
@testable import EarmarkMatching
@testable import EarmarkStreaming
import EarmarkTestSupport
import Foundation
import Testing

/// The shared catalog of the real reference tracks, with what these tests stream from it.
typealias StreamingFixture = ReferenceCatalog

extension ReferenceCatalog {
    func core(options: StreamingOptions = .default, clock: (any SessionClock)? = nil) throws -> StreamMatcher {
        StreamMatcher(matcher: Matcher(catalog: try Catalog(path: path, readOnly: true)),
                      options: options, clock: clock)
    }

    /// `seconds` of reference track `stem` from `offset`, as 44.1 kHz mono.
    func samples(_ stem: String, from offset: Double, seconds: Double) throws -> [Float] {
        let all = try Fixtures.decode(try audio.reference(stem))
        let a = Int(offset * 44_100), b = min(all.count, a + Int(seconds * 44_100))
        return Array(all[a..<b])
    }
}

/// Feeds `samples` in buffers of varying size (seeded), advancing the clock by each buffer's duration.
func feed(_ core: StreamMatcher, _ samples: [Float], clock: ManualClock? = nil, seed: UInt64 = 1,
          startingAt time: Double? = nil) -> [SessionEvent] {
    var rng = SeededRandom(seed: seed)
    var events: [SessionEvent] = []
    var i = 0
    var first = true
    while i < samples.count {
        let n = min(samples.count - i, 512 + Int(rng.next() % 12_000))
        clock?.advance(by: Double(n) / 44_100)
        events += core.append(Array(samples[i..<(i + n)]), at: first ? time : nil)
        first = false
        i += n
    }
    return events
}

extension SessionEvent {
    var streamMatch: StreamMatch? { if case .match(let m) = self { m } else { nil } }
}

@Suite("Streaming matcher (injected clock)")
struct StreamMatcherTests {
    @Test("a track is found within seconds, with its offset, and not reported again while it plays")
    func findsTrackOnce() async throws {
        let f = try await StreamingFixture.shared.value()
        let clock = ManualClock(100)
        let core = try f.core(clock: clock)
        let events = feed(core, try f.samples("pingus-4", from: 30, seconds: 20), clock: clock) + core.finish()
        let matches = events.compactMap(\.streamMatch)
        #expect(matches.count == 1, "\(events)")
        let m = try #require(matches.first)
        #expect(m.match.track.id == f.ids["pingus-4"])
        #expect(m.detectedAt <= 4, "first match only after \(m.detectedAt) s")
        // The truth: stream time t is track time 30 + t.
        #expect(abs(m.match.matchOffset - (30 + m.streamTime)) < 0.1)
        #expect(abs(m.predictedCurrentMatchOffset - (30 + (m.clockTime - 100))) < 0.2)
        #expect(abs(m.match.frequencySkew) < 0.005)
        #expect(!events.contains { if case .noMatch = $0 { true } else { false } })
    }

    @Test("the predicted offset moves with the injected clock, not with processing")
    func predictedOffsetFollowsClock() async throws {
        let f = try await StreamingFixture.shared.value()
        let clock = ManualClock(0)
        let core = try f.core(clock: clock)
        let m = try #require(feed(core, try f.samples("pingus-5", from: 10, seconds: 6), clock: clock)
            .compactMap(\.streamMatch).first)
        let before = m.predictedCurrentMatchOffset(at: clock.now())
        clock.advance(by: 7.5)
        #expect(abs(m.predictedCurrentMatchOffset(at: clock.now()) - before - 7.5) < 0.01)
        // 13.5 s into the stream, the track is at 23.5 s.
        #expect(abs(m.predictedCurrentMatchOffset(at: clock.now()) - (10 + clock.now())) < 0.25,
                "\(m.predictedCurrentMatchOffset) at \(m.clockTime), now \(clock.now())")
    }

    @Test("song A then song B: a new match for B, each with the right offset")
    func reportsTrackChange() async throws {
        let f = try await StreamingFixture.shared.value()
        let core = try f.core()
        let a = try f.samples("goin_march", from: 20, seconds: 15)
        let b = try f.samples("pingus-6", from: 5, seconds: 15)
        let events = feed(core, a + b) + core.finish()
        let matches = events.compactMap(\.streamMatch)
        #expect(matches.map(\.match.track.id) == [f.ids["goin_march"], f.ids["pingus-6"]], "\(events)")
        guard matches.count == 2 else { return }
        #expect(abs(matches[0].match.matchOffset - (20 + matches[0].streamTime)) < 0.5)
        #expect(abs(matches[1].match.matchOffset - (5 + matches[1].streamTime - 15)) < 0.5)
        // B is recognised within a few seconds of starting.
        #expect(matches[1].detectedAt - 15 <= 5)
    }

    @Test("a seek within the playing track is a relocated match at the new place; a new track is not relocated")
    func seekIsRelocation() async throws {
        let f = try await StreamingFixture.shared.value()
        let core = try f.core()
        // goin_march from 20 s for 15 s, then the same track from 70 s (a seek forward by 35 s).
        let events = feed(core, try f.samples("goin_march", from: 20, seconds: 15)
            + f.samples("goin_march", from: 70, seconds: 15)) + core.finish()
        let matches = events.compactMap(\.streamMatch)
        #expect(matches.map(\.relocated) == [false, true], "\(events)")
        guard matches.count == 2 else { return }
        #expect(matches.allSatisfy { $0.match.track.id == f.ids["goin_march"] })
        #expect(abs(matches[0].match.matchOffset - (20 + matches[0].streamTime)) < 0.5, "\(matches[0])")
        #expect(abs(matches[1].match.matchOffset - (70 + matches[1].streamTime - 15)) < 0.5, "\(matches[1])")
        // A window gives one place per track, so the new place is seen once it outweighs the old one in the
        // 12-s window (about half of it), later than a new track would be.
        #expect(matches[1].detectedAt - 15 <= 8, "the seek was reported only at \(matches[1].detectedAt) s")
        #expect(!events.contains { if case .noMatch = $0 { true } else { false } }, "\(events)")
    }

    @Test("a stream played 4 % fast is found, with its skew, and followed at that speed")
    func skewedStream() async throws {
        let f = try await StreamingFixture.shared.value()
        let dir = try TemporaryDirectory("skewed")
        let fast = dir.file("fast.wav")
        // sox `speed 1.04`: pitch and tempo both 4 % up, as a radio speed-up.
        try Run.sox([try f.audio.reference("pingus-5").path, "-r", "44100", "-c", "1", "-b", "16", fast.path,
                     "trim", "20", "31.2", "speed", "1.04", "rate", "44100"])
        let core = try f.core()
        let events = feed(core, try Fixtures.decode(fast)) + core.finish()
        let matches = events.compactMap(\.streamMatch)
        let m = try #require(matches.first, "\(events)")
        #expect(matches.count == 1, "\(matches)")
        #expect(m.match.track.id == f.ids["pingus-5"])
        #expect(abs(m.match.frequencySkew - 0.04) < 0.005, "skew \(m.match.frequencySkew)")
        #expect(abs(m.match.timeScale - 1.04) < 0.005, "time scale \(m.match.timeScale)")
        // Stream time t is track time 20 + 1.04 t.
        #expect(abs(m.match.matchOffset - (20 + 1.04 * m.streamTime)) < 0.5, "\(m)")
        #expect(abs(m.predictedCurrentMatchOffset - (20 + 1.04 * m.detectedAt)) < 0.5, "\(m)")
    }

    @Test("a gap in the timestamps is reported and matching goes on")
    func survivesGap() async throws {
        let f = try await StreamingFixture.shared.value()
        let core = try f.core()
        let all = try f.samples("pingus-5", from: 0, seconds: 40)
        // 8 s played, 4 s missing (stream and track both move on), then the rest.
        var events = feed(core, Array(all[0..<(8 * 44_100)]))
        events += feed(core, Array(all[(12 * 44_100)...]), seed: 2, startingAt: 12)
        events += core.finish()
        let gaps = events.compactMap { e -> Double? in if case .discontinuity(_, let g) = e { g } else { nil } }
        #expect(gaps.count == 1 && abs(gaps[0] - 4) < 0.01, "\(events)")
        let matches = events.compactMap(\.streamMatch)
        // Same track, same line through the gap: one match event only.
        #expect(matches.count == 1 && matches.first?.match.track.id == f.ids["pingus-5"], "\(events)")
        #expect(!events.contains { if case .error = $0 { true } else { false } })
    }

    @Test("the same audio gives the same events whatever the buffer sizes")
    func deterministic() async throws {
        let f = try await StreamingFixture.shared.value()
        let samples = try f.samples("pingus-3", from: 40, seconds: 12)
        let one = feed(try f.core(), samples, seed: 7)
        let two = feed(try f.core(), samples, seed: 99)
        #expect(!one.isEmpty)
        #expect(one == two)
    }

    @Test("non-catalog music, speech and silence give no match, reported once")
    func noFalseMatch() async throws {
        let f = try await StreamingFixture.shared.value()
        var stream: [Float] = []
        for url in f.audio.negative + f.audio.speech { stream += try Fixtures.decode(url).prefix(20 * 44_100) }
        stream += [Float](repeating: 0, count: 5 * 44_100)
        let core = try f.core()
        let events = feed(core, stream) + core.finish()
        #expect(events.compactMap(\.streamMatch).isEmpty, "\(events.compactMap(\.streamMatch))")
        let noMatches = events.filter { if case .noMatch = $0 { true } else { false } }
        #expect(noMatches.count == 1)
    }

    @Test("once a track stops, no match is reported once, naming it")
    func reportsLoss() async throws {
        let f = try await StreamingFixture.shared.value()
        let core = try f.core()
        let music = try f.samples("pingus-4", from: 10, seconds: 10)
        let silence = [Float](repeating: 0, count: 12 * 44_100)
        let events = feed(core, music + silence) + core.finish()
        let id = try #require(f.ids["pingus-4"])
        let lost = events.compactMap { e -> Int64?? in if case .noMatch(_, let p) = e { p } else { nil } }
        #expect(lost == [id], "\(events)")
    }
}

@Suite("Streaming: which matches a stream believes")
struct DecisiveMatchTests {
    func match(_ id: Int64, score: Int, runnerUp: Int) -> Match {
        let track = Track(id: id, title: "T\(id)", artist: nil, album: nil, metadata: [:], duration: 100, sourcePath: nil,
                          contentHash: String(repeating: "0", count: 32), landmarkCount: 1000, addedAt: "2026-01-01T00:00:00Z")
        return Match(track: track, matchOffset: 10, confidence: 0.99, score: score, significance: 12.3, runnerUpScore: runnerUp,
                     verifiedPeaks: 40, queryPeaks: 150, alternativeOffsets: [], frequencySkew: 0, timeScale: 1,
                     queryStart: 0, queryEnd: 10, referenceStart: 10, referenceEnd: 20)
    }

    @Test("a track that aligns no more hashes than a track that failed verification is not believed")
    func outvotedAlone() {
        #expect(StreamMatcher.decisive([match(1, score: 17, runnerUp: 18)]).isEmpty)
        #expect(StreamMatcher.decisive([match(1, score: 17, runnerUp: 17)]).isEmpty)
    }

    @Test("the leader of the hash vote is believed, and so are tracks that match as well as another matched one")
    func leadersAndTies() {
        #expect(StreamMatcher.decisive([match(1, score: 40, runnerUp: 8)]).map(\.track.id) == [1])
        // The same recording twice in the catalog: equal votes, both verified.
        #expect(StreamMatcher.decisive([match(1, score: 40, runnerUp: 40), match(2, score: 40, runnerUp: 40)]).map(\.track.id) == [1, 2])
        // A track change: the new track has fewer hashes than the old one so far, which matches too.
        #expect(StreamMatcher.decisive([match(1, score: 60, runnerUp: 25), match(2, score: 25, runnerUp: 60)]).map(\.track.id) == [1, 2])
        // … but not when the outvoting track is not a match.
        #expect(StreamMatcher.decisive([match(2, score: 25, runnerUp: 60), match(3, score: 12, runnerUp: 60)]).isEmpty)
    }
}

@Suite("Streaming session (thread, conversion, backlog)")
struct StreamingSessionTests {
    @Test("48 kHz stereo buffers are converted and matched")
    func convertsInput() async throws {
        let f = try await StreamingFixture.shared.value()
        let dir = try TemporaryDirectory("session")
        let raw = dir.file("clip.f32")
        try Run.sox([try f.audio.reference("pingus-6").path, "-t", "f32", "-r", "48000", "-c", "2", raw.path,
                     "trim", "15", "10"])
        let data = try Data(contentsOf: raw)
        let samples = data.withUnsafeBytes { Array($0.bindMemory(to: Float.self)) }
        let session = StreamingSession(catalog: try Catalog(path: f.path, readOnly: true), clock: nil)
        var i = 0
        while i < samples.count {
            let n = min(samples.count - i, 2 * 4800)
            session.append(PCMBuffer(samples: Array(samples[i..<(i + n)]), sampleRate: 48_000, channels: 2))
            i += n
        }
        session.finish()
        var events: [SessionEvent] = []
        for await e in session.events { events.append(e) }
        let m = try #require(events.compactMap(\.streamMatch).first, "\(events)")
        #expect(m.match.track.id == f.ids["pingus-6"])
        // The module repeats itself exactly: the truth is the reported offset or one of the alternatives.
        let fits = [m.match.matchOffset] + m.match.alternativeOffsets
        #expect(fits.contains { abs($0 - (15 + m.streamTime)) < 0.1 }, "\(fits), expected \(15 + m.streamTime)")
    }

    @Test("when matching falls behind, the oldest audio is dropped and reported")
    func dropsOldest() async throws {
        let f = try await StreamingFixture.shared.value()
        var options = StreamingOptions()
        options.maximumBacklog = 6
        let session = StreamingSession(catalog: try Catalog(path: f.path, readOnly: true), options: options, clock: nil, start: false)
        let samples = try f.samples("sorcerer", from: 0, seconds: 30)
        for i in stride(from: 0, to: samples.count, by: 4410) {
            session.append(PCMBuffer(samples: Array(samples[i..<min(samples.count, i + 4410)]), sampleRate: 44_100))
        }
        session.start()
        session.finish()
        var events: [SessionEvent] = []
        for await e in session.events { events.append(e) }
        let dropped = events.compactMap { e -> Double? in if case .dropped(_, let s) = e { s } else { nil } }
        #expect(dropped.count == 1 && abs((dropped.first ?? 0) - 24) < 0.11, "\(events)")
        // What was kept is the newest audio, and it still matches at its true place.
        let m = try #require(events.compactMap(\.streamMatch).first, "\(events)")
        #expect(m.match.track.id == f.ids["sorcerer"])
        #expect(m.streamTime >= 23.9)
        #expect(abs(m.match.matchOffset - m.streamTime) < 0.1)
    }
}
