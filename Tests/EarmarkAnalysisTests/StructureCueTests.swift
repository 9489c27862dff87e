@testable import EarmarkAnalysis
import Testing

@Suite("Structure: section boundary cues")
struct StructureCueTests {
    /// `count` pseudo-random feature vectors of `dims` dimensions, reproducible from `seed`.
    static func noise(_ count: Int, dims: Int = 8, seed: UInt64) -> [[Double]] {
        var state = seed
        return (0..<count).map { _ in
            (0..<dims).map { _ in
                state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
                return Double(state >> 11) / Double(1 << 53) - 0.5
            }
        }
    }

    /// Onset strength with a pulse every `period` frames.
    static func pulses(_ count: Int, period: Int) -> [Double] {
        (0..<count).map { $0 % period == 0 ? 1 : 0.1 }
    }

    @Test("music that comes back across a point repeats there; other music does not")
    func repetition() {
        let a = Self.noise(30, seed: 1), b = Self.noise(30, seed: 2)
        let repeated = StructureAnalyzer.unitVectors(a + a), changed = StructureAnalyzer.unitVectors(a + b)
        let same = StructureAnalyzer.repetition(unit: repeated, at: 30, window: 12, reach: 60)
        let other = StructureAnalyzer.repetition(unit: changed, at: 30, window: 12, reach: 60)
        #expect(same > 0.99, "\(same)")
        #expect(other < 0.5, "\(other)")
        #expect(StructureAnalyzer.repetition(unit: repeated, at: 0, window: 12, reach: 60) == -1)
    }

    @Test("the same pulse on both sides is rhythmically alike; another pulse is not")
    func rhythm() {
        let steady = Self.pulses(200, period: 6)
        let changed = Array(Self.pulses(100, period: 6) + Self.pulses(100, period: 11))
        let same = StructureAnalyzer.rhythmSimilarity(flux: steady, at: 100, span: 86)
        let other = StructureAnalyzer.rhythmSimilarity(flux: changed, at: 100, span: 86)
        #expect(same > 0.95, "\(same)")
        #expect(other < same - 0.3, "\(other) vs \(same)")
        #expect(StructureAnalyzer.rhythmSimilarity(flux: steady, at: 10, span: 86) == 0)   // too little before
    }

    @Test("two different stretches of music give one section boundary, at the change")
    func oneChange() {
        let n = 130   // 60 s of blocks
        let base1 = Self.noise(1, dims: 12, seed: 5)[0], base2 = Self.noise(1, dims: 12, seed: 6)[0]
        let jitter = Self.noise(n, dims: 12, seed: 7)
        let x = (0..<n).map { i in zip(i < 65 ? base1 : base2, jitter[i]).map { $0 + 0.2 * $1 } }
        let flux = Self.pulses(65 * StructureAnalyzer.framesPerBlock, period: 6) + Self.pulses(65 * StructureAnalyzer.framesPerBlock, period: 11)
        let cuts = StructureAnalyzer.sectionBoundaries(unit: StructureAnalyzer.unitVectors(x), flux: flux)
        #expect(cuts.count == 1 && abs(cuts[0] - 65) <= 2, "\(cuts)")
    }
}
