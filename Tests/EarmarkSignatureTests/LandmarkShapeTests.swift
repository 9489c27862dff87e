import EarmarkSignature
import EarmarkTestSupport
import Foundation
import Testing

// Pair and triplet landmarks of real music: what a catalog stores for a track, a clip of it finds again.

@Suite("Landmark shapes: pairs and triplets")
struct LandmarkShapeTests {
    /// The signature of 60 s of real music, and of a 10-s clip cut from it 20 s in (a separate decode).
    func trackAndClip() throws -> (track: Signature, clip: Signature, offset: UInt32) {
        let audio = try TestAudio.set()
        let dir = try TemporaryDirectory("shapes")
        let long = dir.file("long.wav"), short = dir.file("short.wav")
        try Fixtures.cut(try audio.reference("pingus-5"), start: 10, seconds: 60, to: long)
        try Fixtures.cut(try audio.reference("pingus-5"), start: 30, seconds: 10, to: short)
        func sign(_ url: URL) throws -> Signature {
            let g = SignatureGenerator(configuration: .current)
            try g.append(try Fixtures.decode(url))
            return g.signature()
        }
        return (try sign(long), try sign(short), 2_000)
    }

    @Test("of a clean clip, most reference landmarks of its stretch are among its query landmarks at the same offset, for both shapes",
          arguments: [LandmarkShape.pairs, .triplets])
    func clipFindsTrack(shape: LandmarkShape) throws {
        let (track, clip, offset) = try trackAndClip()
        let configuration = shape == .pairs ? SignatureConfiguration.current : .experimentalTriplets
        let reference = Landmarks.extract(from: track, role: .reference, configuration: configuration)
            .filter { $0.frame >= offset + 100 && $0.frame < offset + 900 }
        let query = Set(Landmarks.extract(from: clip, role: .query, configuration: configuration).map { "\($0.hash)@\($0.frame + offset)" })
        let found = reference.filter { query.contains("\($0.hash)@\($0.frame)") }.count
        #expect(reference.count > 200)
        #expect(Double(found) >= 0.8 * Double(reference.count), "\(found) of \(reference.count)")
        // At another offset almost nothing lines up.
        let shifted = reference.filter { query.contains("\($0.hash)@\($0.frame + 37)") }.count
        #expect(Double(shifted) < 0.05 * Double(reference.count), "\(shifted) of \(reference.count) one offset off")
    }

    @Test("the skew search's lighter landmarks (rank < 24, 12 targets) of a clean clip are a third of the query's and still hold most reference landmarks of its stretch")
    func lighterQueryLandmarks() throws {
        let (track, clip, offset) = try trackAndClip()
        let reference = Landmarks.extract(from: track, role: .reference).filter { $0.frame >= offset + 100 && $0.frame < offset + 900 }
        let full = Landmarks.extract(from: clip, role: .query)
        let same = Landmarks.extract(from: clip, rankLimit: SignatureConfiguration.current.queryRankLimit,
                                     fanout: SignatureConfiguration.current.queryFanout)
        #expect(same == full)
        let light = Landmarks.extract(from: clip, rankLimit: 24, fanout: 12)
        let keys = Set(light.map { "\($0.hash)@\($0.frame + offset)" })
        let found = reference.filter { keys.contains("\($0.hash)@\($0.frame)") }.count
        #expect(light.count * 2 < full.count, "\(light.count) of \(full.count)")
        #expect(Double(found) >= 0.75 * Double(reference.count), "\(found) of \(reference.count)")
    }

