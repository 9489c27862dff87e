import EarmarkCatalog
@testable import EarmarkMatching
import EarmarkSignature
import EarmarkTestSupport
import Foundation
import Testing

@Suite("Matching long recordings window by window")
struct LongQueryTests {
    /// `seconds` of `url` from `start`, decoded to 44.1 kHz mono.
    func excerpt(_ url: URL, start: Double, seconds: Double, dir: TemporaryDirectory) throws -> [Float] {
        let out = dir.file("\(url.deletingPathExtension().lastPathComponent)-\(start).wav")
        try Fixtures.cut(url, start: start, seconds: seconds, to: out)
        return try Fixtures.decode(out)
    }

    @Test("two catalog tracks with non-catalog music between them: each is one stretch, at its place in the recording and in the track")
    func twoTracksAndAGap() async throws {
        let f = try await ReferenceCatalog.shared.value()
        let dir = try TemporaryDirectory("long-query")
        let recording = try excerpt(try f.audio.reference("pingus-3"), start: 30, seconds: 40, dir: dir)
            + excerpt(f.audio.negative[0], start: 20, seconds: 40, dir: dir)
            + excerpt(try f.audio.reference("sorcerer"), start: 10, seconds: 40, dir: dir)
        let signature = SignatureGenerator.signature(of: recording)
        let matcher = Matcher(catalog: try Catalog(path: f.path, readOnly: true))
        var reported: [Double] = []
        let result = try matcher.matchSegments(signature) { reported.append($0) }
        let found = result.matches.map { "\($0.track.title ?? "?") \($0.queryStart)–\($0.queryEnd) at \($0.referenceStart)" }
        #expect(result.matches.map(\.track.id) == [f.ids["pingus-3"], f.ids["sorcerer"]], "\(found)")
        guard result.matches.count == 2 else { return }
        let (a, b) = (result.matches[0], result.matches[1])
        // (recording start, recording end, track start, offset at the recording's start) expected, within 2 s and 0.2 s.
        for (m, want) in [(a, [0.0, 40, 30, 30]), (b, [80.0, 120, 10, -70])] {
            let got = [m.queryStart, m.queryEnd, m.referenceStart, m.matchOffset]
            let tolerance = [2.0, 2, 2, 0.2]
            #expect(zip(zip(got, want), tolerance).allSatisfy { abs($0.0 - $0.1) <= $1 }, "\(got) vs \(want): \(found)")
        }
        #expect(reported == reported.sorted() && abs((reported.last ?? 0) - signature.duration) < 0.5, "progress \(reported)")
    }

    @Test("a window of a signature is its peaks in that stretch, moved to start at frame 0")
    func window() {
        let peaks = (0..<100).map { Peak(frame: UInt32($0 * 10), bin: 20, rank: 0, level: 0) }
        let sig = Signature(configurationVersion: 1, duration: 10, peaks: peaks)
        let w = sig.window(frames: 250..<500)
        let frames: [UInt32] = (25..<50).map { (k: Int) -> UInt32 in UInt32(k * 10 - 250) }
        #expect(w.peaks.map(\.frame) == frames)
        #expect(abs(w.duration - 2.5) < 1e-9)
        #expect(abs(sig.window(frames: 900..<1200).duration - 1) < 1e-9, "cut at the end")
        #expect(sig.window(frames: 2000..<2100).peaks.isEmpty)
    }
}
