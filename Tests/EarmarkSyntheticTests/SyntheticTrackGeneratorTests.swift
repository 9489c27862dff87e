import EarmarkSignature
@testable import EarmarkSynthetic
import EarmarkTestSupport
import Foundation
import Testing

/// Signatures of the six real reference tracks (about 8.7 min of music), computed once.
let sources = Shared<[Signature]> {
    try TestAudio.set().reference.map { SignatureGenerator.signature(of: try Fixtures.decode($0)) }
}

/// One generator over the real sources, seed 2024.
let generator = Shared<SyntheticTrackGenerator> {
    SyntheticTrackGenerator(sources: try await sources.value(), seed: 2024)
}

/// The first tracks of ``generator``, made once (6 tracks ≈ 24 min).
let firstTracks = Shared<[SyntheticTrack]> {
    let g = try await generator.value()
    return (0..<6).map { g.track($0) }
}

private let configuration = SignatureConfiguration.current

private func hours(_ signatures: [Signature]) -> Double { signatures.reduce(0) { $0 + $1.duration } / 3600 }

private func referenceLandmarks(_ signatures: [Signature]) -> Int {
    signatures.reduce(0) { $0 + Landmarks.extract(from: $1, role: .reference).count }
}

@Suite("Synthetic tracks")
struct SyntheticTrackGeneratorTests {
    @Test("SplitMix64 gives the reference implementation's numbers")
    func splitMix() {
        var r = SplitMix64(state: 0)
        #expect([r.next(), r.next(), r.next()] == [0xE220_A839_7B1D_CDAF, 0x6E78_9E6A_A1B9_65F4, 0x06C4_5D18_8009_454F])
    }

    @Test("a track depends on the sources, the seed and its index only")
    func determinism() async throws {
        let g = try await generator.value()
        let made = try await firstTracks.value()
        // Again, from a new generator, out of order and on several threads at once.
        let again = SyntheticTrackGenerator(sources: try await sources.value(), seed: 2024)
        let redone = await withTaskGroup(of: SyntheticTrack.self) { group in
            for i in [5, 2, 3, 0, 4, 1, 3] { group.addTask { again.track(i) } }
            var out: [SyntheticTrack] = []
            for await t in group { out.append(t) }
            return out
        }
        #expect(redone.count == 7)
        for t in redone {
            #expect(t == made[t.index], "track \(t.index)")
            #expect(t.signature.contentIdentity == made[t.index].signature.contentIdentity)
        }
        #expect(g.track(5) == made[5])
        let identities = Set(made.map(\.signature.contentIdentity))
        #expect(identities.count == made.count, "every index gives another track")
        #expect(Set(made.map(\.title)).count == made.count)
        let otherSeed = SyntheticTrackGenerator(sources: try await sources.value(), seed: 2025).track(0)
        #expect(otherSeed.signature.contentIdentity != made[0].signature.contentIdentity)
        #expect(otherSeed.stretches != made[0].stretches)
    }

    @Test("the reversed share decides only which stretches play backwards")
    func reversedShare() async throws {
        let srcs = try await sources.value()
        let made = try await firstTracks.value()
        for share in [0.0, 1.0] {
            let g = SyntheticTrackGenerator(sources: srcs, seed: 2024, reversedShare: share)
            for i in 0..<3 {
                let t = g.track(i)
                #expect(t.stretches.allSatisfy { $0.reversed == (share == 1) }, "share \(share), track \(i)")
                var unflipped = t.stretches
                for k in unflipped.indices { unflipped[k].reversed = made[i].stretches[k].reversed }
                #expect(unflipped == made[i].stretches, "share \(share), track \(i): the same cuts, shifts and scales")
                try t.signature.validateStructure(configuration: configuration)
            }
        }
        // A reversed stretch holds its source's peaks in the opposite order.
        let all = SyntheticTrackGenerator(sources: srcs, seed: 2024, reversedShare: 1).track(0)
        let s = all.stretches[0]
        #expect(s.outputFrame(ofSourceFrame: s.sourceFrames.lowerBound) > s.outputFrame(ofSourceFrame: s.sourceFrames.upperBound - 1))
    }

