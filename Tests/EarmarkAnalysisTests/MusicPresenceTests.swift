import EarmarkAnalysis
import EarmarkTestSupport
import Foundation
import Testing

/// Key, rhythm, structure and pace of `samples` (44.1 kHz mono), with the music found by level alone, or
/// over the whole file when `gated` is false (as before music was told apart).
private struct Measured {
    var music: MusicPresence?
    var key: KeyResult?
    var rhythm: RhythmResult?
    var structure: StructureResult?
    var pace: PaceResult?

    init(_ samples: [Float], gated: Bool = true) throws {
        let key = try KeyDetector(inputRate: 44_100), beats = try BeatTracker(inputRate: 44_100)
        let structure = try StructureAnalyzer(inputRate: 44_100)
        let levels = LevelWindows(sampleRate: 44_100)
        var i = 0
        while i < samples.count {
            let chunk = Array(samples[i..<min(samples.count, i + 16_384)])
            key.append(chunk)
            beats.append(chunk)
            structure.append(chunk)
            levels.append(chunk)
            i += 16_384
        }
        music = gated ? MusicPresence(evidence: levels.evidence(), duration: Double(samples.count) / 44_100) : nil
        self.key = key.result(music: music)
        rhythm = beats.result(music: music)
        self.structure = structure.result(bars: rhythm?.bars ?? [], music: music)
        pace = beats.pace(music: music)
    }
}

/// 30 s of digital silence, or of TPDF dither at the 16-bit step (about −96 dBFS RMS) scaled to `dBFS` RMS.
private func nearSilence(seconds: Double = 30, dBFS: Double?) -> [Float] {
    let n = Int(seconds * 44_100)
    guard let dBFS else { return [Float](repeating: 0, count: n) }
    var state: UInt64 = 0x9E37_79B9_7F4A_7C15
    func unit() -> Float {   // xorshift64: the same numbers on every machine
        state ^= state << 13
        state ^= state >> 7
        state ^= state << 17
        return Float(state >> 40) / Float(1 << 24)
    }
    // The difference of two uniform values has a triangular density with RMS 1/√6 of the range ±1.
    let scale = Float(pow(10, dBFS / 20) * 6.0.squareRoot())
    return (0..<n).map { _ in (unit() - unit()) * scale }
}

@Suite("Music presence: no key, beats or sections without music")
struct MusicPresenceTests {
    @Test("ranges and reasons from windows of evidence")
    func evidence() {
        func windows(_ values: [(level: Double, music: Double?, speech: Double?)]) -> [MusicEvidence] {
            values.enumerated().map { MusicEvidence(start: Double($0.offset), end: Double($0.offset + 1), level: $0.element.level,
                                                    music: $0.element.music, speech: $0.element.speech) }
        }
        let silent = MusicPresence(evidence: windows(Array(repeating: (-90, nil, nil), count: 20)), duration: 20)
        #expect(silent.ranges.isEmpty && silent.reason == .silence && silent.method == "level")
        let loud = MusicPresence(evidence: windows(Array(repeating: (-20, nil, nil), count: 20)), duration: 20)
        #expect(loud.ranges == [MusicRange(start: 0, end: 20)] && loud.reason == nil)
        let speech = MusicPresence(evidence: windows(Array(repeating: (-20, 0.05, 0.9), count: 20)), duration: 20)
        #expect(speech.ranges.isEmpty && speech.reason == .speech && speech.method == "classifier")
        let noise = MusicPresence(evidence: windows(Array(repeating: (-20, 0.05, 0.1), count: 20)), duration: 20)
        #expect(noise.reason == .noMusic)
        // Speech for 10 s, then music for 10 s with one doubtful window (bridged by hysteresis), then 6 s of silence.
        var mixed = Array(repeating: (level: -20.0, music: Double?(0.02), speech: Double?(0.9)), count: 10)
        mixed += Array(repeating: (level: -18.0, music: Double?(0.8), speech: Double?(0.0)), count: 10)
        mixed[14].music = 0.2
        mixed += Array(repeating: (level: -100.0, music: Double?(0.0), speech: Double?(0.0)), count: 6)
        let m = MusicPresence(evidence: windows(mixed), duration: 26)
        #expect(m.ranges == [MusicRange(start: 10, end: 20)] && m.reason == nil)
        // Music too short to measure is no music.
        var blip = Array(repeating: (level: -20.0, music: Double?(0.0), speech: Double?(0.9)), count: 20)
        for i in 5..<8 { blip[i] = (-20, 0.9, 0) }
        #expect(MusicPresence(evidence: windows(blip), duration: 20).reason == .speech)
    }

