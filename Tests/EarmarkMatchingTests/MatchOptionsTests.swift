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
        #expect(set(&o, "quickFanout=3"))
        #expect(o.quickFanout == 3)
        #expect(set(&o, "quickFanout=0"))
        #expect(o.quickFanout == nil)
        #expect(set(&o, "skewTrials=4"))
        #expect(o.skewTrials == Array(Skew.defaultTrials.prefix(4)))
        let before = o
        for bad in ["candidates=0", "candidates=2.5", "explainedShare=1.5", "deepPass=2", "nosuch=1", "candidates", "=3",
                    "minimumSignificance=nan", "skewFanout=-4", "skewTrials=1000", "quickFanout=-1"] {
            #expect(!set(&o, bad), "\(bad)")
        }
        #expect(o == before)
        for name in MatchOptions.overridable {
            var p = MatchOptions.default
            #expect(set(&p, "\(name)=1"), "\(name)")
        }
    }
}

