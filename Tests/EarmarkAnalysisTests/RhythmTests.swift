import EarmarkAnalysis
import EarmarkTestSupport
import Foundation
import Testing

/// A drum pattern at `bpm`: a low "kick" (80 Hz burst) on each bar's first beat, a high click on
/// every beat, and quiet noise, starting at `start` seconds.
private func pattern(bpm: Double, beatsPerBar: Int, seconds: Double, start: Double = 0.5) -> (audio: [Float], beats: [Double]) {
    let rate = 44_100.0
    var out = Signal.whiteNoise(count: Int(seconds * rate), rms: 0.003, seed: 3)
    var beats: [Double] = []
    var t = start, i = 0
    while t < seconds - 0.3 {
        beats.append(t)
        let at = Int(t * rate)
        let downbeat = i % beatsPerBar == 0
        for n in 0..<Int(0.35 * rate) where at + n < out.count {
            let x = Double(n) / rate
            var v = 0.25 * sin(2 * Double.pi * 2_000 * x) * exp(-x * 60)
            if downbeat { v += 0.6 * sin(2 * Double.pi * 80 * x) * exp(-x * 18) }
            out[at + n] += Float(v)
        }
        t += 60 / bpm
        i += 1
    }
    return (out, beats)
}

/// The rhythm of `samples` at `rate`, fed to a ``BeatTracker`` in 8,192-sample buffers as a stream would.
func trackedRhythm(_ samples: [Float], rate: Double = 44_100) throws -> RhythmResult? {
    let tracker = try BeatTracker(inputRate: rate)
    var i = 0
    while i < samples.count {
        tracker.append(Array(samples[i..<min(samples.count, i + 8_192)]))
        i += 8_192
    }
    return tracker.result()
}

@Suite("Rhythm: beats, bars, BPM")
struct RhythmTests {
    @Test("a 4/4 pattern at 100, 128 and 87 BPM: tempo within 1 BPM, beats F ≥ 0.9 within ±30 ms, bars on the kicks")
    func fourFour() throws {
        for bpm in [100.0, 128.0, 87.0] {
            let (audio, truth) = pattern(bpm: bpm, beatsPerBar: 4, seconds: 30)
            let r = try #require(try trackedRhythm(audio))
            #expect(abs((r.bpm ?? 0) - bpm) < 1, "\(bpm): \(String(describing: r.bpm))")
            #expect(BeatTracker.fMeasure(estimated: r.beats, reference: truth, tolerance: 0.03) >= 0.9, "\(bpm): \(r.beats.prefix(3)) vs \(truth.prefix(3))")
            #expect(r.beatsPerBar == 4)
            let downbeats = stride(from: 0, to: truth.count, by: 4).map { truth[$0] }
            #expect(BeatTracker.fMeasure(estimated: r.bars, reference: downbeats) >= 0.9, "\(bpm) bars \(r.bars.prefix(4))")
        }
    }

    @Test("a waltz is laid out in bars of three")
    func waltz() throws {
        let (audio, truth) = pattern(bpm: 150, beatsPerBar: 3, seconds: 30)
        let r = try #require(try trackedRhythm(audio))
        #expect(r.beatsPerBar == 3)
        #expect(BeatTracker.fMeasure(estimated: r.beats, reference: truth) >= 0.9)
        #expect(abs((r.bpm ?? 0) - 150) < 1, "\(String(describing: r.bpm))")
        let downbeats = stride(from: 0, to: truth.count, by: 3).map { truth[$0] }
        #expect(BeatTracker.fMeasure(estimated: r.bars, reference: downbeats) >= 0.8)
    }

