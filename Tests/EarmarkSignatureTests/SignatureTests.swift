import EarmarkSignature
import EarmarkTestSupport
import Foundation
import Testing

/// 20 s of real music (44.1 kHz mono), decoded once for the whole target.
let music = Shared<[Float]> {
    let audio = try TestAudio.set()
    let dir = try TemporaryDirectory("sig-music")
    let clip = dir.file("music.wav")
    try Fixtures.cut(try audio.reference("pingus-5"), start: 20, seconds: 20, to: clip)
    return try Fixtures.decode(clip)
}

func signatureError(_ body: () throws -> Void) -> SignatureError.Code? {
    do {
        try body()
        return nil
    } catch let e as SignatureError {
        return e.code
    } catch {
        Issue.record("unexpected error \(error)")
        return nil
    }
}

@Suite("Signature file format")
struct SignatureFileTests {
    @Test("a signature of real music survives dataRepresentation() → init(dataRepresentation:) exactly")
    func roundTrip() async throws {
        let sig = SignatureGenerator.signature(of: Signal.slice(try await music.value(), start: 0, seconds: 12))
        #expect(sig.peaks.count > 200, "12 s of music should give many peaks")
        let data = sig.dataRepresentation()
        #expect(Array(data.prefix(6)) == Array("EARSIG".utf8))
        #expect(data.count == 24 + 12 * sig.peaks.count + 4)
        let back = try Signature(dataRepresentation: data)
        #expect(back == sig)
        #expect(back.duration == sig.duration)
        #expect(back.dataRepresentation() == data)
    }

    @Test("any flipped byte is .invalidFile", arguments: [0, 5, 6, 8, 14, 20, 30, 100, -1])
    func flippedByte(position: Int) async throws {
        let sig = SignatureGenerator.signature(of: Signal.slice(try await music.value(), start: 0, seconds: 3))
        var data = sig.dataRepresentation()
        let i = position >= 0 ? position : data.count + position
        data[i] ^= 0x10
        #expect(signatureError { _ = try Signature(dataRepresentation: data) } == .invalidFile, "byte \(i)")
    }

    @Test("truncated, extended or empty data is .invalidFile")
    func truncated() async throws {
        let data = SignatureGenerator.signature(of: Signal.slice(try await music.value(), start: 0, seconds: 3))
            .dataRepresentation()
        for bad in [data.prefix(data.count - 1), data.prefix(data.count - 12), data.prefix(20), Data(), data + Data([0])] {
            #expect(signatureError { _ = try Signature(dataRepresentation: Data(bad)) } == .invalidFile, "\(bad.count) bytes")
        }
    }
}

@Suite("Signature validation")
struct SignatureValidationTests {
    @Test("silence is .signatureInvalid")
    func silence() {
        let sig = SignatureGenerator.signature(of: [Float](repeating: 0, count: 3 * 44_100))
        #expect(abs(sig.duration - 3) < 1e-9)
        #expect(signatureError { try sig.validateForMatching() } == .signatureInvalid)
    }

    @Test("0.5 s of music is .signatureDurationInvalid; 2 s is fine")
    func tooShort() async throws {
        let m = try await music.value()
        let short = SignatureGenerator.signature(of: Signal.slice(m, start: 5, seconds: 0.5))
        #expect(abs(short.duration - 0.5) < 1e-9)
        #expect(signatureError { try short.validateForMatching() } == .signatureDurationInvalid)
        let enough = SignatureGenerator.signature(of: Signal.slice(m, start: 5, seconds: 2))
        #expect(signatureError { try enough.validateForMatching() } == nil)
    }

    @Test("a signature keeps peaks ranked up to deepRankLimit; the shallower ranks are the same peaks as without them")
    func deepPeaks() async throws {
        let m = Signal.slice(try await music.value(), start: 0, seconds: 10)
        let current = SignatureConfiguration.current
        let deep = SignatureGenerator.signature(of: m).peaks
        var shallowConfiguration = current
        shallowConfiguration.deepRankLimit = current.queryRankLimit
        let shallow = SignatureGenerator.signature(of: m, configuration: shallowConfiguration).peaks
        #expect(deep.allSatisfy { Int($0.rank) < current.deepRankLimit })
        #expect(deep.count(where: { Int($0.rank) >= current.queryRankLimit }) > deep.count / 3)
        #expect(deep.filter { Int($0.rank) < current.queryRankLimit } == shallow)
    }