    @Test("every rank is the number of louder peaks of the track within ±rankRadius frames, counted by brute force")
    func ranks() async throws {
        for track in try await firstTracks.value() {
            let peaks = track.signature.peaks
            #expect(peaks.count > 1000)
            var wrong = 0
            for (i, p) in peaks.enumerated() {
                // Peaks are in frame order: look both ways until past the radius.
                var louder = 0
                for j in stride(from: i - 1, through: 0, by: -1) {
                    if Int(p.frame) - Int(peaks[j].frame) > configuration.rankRadius { break }
                    if peaks[j].level > p.level { louder += 1 }
                }
                for j in (i + 1)..<peaks.count {
                    if Int(peaks[j].frame) - Int(p.frame) > configuration.rankRadius { break }
                    if peaks[j].level > p.level { louder += 1 }
                }
                if louder != Int(p.rank) { wrong += 1 }
                if i > 0 {
                    let o = peaks[i - 1]
                    #expect(o.frame < p.frame || (o.frame == p.frame && o.bin < p.bin), "peak \(i) out of order")
                }
            }
            #expect(wrong == 0, "\(track.title): \(wrong) of \(peaks.count) ranks differ from a recount")
            #expect(peaks.allSatisfy { Int($0.rank) < configuration.deepRankLimit })
            #expect(peaks.contains { Int($0.rank) == configuration.deepRankLimit - 1 }, "the deep limit cuts")
        }
    }

    @Test("stretches are shifted by at least 2 bins, scaled by 0.90–1.10, cut from sound, and fill the track")
    func stretches() async throws {
        let srcs = try await sources.value()
        let tracks = try await firstTracks.value()
        var all: [SyntheticTrack.Stretch] = []
        for track in tracks {
            try track.signature.validateStructure(configuration: configuration)
            #expect(track.signature.duration >= 120 && track.signature.duration <= 360 + 40)
            var end = 0
            for s in track.stretches {
                #expect(abs(s.binShift) >= 2 && abs(s.binShift) <= 8)
                #expect(s.timeScale >= 0.90 && s.timeScale <= 1.10)
                #expect(s.sourceFrames.count >= 800 && s.sourceFrames.count <= 4000, "8–40 s: \(s.sourceFrames)")
                #expect(s.outputFrames.lowerBound == end)
                #expect(abs(s.outputFrames.count - Int((Double(s.sourceFrames.count) * s.timeScale).rounded())) <= 1)
                #expect(abs(s.sourceStart - Double(s.sourceFrames.lowerBound) * configuration.frameDuration) < 1e-9)
                #expect(abs(s.outputStart - Double(s.outputFrames.lowerBound) * configuration.frameDuration) < 1e-9)
                // Sound throughout: no second without a source peak.
                let frames = [s.sourceFrames.lowerBound - 1]
                    + srcs[s.source].peaks.map { Int($0.frame) }.filter { s.sourceFrames.contains($0) }
                    + [s.sourceFrames.upperBound]
                let gap = zip(frames, frames.dropFirst()).map { $1 - $0 }.max()!
                #expect(gap <= 101, "stretch \(s.sourceFrames) of source \(s.source) has \(gap) frames without a peak")
                end = s.outputFrames.upperBound
            }
            #expect(abs(track.signature.duration - Double(end) * configuration.frameDuration) < 1e-9)
            all += track.stretches
        }
        let reversed = Double(all.filter(\.reversed).count) / Double(all.count)
        #expect(all.count >= 30)
        #expect(reversed > 0.1 && reversed < 0.45, "\(reversed) of \(all.count) stretches reversed")
        #expect(Set(all.map(\.source)).count == srcs.count, "every source is used")
        #expect(all.contains { $0.binShift > 0 } && all.contains { $0.binShift < 0 })
    }

