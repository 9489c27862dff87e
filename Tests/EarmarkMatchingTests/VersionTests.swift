import EarmarkCatalog
import EarmarkMatching
import EarmarkSignature
import EarmarkTestSupport
import Foundation
import Testing

/// A catalog (triplet keys, as at scale) that holds a recording and other versions of it: the same
/// constellation with every peak 2…7 bins higher, as the scale benchmark's generator makes its copies. A clip
/// pitched up a semitone (6 %) fits the copy 2 bins higher as is where 6 % of a bin is about 2 bins (the bass
/// and low melody, which in pingus-5 hold about 70 % of the strong peaks), and fits the original everywhere
/// once the pitch is undone.
@Suite("Matching when the catalog holds other versions of the clip's music")
struct VersionTests {
    struct Versions {
        let folder: TemporaryDirectory
        let path: String
        let original: Int64
    }

    static let shifts = 2...7

    static func catalog() throws -> Versions {
        let folder = try TemporaryDirectory("versions")
        let path = folder.path("versions.earcat")
        let configuration = SignatureConfiguration.experimentalTriplets
        let signature = SignatureGenerator.signature(of: try Fixtures.decode(try TestAudio.set().reference("pingus-5")),
                                                     configuration: configuration.forCatalog)
        let catalog = try Catalog(path: path, create: true, configuration: configuration)
        var original: Int64 = 0
        for shift in [0] + Array(shifts) {
            let peaks = signature.peaks.compactMap { p -> Peak? in
                Int(p.bin) + shift < configuration.maxBin ? Peak(frame: p.frame, bin: p.bin + UInt16(shift), rank: p.rank, level: p.level) : nil
            }
            let version = Signature(configurationVersion: signature.configurationVersion, duration: signature.duration, peaks: peaks)
            let title = shift == 0 ? "pingus-5" : "pingus-5, \(shift) bins higher"
            guard case .added(let track) = try catalog.add(
                NewTrack(title: title, duration: signature.duration, contentHash: "pingus-5+\(shift)"),
                landmarks: Landmarks.extract(from: version, role: .reference, configuration: configuration),
                peaks: peaks) else { throw TestSupportError("\(title) was not added") }
            if shift == 0 { original = track.id }
        }
        return Versions(folder: folder, path: path, original: original)
    }

    @Test("in a catalog beyond the calibration's size the version the clip was made from wins; below it, the hashes decide",
          arguments: [25.0])
    func theVersionThatExplainsTheClipWins(offset: Double) async throws {
        let v = try Self.catalog()
        let catalog = try Catalog(path: v.path, readOnly: true)
        let dir = try TemporaryDirectory("versions-clip")
        let cut = dir.file("cut.wav"), pitched = dir.file("pitched.wav")
        try Fixtures.cut(try TestAudio.set().reference("pingus-5"), start: offset, seconds: 10, to: cut)
        try Run.sox([cut.path, pitched.path, "pitch", "100"])
        let signature = SignatureGenerator.signature(of: try Fixtures.decode(pitched))

        // Seven tracks count as a large catalog when the allowance is one track. The copy explains about 69 %
        // of the clip's strong peaks, a hair under the default share: 0.8 keeps the test off that edge.
        var large = MatchOptions.defaults(for: catalog.configuration)
        large.catalogTracksAllowed = 1
        large.explainedShare = 0.8
        let best = try #require(try Matcher(catalog: catalog, options: large).match(signature).matches.first)
        #expect(best.track.id == v.original, "\(best.track.title ?? "?") won: \(best.verifiedPeaks)/\(best.queryPeaks) verified")
        #expect(abs(best.frequencySkew - (pow(2, 1 / 12.0) - 1)) <= 0.015, "frequency skew \(best.frequencySkew)")

        // A copy really does fit the clip as is: with the share's rule off, one is the answer.
        var small = large
        small.explainedShare = 0
        let asIs = try #require(try Matcher(catalog: catalog, options: small).match(signature).matches.first)
        #expect(asIs.track.id != v.original, "without the rule \(asIs.track.title ?? "?") won")
        #expect(asIs.verifiedPeaks < best.verifiedPeaks)
    }
}
