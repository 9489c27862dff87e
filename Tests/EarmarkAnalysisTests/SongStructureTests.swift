@testable import EarmarkAnalysis
import EarmarkTestSupport
import Foundation
import Testing

@Suite("Structure inside a song: sections from repetition, labelled by their repeats")
struct SongStructureTests {
    @Test("the rendered A-B-A song is labelled A, B, A with its boundaries within 3 s, on bar lines")
    func renderedSong() throws {
        let script = TestPaths.repositoryRoot.appendingPathComponent("tools/test-renders.sh").path
        let run = try Run.process("/bin/bash", [script], timeout: 1200)
        let line = try #require(run.stdoutText.split(separator: "\n").last, "\(run)")
        let dir = URL(fileURLWithPath: String(line).trimmingCharacters(in: .whitespaces))
        struct Truth: Decodable { var sections: [[Sections]]? }
        enum Sections: Decodable {
            case time(Double), label(String)
            init(from decoder: any Decoder) throws {
                let c = try decoder.singleValueContainer()
                if let t = try? c.decode(Double.self) { self = .time(t) } else { self = .label(try c.decode(String.self)) }
            }
        }
        let truths = try JSONDecoder().decode([String: Truth].self, from: Data(contentsOf: dir.appendingPathComponent("truth.json")))
        let truth = try #require(truths["song"]?.sections)
        let starts = truth.compactMap { if case .time(let t) = $0.first { t } else { nil } }
        let samples = try Fixtures.decode(dir.appendingPathComponent("song.wav"))
        let rhythm = try #require(try trackedRhythm(samples))
        let analyzer = try StructureAnalyzer(inputRate: 44_100)
        analyzer.append(samples)
        let r = try #require(analyzer.result(bars: rhythm.bars))
        let found = r.sections.map { "\($0.start)–\($0.end) \($0.label ?? "?")" }
        #expect(r.sections.compactMap(\.label) == ["A", "B", "A"], "\(found)")
        let cuts = r.sections.dropFirst().map(\.start)
        #expect(cuts.count == 2 && zip(cuts, starts.dropFirst()).allSatisfy { abs($0 - $1) <= 3 }, "\(found) vs \(starts)")
        // Boundaries sit on the tracker's bar lines; phrases start on bars too.
        for c in cuts { #expect(rhythm.bars.contains { abs($0 - c) < 0.05 }, "\(c) is not a bar line") }
        #expect(!r.phrases.isEmpty)
    }

    @Test("blocks in the form A B A: the structure novelty peaks at the two changes; the sections are A, B, A")
    func syntheticABA() {
        // 0.46-s blocks: A and B are 40 blocks of distinct random features each (within a section the blocks
        // vary, so a section does not repeat itself at short lags).
        let a = StructureCueTests.noise(40, dims: 12, seed: 11), b = StructureCueTests.noise(40, dims: 12, seed: 12)
        let jitter = StructureCueTests.noise(120, dims: 12, seed: 13)
        let x = (a + b + a).enumerated().map { i, v in zip(v, jitter[i]).map { $0 + 0.05 * $1 } }
        let unit = StructureAnalyzer.unitVectors(x)
        let band = StructureAnalyzer.LagBand(unit: unit, maxLag: 119, halfWindow: 3)
        let curve = StructureAnalyzer.structureNovelty(band: band, neighbours: 3, minLag: 6, window: 20)
        let inside = curve[10...30].max()!
        for change in [40, 80] {
            let peak = curve[(change - 3)...(change + 3)].max()!
            #expect(peak > 0.5 && peak > 3 * inside, "peak \(peak) at \(change), inside \(inside)")
        }
        #expect(StructureAnalyzer.sectionLabels(x: x, band: band, cuts: [40, 80], threshold: 0.5) == [0, 1, 0])
        #expect(StructureAnalyzer.sectionLabels(x: x, band: band, cuts: [40], threshold: 0.5) == [0, 1])
    }

    @Test("pairwise label F: 1 for the truth itself, lower for one label everywhere or a relabelled repeat")
    func pairwise() {
        let truth = [StructureRange(start: 0, end: 20, label: "A"), StructureRange(start: 20, end: 40, label: "B"),
                     StructureRange(start: 40, end: 60, label: "A")]
        #expect(StructureAnalyzer.pairwiseLabelF(estimated: truth, reference: truth).f == 1)
        let one = StructureAnalyzer.pairwiseLabelF(estimated: [StructureRange(start: 0, end: 60, label: "A")], reference: truth)
        #expect(one.recall == 1 && one.precision < 0.6, "\(one)")
        let noRepeat = StructureAnalyzer.pairwiseLabelF(estimated: truth.enumerated().map { StructureRange(start: $1.start, end: $1.end, label: "\($0)") },
                                                        reference: truth)
        #expect(noRepeat.precision == 1 && noRepeat.recall < 0.6, "\(noRepeat)")
    }
}
