import EarmarkAnalysis
import EarmarkTestSupport
import Foundation
import Testing

/// Two small pieces written note by note and rendered with FluidSynth (tools/test-renders.sh), so
/// their key, tempo, meter, bars and instruments are known from the score.
@Suite("earmark analyze on rendered pieces with a known score")
struct RenderedPiecesTests {
    struct Truth: Decodable {
        var tonic: String
        var mode: String
        var bpm: Double
        var beatsPerBar: Int
        var beats: Int
        var beatPeriod: Double
        var instruments: [String]
        var absent: [String]
    }

    static let renders: Result<(dir: URL, truth: [String: Truth]), any Error> = Result {
        let script = TestPaths.repositoryRoot.appendingPathComponent("tools/test-renders.sh").path
        let out = try Run.process("/bin/bash", [script], timeout: 1200)
        guard out.status == 0, let line = out.stdoutText.split(separator: "\n").last else {
            throw TestSupportError("tools/test-renders.sh failed: \(out)")
        }
        let dir = URL(fileURLWithPath: String(line).trimmingCharacters(in: .whitespaces))
        let truth = try JSONDecoder().decode([String: Truth].self, from: Data(contentsOf: dir.appendingPathComponent("truth.json")))
        return (dir, truth)
    }

    @Test("key, tempo, beats, bars and instruments match the score", arguments: ["march", "waltz"])
    func piece(name: String) throws {
        let (dir, truths) = try RenderedPiecesTests.renders.get()
        let truth = try #require(truths[name])
        let env: [String: String?] = ["EARMARK_MODEL": try TestModel.set().model.path]
        let out = try EarmarkCLI.run(["analyze", "--json", dir.appendingPathComponent("\(name).wav").path], environment: env)
        #expect(out.status == 0, "\(out)")
        let report = try JSONSerialization.jsonObject(with: out.stdout) as! [String: Any]

        let key = try #require(report["key"] as? [String: Any])
        #expect(key["tonic"] as? String == truth.tonic && key["mode"] as? String == truth.mode, "\(key)")

        let rhythm = try #require(report["rhythm"] as? [String: Any])
        let bpm = try #require(rhythm["bpm"] as? Double)
        #expect(abs(bpm / truth.bpm - 1) < 0.02, "bpm \(bpm), score \(truth.bpm)")
        #expect(rhythm["beatsPerBar"] as? Int == truth.beatsPerBar)
        let reference = (0..<truth.beats).map { Double($0) * truth.beatPeriod }
        let downbeats = stride(from: 0, to: truth.beats, by: truth.beatsPerBar).map { Double($0) * truth.beatPeriod }
        let beatF = BeatTracker.fMeasure(estimated: rhythm["beats"] as! [Double], reference: reference)
        let barF = BeatTracker.fMeasure(estimated: rhythm["bars"] as! [Double], reference: downbeats)
        #expect(beatF >= 0.9, "beat F \(beatF)")
        #expect(barF >= 0.8, "downbeat F \(barF)")

        let families = ((report["instruments"] as! [String: Any])["families"] as! [[String: Any]])
        func active(_ family: String) -> Double {
            let f = families.first { $0["family"] as? String == family }
            return (f?["activeRanges"] as? [[String: Double]] ?? []).reduce(0) { $0 + $1["end"]! - $1["start"]! }
        }
        let duration = try #require((report["loudness"] as? [String: Any])?["duration"] as? Double)
        for family in truth.instruments { #expect(active(family) >= 0.5 * duration, "\(family) active \(active(family)) s of \(duration)") }
        for family in truth.absent { #expect(active(family) == 0, "\(family) active \(active(family)) s") }
        #expect((report["loudness"] as? [String: Any])?["integrated"] is Double)
    }
}
