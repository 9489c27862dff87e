import EarmarkAudio
import EarmarkCatalog
@testable import EarmarkMatching
import EarmarkSignature
import EarmarkTestSupport
import Foundation
import Testing

@Suite("Matching with the experimental triplet keys")
struct TripletTests {
    @Test("a catalog made with triplet keys reopens as one, takes the triplet defaults, finds clean and noisy clips and no non-catalog music")
    func tripletCatalog() async throws {
        let f = try await MatchingFixture.shared.value()
        let dir = try TemporaryDirectory("triplets")
        let path = dir.path("triplets.earcat")
        // The ingestor keeps the design a catalog was created with.
        _ = try Catalog(path: path, create: true, configuration: .experimentalTriplets)
        let tracks = try await Fixtures.index(f.audio.reference, into: path)
        let catalog = try Catalog(path: path, readOnly: true)
        #expect(catalog.configuration == .experimentalTriplets)
        let matcher = Matcher(catalog: catalog)
        #expect(matcher.options == .defaults(for: .experimentalTriplets))
        #expect(matcher.options != .default)
        var ids: [String: Int64] = [:]
        for (url, t) in zip(f.audio.reference, tracks) { ids[url.deletingPathExtension().lastPathComponent] = t.id }
        for (stem, offset) in clipCases.prefix(4) {
            let clean = try Fixtures.decode(try f.clip(stem, at: offset, into: dir))
            for (name, audio) in [("clean", clean), ("white noise 5 dB", Signal.addingNoise(to: clean, snrDB: 5, seed: 7))] {
                let best = try matcher.match(SignatureGenerator.signature(of: audio)).matches.first
                #expect(best?.track.id == ids[stem], "\(stem) \(name): got \(best?.track.title ?? "nothing")")
                if let best, best.track.id == ids[stem] {
                    #expect(try f.placed(best, stem, truth: offset), "\(stem) \(name): offset \(best.matchOffset), expected \(offset)")
                }
            }
        }
        for track in f.audio.negative {
            for offset in [20.0, 60.0] {
                let clip = dir.file("neg-\(track.lastPathComponent)-\(offset).wav")
                try Fixtures.cut(track, start: offset, seconds: 10, to: clip)
                let result = try matcher.match(SignatureGenerator.signature(of: Fixtures.decode(clip)))
                #expect(result.matches.isEmpty, "\(track.lastPathComponent) @\(offset) s matched \(result.matches.map { $0.track.title ?? "?" })")
            }
        }
    }
}
