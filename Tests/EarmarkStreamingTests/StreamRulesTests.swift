import EarmarkCatalog
import EarmarkMatching
import EarmarkSignature
@testable import EarmarkStreaming
import EarmarkTestSupport
import Foundation
import Testing

@Suite("Streaming: decision rules follow the catalog's landmark design")
struct StreamRulesTests {
    @Test("a pair catalog's stream takes file matching's rules, with 12 aligned hashes to match and 15 for the bonus")
    func pairRules() {
        var expected = MatchOptions.default
        expected.skewWhenPartial = false
        expected.minimumHits = 12
        expected.supportingHits = 15
        #expect(StreamingOptions.matchOptions(for: .current) == expected)
    }

    @Test("a triplet catalog's stream takes rules derived from the triplet defaults, and finds a real track and no non-catalog music")
    func tripletCatalog() async throws {
        let f = try await StreamingFixture.triplets.value()
        let ids = f.ids
        let core = { StreamMatcher(matcher: Matcher(catalog: try Catalog(path: f.path, readOnly: true))) }
        let rules = try core().matchOptions
        let file = MatchOptions.defaults(for: .experimentalTriplets)
        #expect(rules == StreamingOptions.matchOptions(for: .experimentalTriplets))
        #expect(rules != StreamingOptions.matchOptions(for: .current))
        #expect(rules.candidateHits == file.candidateHits && rules.skewFanout == file.skewFanout && rules.deepPass == file.deepPass)
        #expect(rules.minimumHits == StreamingOptions.minimumHitsFloor && rules.minimumHits > file.minimumHits)
        #expect(rules.supportingHits == StreamingOptions.supportingHitsFloor && rules.supportingHits > file.supportingHits)

        let stream = try core()
        let events = feed(stream, try f.samples("pingus-4", from: 30, seconds: 20)) + stream.finish()
        let matches = events.compactMap(\.streamMatch)
        #expect(matches.count == 1, "\(events)")
        let m = try #require(matches.first)
        #expect(m.match.track.id == ids["pingus-4"])
        #expect(m.detectedAt <= 4, "first match only after \(m.detectedAt) s")
        #expect(abs(m.match.matchOffset - (30 + m.streamTime)) < 0.1)

        var negative: [Float] = []
        for url in f.audio.negative + f.audio.speech { negative += try Fixtures.decode(url).prefix(20 * 44_100) }
        let quiet = try core()
        let none = feed(quiet, negative) + quiet.finish()
        #expect(none.compactMap(\.streamMatch).isEmpty, "\(none.compactMap(\.streamMatch))")
    }
}