    @Test("triplet hashes use all 32 bits and are far more specific than pairs: another piece of music shares far fewer of them")
    func tripletsAreSpecific() throws {
        let (track, _, _) = try trackAndClip()
        let audio = try TestAudio.set()
        let dir = try TemporaryDirectory("shapes-other")
        let other = dir.file("other.wav")
        try Fixtures.cut(try audio.reference("sorcerer"), start: 0, seconds: 60, to: other)
        let g = SignatureGenerator(configuration: .current)
        try g.append(try Fixtures.decode(other))
        let otherSignature = g.signature()
        let pairs = Landmarks.extract(from: track, role: .reference, configuration: .current)
        let triplets = Landmarks.extract(from: track, role: .reference, configuration: .experimentalTriplets)
        #expect(pairs.allSatisfy { $0.hash < 1 << 21 })
        #expect(triplets.contains { $0.hash >= 1 << 31 })
        // Same anchors and targets: 3 targets make 3 pairs or 3 triplets per anchor (before repeats are dropped).
        #expect(abs(triplets.count - pairs.count) < pairs.count / 5, "\(triplets.count) triplets, \(pairs.count) pairs")
        func sharedWithOther(_ configuration: SignatureConfiguration) -> Double {
            let mine = Set(Landmarks.extract(from: track, role: .reference, configuration: configuration).map(\.hash))
            let theirs = Set(Landmarks.extract(from: otherSignature, role: .reference, configuration: configuration).map(\.hash))
            return Double(mine.intersection(theirs).count) / Double(mine.count)
        }
        let p = sharedWithOther(.current), t = sharedWithOther(.experimentalTriplets)
        #expect(t < p / 10, "hashes also in another piece: triplets \(t), pairs \(p)")
        #expect(SignatureConfiguration.current.keyDesign != SignatureConfiguration.experimentalTriplets.keyDesign)
        #expect(SignatureConfiguration.experimentalTriplets.hasSamePeaks(as: .current))
    }

    /// What extraction gives by its definition: each anchor's targets sorted by (level descending, index), the first
    /// `fanout` kept (all, in time order, when there are no more).
    static func definedLandmarks(_ signature: Signature, rankLimit: Int, fanout: Int,
                                 configuration c: SignatureConfiguration) -> [Landmark] {
        let peaks = signature.peaks.filter { Int($0.rank) < rankLimit }
        var out: [Landmark] = []
        for (i, a) in peaks.enumerated() {
            // Peaks come in frame order: the zone ends at the first one too late.
            let zone = peaks.indices.dropFirst(i + 1).prefix { Int(peaks[$0].frame) - Int(a.frame) <= c.maxPairFrames }
            var targets = zone.filter { Int(peaks[$0].frame) > Int(a.frame) && abs(Int(peaks[$0].bin) - Int(a.bin)) <= c.maxPairBins }
            if targets.count > fanout {
                targets.sort { peaks[$0].level > peaks[$1].level || (peaks[$0].level == peaks[$1].level && $0 < $1) }
                targets = Array(targets.prefix(fanout))
            }
            if c.landmarkShape == .pairs {
                for t in targets {
                    out.append(Landmark(hash: Landmarks.hash(anchorBin: Int(a.bin), targetBin: Int(peaks[t].bin),
                                                             dt: Int(peaks[t].frame) - Int(a.frame), configuration: c), frame: a.frame))
                }
            } else {
                let ordered = targets.sorted()
                for x in ordered.indices {
                    for y in ordered.indices where y > x {
                        let b = peaks[ordered[x]], d = peaks[ordered[y]]
                        out.append(Landmark(hash: Landmarks.hash(anchorBin: Int(a.bin), first: (Int(b.bin), Int(b.frame) - Int(a.frame)),
                                                                 second: (Int(d.bin), Int(d.frame) - Int(a.frame)), configuration: c),
                                            frame: a.frame))
                    }
                }
            }
        }
        return out
    }

    @Test("each anchor keeps its strongest targets (the earlier on equal levels), in the order the definition gives, for both shapes",
          arguments: [LandmarkShape.pairs, .triplets])
    func strongestTargets(shape: LandmarkShape) throws {
        let configuration = shape == .pairs ? SignatureConfiguration.current : .experimentalTriplets
        let real = try trackAndClip().clip
        // Levels from a handful of values: many ties among an anchor's targets.
        var rng = SystemRandomNumberGenerator()
        let tied = Signature(configurationVersion: real.configurationVersion, duration: real.duration,
                             peaks: real.peaks.map { Peak(frame: $0.frame, bin: $0.bin, rank: $0.rank, level: Float(Int.random(in: 0..<4, using: &rng))) })
        for signature in [real, tied] {
            for (rankLimit, fanout) in [(14, 3), (24, 4), (36, 12), (100, 24)] {
                let got = Landmarks.extract(from: signature, rankLimit: rankLimit, fanout: fanout, configuration: configuration)
                let expected = Self.definedLandmarks(signature, rankLimit: rankLimit, fanout: fanout, configuration: configuration)
                #expect(got.count > 100)
                let same = got == expected
                let firstDifference = got.indices.first { $0 >= expected.count || got[$0] != expected[$0] } ?? got.count
                #expect(same, "rank < \(rankLimit), \(fanout) targets: \(got.count) landmarks, defined \(expected.count), first difference at \(firstDifference)")
            }
        }
    }
}
