import EarmarkSignature
import EarmarkTestSupport
import Testing

@Suite("Peak ranking")
struct PeakRankingTests {
    @Test("PeakRanking over every candidate of real music gives exactly the peak picker's signature")
    func sameAsPicker() async throws {
        let samples = try await music.value()
        let signature = SignatureGenerator.signature(of: samples)
        // With no deep limit the picker keeps every candidate, ranked in full.
        var unlimited = SignatureConfiguration.current
        unlimited.deepRankLimit = 65_535
        let candidates = SignatureGenerator.signature(of: samples, configuration: unlimited).peaks
        #expect(candidates.count > signature.peaks.count, "some candidates rank 100 or more")
        #expect(PeakRanking.rank(candidates) == signature.peaks)
        // A re-ranking of its own peaks can only lower ranks (weaker candidates are gone).
        let again = PeakRanking.rank(signature.peaks)
        #expect(again.count == signature.peaks.count)
        #expect(zip(again, signature.peaks).allSatisfy { $0.rank <= $1.rank })
    }
}