    @Test("every peak is a source peak moved as its stretch says, its level following the tilt")
    func peaksComeFromTheirStretch() async throws {
        let srcs = try await sources.value()
        for track in try await firstTracks.value() {
            var expected: [Int: Float] = [:]   // frame << 16 | bin → level
            var movedInBand = 0
            for s in track.stretches {
                for p in srcs[s.source].peaks where s.sourceFrames.contains(Int(p.frame)) {
                    let bin = Int(p.bin) + s.binShift
                    guard bin >= configuration.minBin, bin < configuration.maxBin else { continue }
                    let level = p.level + Float(configuration.tiltDecibels(bin: bin) - configuration.tiltDecibels(bin: Int(p.bin)))
                    let key = s.outputFrame(ofSourceFrame: Int(p.frame)) << 16 | bin
                    expected[key] = max(expected[key] ?? -.infinity, level)
                    movedInBand += 1
                }
            }
            var unexplained = 0
            for p in track.signature.peaks {
                guard let level = expected[Int(p.frame) << 16 | Int(p.bin)], abs(level - p.level) < 0.01 else {
                    unexplained += 1
                    continue
                }
            }
            #expect(unexplained == 0, "\(track.title): \(unexplained) peaks no stretch explains")
            // Ranks only count a stretch's peaks afresh: most moved peaks stay.
            #expect(Double(track.signature.peaks.count) > 0.8 * Double(movedInBand), "\(track.signature.peaks.count) of \(movedInBand)")
        }
    }

    @Test("reference landmarks per hour are within ±15 % of the sources' own")
    func landmarkDensity() async throws {
        let srcs = try await sources.value()
        let tracks = try await firstTracks.value().map(\.signature)
        let real = Double(referenceLandmarks(srcs)) / hours(srcs)
        let synthetic = Double(referenceLandmarks(tracks)) / hours(tracks)
        print("synthetic: \(Int(synthetic)) reference landmarks/h over \(Int(hours(tracks) * 60)) min; sources: \(Int(real))/h over \(Int(hours(srcs) * 60)) min")
        #expect(synthetic > 0.85 * real && synthetic < 1.15 * real, "synthetic \(synthetic)/h, real \(real)/h")
        for t in tracks { try t.validateForMatching() }
    }

    @Test("a stretch shares no run of landmarks with its source at any one offset, where a copy would")
    func notACopy() async throws {
        let srcs = try await sources.value()
        let sourceLandmarks = srcs.map { Landmarks.extract(from: $0, role: .reference) }
        // The largest share of `landmarks` whose hash the source has at one time offset (±1 frame), as a matcher's
        // offset histogram would find it.
        func bestAlignedShare(_ landmarks: [Landmark], source: Int) -> Double {
            var byHash: [UInt32: [Int]] = [:]
            for l in sourceLandmarks[source] { byHash[l.hash, default: []].append(Int(l.frame)) }
            var offsets: [Int: Int] = [:]
            for l in landmarks { for f in byHash[l.hash] ?? [] { offsets[Int(l.frame) - f, default: 0] += 1 } }
            let best = offsets.keys.map { o in (o - 1...o + 1).reduce(0) { $0 + (offsets[$1] ?? 0) } }.max() ?? 0
            return Double(best) / Double(max(1, landmarks.count))
        }
        var worst = 0.0
        var checked = 0
        for track in try await firstTracks.value() {
            let landmarks = Landmarks.extract(from: track.signature, role: .reference)
            for s in track.stretches where s.outputFrames.count >= 800 {
                let inside = landmarks.filter { s.outputFrames.contains(Int($0.frame)) }
                worst = max(worst, bestAlignedShare(inside, source: s.source))
                checked += 1
            }
        }
        #expect(checked >= 30)
        #expect(worst < 0.05, "a stretch has \(Int(worst * 100)) % of its landmarks aligned with its source")
        // The measure sees a copy: the same stretch of a source, uncut, aligns almost entirely.
        let copy = srcs[0].window(frames: 1000..<3000)
        let copied = Landmarks.extract(from: copy, role: .reference)
        #expect(bestAlignedShare(copied, source: 0) > 0.8)
    }
}