    @Test("a signature of another algorithm version is .versionMismatch")
    func otherVersion() async throws {
        var sig = SignatureGenerator.signature(of: Signal.slice(try await music.value(), start: 0, seconds: 3))
        sig.configurationVersion = 99  // a version this build does not know
        #expect(signatureError { try sig.validateForMatching() } == .versionMismatch)
        // Its fields cannot be checked against an algorithm this build does not know, so its file is refused too.
        #expect(signatureError { _ = try Signature(dataRepresentation: sig.dataRepresentation()) } == .versionMismatch)
    }
}

/// A signature file is untrusted input: a file whose checksum is right (anyone can recompute it) but
/// whose fields no generator of this configuration writes must be refused on reading, before any of
/// them sizes a table or indexes one.
@Suite("Signature file: every field is validated")
struct SignatureFieldTests {
    /// A real 5-s signature with `edit` applied, encoded with a correct checksum, then read back.
    func read(_ edit: (inout Signature) -> Void) async throws -> SignatureError? {
        var sig = SignatureGenerator.signature(of: Signal.slice(try await music.value(), start: 2, seconds: 5))
        edit(&sig)
        do {
            _ = try Signature(dataRepresentation: sig.dataRepresentation())
            return nil
        } catch let e as SignatureError {
            return e
        }
    }

    @Test("the unedited signature reads back")
    func unedited() async throws {
        #expect(try await read { _ in } == nil)
    }

    @Test("signatures of real music at any level pass the checks, down to the faintest peaks the picker keeps")
    func everyLevelPasses() async throws {
        let music12 = Signal.slice(try await music.value(), start: 0, seconds: 12)
        var faintest = Float.infinity
        for gainDB in stride(from: 0.0, through: -110, by: -10) {
            let gain = Float(pow(10, gainDB / 20))
            let sig = SignatureGenerator.signature(of: music12.map { $0 * gain })
            faintest = min(faintest, sig.peaks.map(\.level).min() ?? .infinity)
            #expect(throws: Never.self, "\(gainDB) dB") { try sig.validateStructure() }
            #expect(throws: Never.self, "\(gainDB) dB") { _ = try Signature(dataRepresentation: sig.dataRepresentation()) }
        }
        // The faintest peaks sit below levelFloor itself, in the bass: the bin's tilt lowers their level.
        #expect(faintest < SignatureConfiguration.current.levelFloor, "faintest peak \(faintest) dB")
    }

    @Test("a peak's bin outside the band is refused", arguments: [0, 11, 187, 255, 256, 65_535])
    func binOutsideBand(bin: Int) async throws {
        let e = try await read { $0.peaks[40].bin = UInt16(bin) }
        #expect(e?.code == .invalidFile)
        #expect(e?.message.hasPrefix("not a valid signature file") == true, "\(String(describing: e))")
        #expect(e?.message.contains("bin \(bin)") == true, "\(String(describing: e))")
    }

    @Test("a peak frame past the duration is refused", arguments: [UInt32(600), UInt32(1) << 31, UInt32.max])
    func frameBeyondDuration(frame: UInt32) async throws {
        let e = try await read { s in
            let i = s.peaks.count - 1
            s.peaks[i].frame = frame
        }
        #expect(e?.code == .invalidFile)
    }

    @Test("peaks out of frame order are refused")
    func framesOutOfOrder() async throws {
        #expect(try await read { $0.peaks.swapAt(10, 200) }?.code == .invalidFile)
    }

    @Test("a rank at or over deepRankLimit, or a level that is not finite or out of range, is refused",
          arguments: [0, 1, 2, 3, 4])
    func rankAndLevel(kind: Int) async throws {
        let e = try await read { s in
            switch kind {
            case 0: s.peaks[7].rank = UInt16(SignatureConfiguration.current.deepRankLimit)
            case 1: s.peaks[7].level = .nan
            case 2: s.peaks[7].level = .infinity
            case 3: s.peaks[7].level = -1000
            default: s.peaks[7].level = 1e9
            }
        }
        #expect(e?.code == .invalidFile)
    }

