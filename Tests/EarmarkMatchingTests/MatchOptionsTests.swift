@testable import EarmarkMatching
import Testing

/// ``MatchOptions/override(_:)`` outside `#expect` (its closure cannot mutate).
private func set(_ options: inout MatchOptions, _ text: String) -> Bool { options.override(text) }

@Suite("MatchOptions overrides for experiments")
struct MatchOptionsTests {
    @Test("NAME=VALUE sets the named field; unknown names and values out of range change nothing")
    func overrides() {
        var o = MatchOptions.default
        #expect(set(&o, "candidates=32"))
        #expect(o.candidates == 32)
        #expect(set(&o, "skewMinimumHits=3"))
        #expect(o.skewMinimumHits == 3)
        #expect(set(&o, "commonHashes=0"))
        #expect(o.commonHashes == nil)
        #expect(set(&o, "deepPass=0"))
        #expect(!o.deepPass)
        let before = o
        for bad in ["candidates=0", "candidates=2.5", "explainedShare=1.5", "deepPass=2", "nosuch=1", "candidates", "=3",
                    "minimumSignificance=nan", "skewFanout=-4"] {
            #expect(!set(&o, bad), "\(bad)")
        }
        #expect(o == before)
        for name in MatchOptions.overridable {
            var p = MatchOptions.default
            #expect(set(&p, "\(name)=1"), "\(name)")
        }
    }
}

@Suite("Dropping the hits of tracks that cannot be candidates")
struct CandidateFilterTests {
    @Test("every track with `floor` hits in 3 adjacent offsets keeps all its hits, in order; most lone chance hits go", arguments: [2, 3])
    func keepsEveryCandidate(floor: Int) {
        var state: UInt64 = 0x1234_5678 &+ UInt64(floor)
        func next() -> UInt64 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return state >> 33
        }
        var hits: [Hit] = []
        // Chance: 200,000 hits spread over 150,000 tracks and 30,000 offsets (negative ones too).
        for k in 0..<200_000 {
            hits.append(Hit(key: Hit.key(track: Int64(next() % 150_000), offset: Int32(Int(next() % 30_000) - 2_000)),
                            qframe: UInt32(next() % 1_000), hash: UInt32(k)))
        }
        // Planted: 300 tracks with `floor` hits within 3 adjacent offsets, anywhere (on cell borders too).
        for t in 0..<300 {
            let track = Int64(150_000 + t), base = Int32(Int(next() % 30_000) - 2_000)
            for j in 0..<floor {
                hits.insert(Hit(key: Hit.key(track: track, offset: base + Int32(j % 3)), qframe: UInt32(j), hash: UInt32(j)),
                            at: Int(next() % UInt64(hits.count)))
            }
        }
        let before = hits
        Hit.keepTracksWithCells(&hits, floor: floor)
        #expect(hits.count < before.count / 5, "kept \(hits.count) of \(before.count)")
        // The tracks a candidate search would take, by brute force.
        var sorted = before
        Hit.sort(&sorted)
        var needed = Set<Int64>()
        var i = 0
        while i < sorted.count {
            var j = i
            while j < sorted.count, sorted[j].track == sorted[i].track { j += 1 }
            if Matcher.densestCell(sorted[i..<j]) >= floor { needed.insert(sorted[i].track) }
            i = j
        }
        #expect(needed.count >= 300)
        let keptTracks = Set(hits.map(\.track))
        #expect(needed.isSubset(of: keptTracks))
        // A kept track keeps every hit, and the kept hits keep their order.
        let expected = before.filter { keptTracks.contains($0.track) }
        #expect(expected.map(\.key) == hits.map(\.key))
        #expect(expected.map(\.hash) == hits.map(\.hash))
    }
}