    @Test("the level of each window, as the classifier measures it", arguments: [-3.0, -40.0, -90.0])
    func levels(dBFS: Double) {
        let rate = 44_100.0
        let sine = (0..<Int(3 * rate)).map { Float(pow(10, (dBFS + 3) / 20) * sin(2 * Double.pi * 440 * Double($0) / rate)) }
        let levels = LevelWindows(sampleRate: rate)
        levels.append(sine)
        let windows = levels.evidence()
        #expect(windows.count == 4)   // three whole windows and a last one of 0.12 s
        for w in windows { #expect(abs(w.level - dBFS) < 0.1, "\(w)") }
    }

    @Test("digital and dithered silence get no key, no beats, no sections, no pace", arguments: [nil, -90.0])
    func silence(dBFS: Double?) throws {
        let samples = nearSilence(dBFS: dBFS)
        let gated = try Measured(samples)
        #expect(gated.music?.reason == .silence)
        #expect(gated.key == nil)
        let rhythm = try #require(gated.rhythm)
        #expect(rhythm.beats.isEmpty && rhythm.bars.isEmpty && rhythm.bpm == nil && rhythm.reason == .silence)
        let structure = try #require(gated.structure)
        #expect(structure.sections.isEmpty && structure.segments.isEmpty && structure.reason == .silence)
        let pace = try #require(gated.pace)
        #expect(pace.values.isEmpty && pace.overall == 0 && pace.reason == .silence)
        if dBFS != nil {
            // Over the whole file, as before, the dither's flux made a tempo, bars and sections: the gate is what removes them.
            let whole = try Measured(samples, gated: false)
            #expect((whole.rhythm?.beats.count ?? 0) > 10)
        }
    }

    @Test("real music keeps its key and tempo", arguments: ["pingus-4", "goin_march"])
    func music(stem: String) throws {
        let samples = try Fixtures.decode(try TestAudio.set().reference(stem))
        let gated = try Measured(samples), whole = try Measured(samples, gated: false)
        let music = try #require(gated.music)
        #expect(music.reason == nil)
        let covered = music.ranges.reduce(0) { $0 + $1.duration }
        #expect(covered > 0.95 * music.duration, "\(music.ranges)")
        #expect(gated.key?.key == whole.key?.key && gated.key != nil)
        let bpm = try #require(gated.rhythm?.bpm), wholeBPM = try #require(whole.rhythm?.bpm)
        #expect(abs(bpm / wholeBPM - 1) < 0.02, "\(bpm) vs \(wholeBPM)")
        #expect((gated.structure?.sections.count ?? 0) >= 1 && (gated.pace?.overall ?? 0) > 30)
    }

    @Test("silence, then music: only the music is measured, and its times are the file's")
    func silenceThenMusic() throws {
        let music = try Fixtures.decode(try TestAudio.set().reference("pingus-4"))
        let clip = Array(music[Int(20 * 44_100)..<Int(60 * 44_100)])
        let samples = nearSilence(seconds: 15, dBFS: -90) + clip
        let gated = try Measured(samples), alone = try Measured(clip, gated: false)
        let ranges = try #require(gated.music?.ranges)
        #expect(ranges.count == 1)
        #expect(abs((ranges.first?.start ?? 0) - 15) < 1, "\(ranges)")
        let beats = try #require(gated.rhythm?.beats)
        #expect(beats.allSatisfy { $0 >= 14 }, "\(beats.prefix(3))")
        // The same beats as on the music alone, 15 s later, once the tracker has settled: the range starts at a
        // window's edge, up to 0.96 s early, and that lead-in moves the first beats (measured: all of them agree
        // from 15 s into the music on, within 20 ms).
        let shifted = alone.rhythm?.beats.map { $0 + 15 } ?? []
        let late = beats.filter { $0 >= 35 }
        #expect(late.count >= 30)
        #expect(BeatTracker.fMeasure(estimated: late, reference: shifted.filter { $0 >= 35 }, tolerance: 0.02) > 0.95)
        let bpm = try #require(gated.rhythm?.bpm), aloneBPM = try #require(alone.rhythm?.bpm)
        #expect(abs(bpm / aloneBPM - 1) < 0.01, "\(bpm) vs \(aloneBPM)")
        #expect(gated.key?.key == alone.key?.key && gated.key != nil)
        #expect(gated.key?.ranges.first.map { $0.start >= 14 } ?? false)
        #expect(gated.structure?.sections.first.map { $0.start >= 14 } ?? false)
        #expect(gated.pace?.values.allSatisfy { $0.start >= 14 } ?? false)
    }
}