    @Test("a duration that is not finite, negative or beyond 24 hours is refused",
          arguments: [Double.nan, -1.0, Double.infinity, 24.0 * 3600 + 1])
    func duration(seconds: Double) async throws {
        #expect(try await read { $0.duration = seconds }?.code == .invalidFile)
    }

    @Test("more peaks in one frame, or in one ranking window, than the peak picker can make is refused")
    func density() async throws {
        let crowdedFrame = try await read { s in
            let f = s.peaks[50].frame
            let extra = (12..<187).map { Peak(frame: f, bin: UInt16($0), rank: 1, level: 0) }
            s.peaks.insert(contentsOf: extra, at: 50)
        }
        #expect(crowdedFrame?.code == .invalidFile)
        let crowdedWindow = try await read { s in
            // 20 peaks in each of 50 frames, 4 bins apart: each frame is plausible, the window is not.
            let f0 = s.peaks.last!.frame + 1
            for f in 0..<50 {
                for k in 0..<20 { s.peaks.append(Peak(frame: f0 + UInt32(f), bin: UInt16(12 + 8 * k), rank: 1, level: 0)) }
            }
            s.duration += 1
        }
        #expect(crowdedWindow?.code == .invalidFile)
        #expect(crowdedWindow?.message.contains("within") == true, "\(String(describing: crowdedWindow))")
    }

    @Test("a file larger than any signature is refused unread")
    func oversized() {
        let limit = Signature.maximumFileBytes()
        #expect(limit < 1 << 30, "the bound is useful (\(limit) bytes)")
        #expect(signatureError { _ = try Signature(dataRepresentation: Data(count: limit + 1)) } == .invalidFile)
    }

    @Test("identical signatures share a content identity; any changed peak gives another")
    func contentIdentity() async throws {
        let sig = SignatureGenerator.signature(of: Signal.slice(try await music.value(), start: 2, seconds: 5))
        #expect(sig.contentIdentity.hasPrefix("sig-") && sig.contentIdentity.count == 36)
        #expect(try Signature(dataRepresentation: sig.dataRepresentation()).contentIdentity == sig.contentIdentity)
        var other = sig
        other.peaks[3].bin += 1
        #expect(other.contentIdentity != sig.contentIdentity)
        let later = SignatureGenerator.signature(of: Signal.slice(try await music.value(), start: 8, seconds: 5))
        #expect(later.contentIdentity != sig.contentIdentity)
    }
}

@Suite("SignatureGenerator streaming")
struct SignatureStreamingTests {
    @Test("appending in chunks of odd sizes gives exactly the peaks of one append")
    func oddChunks() async throws {
        let m = Signal.slice(try await music.value(), start: 0, seconds: 8)
        let whole = SignatureGenerator.signature(of: m)
        let g = SignatureGenerator()
        let sizes = [1, 7, 333, 4099, 10_007, 441, 2048, 13]
        var start = 0, k = 0
        while start < m.count {
            let end = min(m.count, start + sizes[k % sizes.count])
            try g.append(Array(m[start..<end]))
            start = end
            k += 1
        }
        let chunked = g.signature()
        #expect(chunked.peaks.count == whole.peaks.count)
        #expect(chunked.peaks == whole.peaks)
        #expect(chunked.duration == whole.duration)
    }

    @Test("a buffer time that continues the stream is the same as no time")
    func contiguousTimes() async throws {
        let m = Signal.slice(try await music.value(), start: 0, seconds: 6)
        let g = SignatureGenerator()
        try g.append(Array(m[0..<100_000]), at: 0)
        try g.append(Array(m[100_000...]), at: 100_000 / 44_100)
        #expect(g.signature().peaks == SignatureGenerator.signature(of: m).peaks)
    }