    @Test("bars follow the chord changes when every beat's click is equally loud (harmonic change)")
    func chordBars() throws {
        // Equal clicks at 110 BPM over a chord held for each bar of four (C, F, G, A minor, …); the music
        // starts on the second beat of the click track, so the first click is not a downbeat.
        let rate = 44_100.0, bpm = 110.0, seconds = 32.0
        var out = Signal.whiteNoise(count: Int(seconds * rate), rms: 0.003, seed: 5)
        let chords: [[Double]] = [[261.6, 329.6, 392.0], [349.2, 440.0, 523.3], [392.0, 493.9, 587.3], [440.0, 523.3, 659.3]]
        var beats: [Double] = []
        var t = 0.5, i = 0
        while t < seconds - 0.3 {
            beats.append(t)
            let at = Int(t * rate)
            for n in 0..<Int(0.2 * rate) where at + n < out.count {
                let x = Double(n) / rate
                out[at + n] += Float(0.25 * sin(2 * Double.pi * 2_000 * x) * exp(-x * 60))
            }
            if i >= 1, (i - 1) % 4 == 0 {
                let chord = chords[((i - 1) / 4) % chords.count]
                for n in 0..<Int(4 * 60 / bpm * rate) where at + n < out.count {
                    let x = Double(n) / rate
                    out[at + n] += Float(chord.reduce(0) { $0 + 0.08 * sin(2 * Double.pi * $1 * x) })
                }
            }
            t += 60 / bpm
            i += 1
        }
        let r = try #require(try trackedRhythm(out))
        #expect(abs((r.bpm ?? 0) - bpm) < 1, "\(String(describing: r.bpm))")
        #expect(r.beatsPerBar == 4)
        let downbeats = stride(from: 1, to: beats.count, by: 4).map { beats[$0] }
        #expect(BeatTracker.fMeasure(estimated: r.bars, reference: downbeats) >= 0.8, "bars \(r.bars.prefix(4)) vs \(downbeats.prefix(4))")
    }

    @Test("pace counts onsets per minute, steadily: a click a beat at 120 BPM is about 120 events a minute")
    func pace() throws {
        let (audio, _) = pattern(bpm: 120, beatsPerBar: 4, seconds: 40)
        let tracker = try BeatTracker(inputRate: 44_100)
        tracker.append(audio)
        let p = try #require(tracker.pace())
        #expect(abs(p.overall - 120) < 12, "\(p.overall)")
        #expect(p.values.count >= 6)
        #expect(p.values.dropLast().allSatisfy { abs($0.value - 120) <= 18 }, "\(p.values.map(\.value))")
    }

    @Test("F-measure counts each reference beat once")
    func fMeasure() {
        #expect(BeatTracker.fMeasure(estimated: [1, 2, 3], reference: [1.05, 2, 3.2]) == 2.0 / 3.0)
        #expect(BeatTracker.fMeasure(estimated: [1, 1.01], reference: [1]) == 2.0 / 3.0)
        #expect(BeatTracker.fMeasure(estimated: [], reference: [1]) == 0)
    }

    @Test("silence and a 0.5-s file have no rhythm; noise does not crash")
    func badInput() throws {
        #expect(try trackedRhythm([Float](repeating: 0, count: 44_100 * 10)) == nil)
        #expect(try trackedRhythm(Signal.sine(frequency: 440, sampleRate: 44_100, seconds: 0.5)) == nil)
        _ = try trackedRhythm(Signal.whiteNoise(count: 44_100 * 10, rms: 0.1, seed: 9))
    }
}

@Suite("Structure: sections, segments, phrases")
struct StructureTests {
    @Test("a medley of three real tracks is cut into sections at the joins; phrases follow the bars")
    func medley() throws {
        let audio = try TestAudio.set()
        var samples: [Float] = []
        var joins: [Double] = []
        for (i, stem) in ["pingus-4", "sorcerer", "goin_march"].enumerated() {
            let track = try Fixtures.decode(try audio.reference(stem))
            if i > 0 { joins.append(Double(samples.count) / 44_100) }
            samples += track[(10 * 44_100)..<(50 * 44_100)]
        }
        let analyzer = try StructureAnalyzer(inputRate: 44_100)
        analyzer.append(samples)
        let bars = stride(from: 0.0, to: 120, by: 2.4).map { $0 }
        let r = try #require(analyzer.result(bars: bars))
        let cuts = r.sections.dropFirst().map(\.start)
        #expect(StructureAnalyzer.boundaryF(estimated: cuts, reference: joins) >= 0.66, "\(cuts) vs \(joins)")
        #expect(r.sections.first?.start == 0 && abs((r.sections.last?.end ?? 0) - r.duration) < 1e-9)
        #expect(r.sections.allSatisfy { $0.label != nil })
        #expect(r.segments.count >= r.sections.count)
        #expect(!r.phrases.isEmpty && r.phrases.allSatisfy { $0.end > $0.start })
    }

    @Test("silence and a 2-s file have no structure worth reporting, without crashing")
    func badInput() throws {
        let a = try StructureAnalyzer(inputRate: 44_100)
        a.append([Float](repeating: 0, count: 44_100 * 2))
        #expect(a.result() == nil)
        let b = try StructureAnalyzer(inputRate: 44_100)
        b.append([Float](repeating: 0, count: 44_100 * 30))
        if let r = b.result() { #expect(r.sections.count == 1, "\(r.sections)") }
    }
}