    @Test("after a timestamped gap, later peaks sit at their stream time")
    func gapKeepsTime() async throws {
        let m = try await music.value()
        let a = Signal.slice(m, start: 0, seconds: 3), b = Signal.slice(m, start: 8, seconds: 3)
        let g = SignatureGenerator()
        try g.append(a, at: 0)
        try g.append(b, at: 10)            // 10 s = frame 1000 exactly (hop 441)
        let gapped = g.signature()
        #expect(abs(gapped.duration - 13) < 1e-9)

        let aAlone = SignatureGenerator.signature(of: a)
        let bAlone = SignatureGenerator.signature(of: b)
        #expect(!bAlone.peaks.isEmpty)
        let before = gapped.peaks.filter { $0.frame < 1000 }
        let after = gapped.peaks.filter { $0.frame >= 1000 }
        #expect(before == aAlone.peaks)
        let shifted = bAlone.peaks.map { p -> Peak in var q = p; q.frame += 1000; return q }
        #expect(after == shifted)
        #expect(!gapped.peaks.contains { $0.frame > 300 && $0.frame < 1000 }, "no peaks inside the gap")
    }

    @Test("a gap that does not fall on a frame boundary still keeps times within one frame")
    func unalignedGap() async throws {
        let m = try await music.value()
        let b = Signal.slice(m, start: 8, seconds: 4)
        let g = SignatureGenerator()
        try g.append(Signal.slice(m, start: 0, seconds: 2))
        try g.append(b, at: 7.2345)
        let after = g.signature().peaks.filter { $0.frame >= 700 }
        let reference = SignatureGenerator.signature(of: b).peaks.filter { $0.rank < 14 }
        // Each strong peak of B alone reappears at the same bin, 7.2345 s (723.45 frames) later, ± 1 frame.
        let found = reference.filter { p in
            after.contains { q in q.bin == p.bin && abs(Double(q.frame) - (Double(p.frame) + 723.45)) <= 1.0 }
        }
        #expect(Double(found.count) >= 0.8 * Double(reference.count), "\(found.count) of \(reference.count) peaks found")
        #expect(after.allSatisfy { $0.frame >= 724 }, "the first frame after the gap starts at or after 7.2345 s")
    }

    @Test("a buffer time before the end of the stream throws")
    func timeGoesBack() async throws {
        let m = try await music.value()
        let g = SignatureGenerator()
        try g.append(Signal.slice(m, start: 0, seconds: 1))
        #expect(throws: SignatureError.self) { try g.append(Signal.slice(m, start: 1, seconds: 1), at: 0.5) }
    }
}

@Suite("Landmarks of damaged signature files")
struct DamagedLandmarkTests {
    @Test("peaks below the lowest bin or out of frame order pair without a crash (found by fuzz-signature)")
    func outOfRangePeaks() throws {
        let c = SignatureConfiguration.current
        // Bin 0 is below minBin; frames run backwards, so a repeated hash comes "earlier" than the last one seen.
        let peaks = [Peak(frame: 40, bin: 0, rank: 0, level: 1), Peak(frame: 42, bin: 3, rank: 0, level: 1),
                     Peak(frame: 10, bin: 0, rank: 0, level: 1), Peak(frame: 12, bin: 3, rank: 0, level: 1)]
        let signature = Signature(configurationVersion: c.version, duration: 1, peaks: peaks)
        // The file reader refuses such peaks; a signature built in memory can still hold them, and hashing must not trap.
        #expect(throws: SignatureError.self) { _ = try Signature(dataRepresentation: signature.dataRepresentation()) }
        for role in [LandmarkRole.reference, .query, .deepQuery] {
            let landmarks = Landmarks.extract(from: signature, role: role)
            #expect(landmarks.map(\.frame) == [40, 10], "\(role)")
            #expect(Set(landmarks.map(\.hash)).count == 1)
        }
        // In range, the hash is as before: anchor bin above minBin, bin difference + 64, frame difference.
        let h = Landmarks.hash(anchorBin: c.minBin + 5, targetBin: c.minBin + 2, dt: 7, configuration: c)
        #expect(h == 5 << 13 | 61 << 6 | 7)
    }
}
