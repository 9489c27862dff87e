@testable import EarmarkAnalysis
import EarmarkTestSupport
import Foundation
import Testing

/// A click (2 kHz burst) on each beat and an 80-Hz kick on every fourth, over quiet noise, at the beat
/// times `beats` (seconds); `seconds` long.
private func clicks(at beats: [Double], seconds: Double) -> [Float] {
    let rate = 44_100.0
    var out = Signal.whiteNoise(count: Int(seconds * rate), rms: 0.003, seed: 3)
    for (i, t) in beats.enumerated() {
        let at = Int(t * rate)
        for n in 0..<Int(0.3 * rate) where at + n < out.count {
            let x = Double(n) / rate
            var v = 0.25 * sin(2 * Double.pi * 2_000 * x) * exp(-x * 60)
            if i % 4 == 0 { v += 0.6 * sin(2 * Double.pi * 80 * x) * exp(-x * 18) }
            out[at + n] += Float(v)
        }
    }
    return out
}

/// Beat times from 0.5 s on whose tempo follows `bpm(t)` until `seconds` − 0.5.
private func beatTimes(seconds: Double, bpm: (Double) -> Double) -> [Double] {
    var out: [Double] = [], t = 0.5
    while t < seconds - 0.5 {
        out.append(t)
        t += 60 / bpm(t)
    }
    return out
}


/// The tempo the curve gives at `time` (nil outside it).
private func curve(_ r: RhythmResult, at time: Double) -> Double? {
    r.tempo.first { $0.start <= time && time < $0.end }?.bpm
}

/// Every reference beat has an estimated beat within `tolerance` seconds.
private func allFound(_ estimated: [Double], _ reference: [Double], tolerance: Double = 0.07) -> [Double] {
    reference.filter { t in !estimated.contains { abs($0 - t) <= tolerance } }
}

@Suite("Rhythm: tempo changes and the metrical level")
struct TempoTests {
    @Test("an accelerating click track (90 → 125 BPM over 60 s) and a slowing one: beats within ±70 ms from 8 s on, the tempo curve within 6 %")
    func ramp() throws {
        for (from, to) in [(90.0, 125.0), (130.0, 95.0)] {
            let seconds = 64.0
            let truth = beatTimes(seconds: seconds) { from + (to - from) * min(1, $0 / 60) }
            let r = try #require(try trackedRhythm(clicks(at: truth, seconds: seconds)))
            // The first seconds may be tracked at another level before the path settles (identical clicks
            // give the harmonic-change term nothing but noise).
            let missed = allFound(r.beats, truth.filter { $0 >= 8 && $0 < seconds - 3 })
            #expect(missed.isEmpty, "\(from)→\(to): missed \(missed)")
            #expect(BeatTracker.fMeasure(estimated: r.beats, reference: truth) >= 0.9)
            #expect(r.tempo.count >= 3, "\(r.tempo)")
            #expect(r.tempo.first.map { abs($0.start - r.beats[0]) < 1e-9 } == true && r.tempo.last.map { abs($0.end - r.beats.last!) < 1e-9 } == true)
            var worst = 0.0
            for (a, b) in zip(truth, truth.dropFirst()) where a > 8 && b < seconds - 8 {
                let bpm = try #require(curve(r, at: (a + b) / 2))
                worst = max(worst, abs(bpm * (b - a) / 60 - 1))
            }
            #expect(worst <= 0.06, "\(from)→\(to): worst tempo error \(worst); \(r.tempo.map { String(format: "%.0f-%.0f %.1f", $0.start, $0.end, $0.bpm) })")
        }
    }

    @Test("a steady click track has one stretch of tempo, and its bpm is that of the beats")
    func steady() throws {
        let truth = beatTimes(seconds: 40) { _ in 112 }
        let r = try #require(try trackedRhythm(clicks(at: truth, seconds: 40)))
        #expect(r.tempo.count == 1, "\(r.tempo)")
        #expect(abs((r.bpm ?? 0) - 112) < 1, "\(String(describing: r.bpm))")
    }

    @Test("a tempo change from 100 to 125 BPM at 30 s (a medley's join) is followed")
    func step() throws {
        let truth = beatTimes(seconds: 60) { $0 < 30 ? 100 : 125 }
        let r = try #require(try trackedRhythm(clicks(at: truth, seconds: 60)))
        #expect(BeatTracker.fMeasure(estimated: r.beats, reference: truth) >= 0.9)
        #expect(abs((curve(r, at: 15) ?? 0) - 100) < 3 && abs((curve(r, at: 45) ?? 0) - 125) < 4,
                "\(r.tempo.map { String(format: "%.1f-%.1f %.1f", $0.start, $0.end, $0.bpm) })")
    }

    @Test("a slow tune at 60 BPM with off-beat notes on every other beat is not doubled")
    func slowTune() throws {
        // A note on every beat (pitches of a tune), an equally loud eighth note between every other pair.
        let rate = 44_100.0, seconds = 45.0, bpm = 60.0
        var out = Signal.whiteNoise(count: Int(seconds * rate), rms: 0.002, seed: 7)
        let pitches = [392.0, 440, 494, 523, 587, 523, 494, 440]
        var truth: [Double] = []
        func note(_ t: Double, _ f: Double, length: Double) {
            let at = Int(t * rate)
            for n in 0..<Int(length * rate) where at + n < out.count {
                let x = Double(n) / rate
                out[at + n] += Float(0.2 * exp(-x * 3) * (sin(2 * .pi * f * x) + 0.5 * sin(4 * .pi * f * x) + 0.25 * sin(6 * .pi * f * x)))
            }
        }
        var i = 0
        for t in stride(from: 0.5, to: seconds - 1, by: 60 / bpm) {
            truth.append(t)
            note(t, pitches[i % pitches.count], length: i % 2 == 0 ? 0.5 : 1)
            if i % 2 == 0 { note(t + 0.5, pitches[(i + 3) % pitches.count], length: 0.5) }
            i += 1
        }
        let r = try #require(try trackedRhythm(out))
        #expect(abs((r.bpm ?? 0) / bpm - 1) < 0.03, "\(String(describing: r.bpm))")
        #expect(BeatTracker.fMeasure(estimated: r.beats, reference: truth) >= 0.9)
    }

    @Test("the rendered march slowed to 0.55 × (a tape played slow: 60.5 BPM) reports its slowed written tempo, not double")
    func slowedMarch() throws {
        let script = TestPaths.repositoryRoot.appendingPathComponent("tools/test-renders.sh").path
        let run = try Run.process("/bin/bash", [script], timeout: 1200)
        let dirLine = try #require(run.stdoutText.split(separator: "\n").last, "\(run)")
        let dir = URL(fileURLWithPath: String(dirLine).trimmingCharacters(in: .whitespaces))
        struct Truth: Decodable { var beats: Int; var beatPeriod: Double }
        let truth = try #require(try JSONDecoder().decode([String: Truth].self, from: Data(contentsOf: dir.appendingPathComponent("truth.json")))["march"])
        let source = try Fixtures.decode(dir.appendingPathComponent("march.wav"))
        // Output sample i reads the source at 0.55 i: tempo and pitch fall together. The march's eighth notes
        // now come 121 times a minute, near the 130-BPM prior; the beat is the slower level.
        let speed = 0.55
        var out: [Float] = []
        var pos = 0.0
        while pos < Double(source.count - 1) {
            let i = Int(pos), f = Float(pos - Double(i))
            out.append(source[i] * (1 - f) + source[i + 1] * f)
            pos += speed
        }
        let reference = (0..<truth.beats).map { Double($0) * truth.beatPeriod / speed }
        let r = try #require(try trackedRhythm(out))
        let bpm = 60 * speed / truth.beatPeriod
        #expect(abs((r.bpm ?? 0) / bpm - 1) < 0.03, "bpm \(String(describing: r.bpm)), written \(bpm)")
        #expect(BeatTracker.fMeasure(estimated: r.beats, reference: reference) >= 0.9)
    }

    @Test("analyses stored before version 3 (without tempo) still decode; the tempo round-trips")
    func codable() throws {
        let old = #"{"beats":[0.5,1,1.5],"bars":[0.5],"beatsPerBar":4,"bpm":120,"duration":2}"#
        let r = try JSONDecoder().decode(RhythmResult.self, from: Data(old.utf8))
        #expect(r.tempo.isEmpty && r.bpm == 120 && r.beats.count == 3)
        var new = r
        new.tempo = [TempoSegment(start: 0.5, end: 1.5, bpm: 120)]
        #expect(try JSONDecoder().decode(RhythmResult.self, from: JSONEncoder().encode(new)) == new)
    }

    /// 1.4 ×: 154 BPM after 110, beyond the tempo states. 1.5 ×: 165 after 110, a 3:2 step, which a steady piece's comb
    /// can also take to a triplet level; rhythm version 9 took no such step for a change (F 0.52 over the whole medley).
    @Test("a medley of the rendered march and the same march played faster (a tape at 1.4 × or 1.5 ×): the beats follow the new tempo",
          arguments: [1.4, 1.5])
    func medley(speed: Double) throws {
        let script = TestPaths.repositoryRoot.appendingPathComponent("tools/test-renders.sh").path
        let run = try Run.process("/bin/bash", [script], timeout: 1200)
        let dirLine = try #require(run.stdoutText.split(separator: "\n").last, "\(run)")
        let dir = URL(fileURLWithPath: String(dirLine).trimmingCharacters(in: .whitespaces))
        struct Truth: Decodable { var beats: Int; var beatPeriod: Double }
        let truth = try #require(try JSONDecoder().decode([String: Truth].self, from: Data(contentsOf: dir.appendingPathComponent("truth.json")))["march"])
        let source = try Fixtures.decode(dir.appendingPathComponent("march.wav"))
        // The march as rendered, then again played faster (a tape at `speed`: pitch and tempo rise together).
        let rate = 44_100.0
        var out = source
        var pos = 0.0
        while pos < Double(source.count - 1) {
            let i = Int(pos), f = Float(pos - Double(i))
            out.append(source[i] * (1 - f) + source[i + 1] * f)
            pos += speed
        }
        let join = Double(source.count) / rate
        let first = (0..<truth.beats).map { Double($0) * truth.beatPeriod }.filter { $0 < join }
        let second = (0..<truth.beats).map { join + Double($0) * truth.beatPeriod / speed }
        let r = try #require(try trackedRhythm(out))
        let secondF = BeatTracker.fMeasure(estimated: r.beats.filter { $0 >= join + 1 }, reference: second.filter { $0 >= join + 1 })
        #expect(secondF >= 0.8, "after the join: F \(secondF); tempo \(r.tempo)")
        #expect(BeatTracker.fMeasure(estimated: r.beats, reference: first + second) >= 0.85)
        let fast = 60 * speed / truth.beatPeriod
        #expect(abs((curve(r, at: join + 15) ?? 0) / fast - 1) < 0.05, "\(r.tempo)")
    }

    @Test("a ramp's beat wins over its eighths in windows of 12 s, where the whole comb smears its long lags (120 → 90 BPM over 90 s); a steady piece keeps its period")
    func windowedLevel() throws {
        let fr = 11_025.0 / 128
        // An onset envelope, 86 frames a second: beats (2 on the first of four, then 0.8, 1, 0.8) and a weaker eighth (0.5) after each.
        func envelope(from a: Double, to b: Double, seconds: Double = 90) -> [Double] {
            var x = [Double](repeating: 0, count: Int(seconds * fr))
            var t = 0.5, k = 0
            while t < seconds - 0.5 {
                let p = 60 / (a + (b - a) * t / seconds)
                x[Int((t * fr).rounded())] += k % 4 == 0 ? 2 : (k % 2 == 0 ? 1 : 0.8)
                x[Int(((t + p / 2) * fr).rounded())] += 0.5
                t += p
                k += 1
            }
            return x
        }
        let ramp = envelope(from: 120, to: 90)
        let whole = try #require(BeatTracker.period(ramp))
        // The whole comb reads the eighths (about 229 a minute): what rhythm version 9 tracked such a ramp at.
        #expect(60 * fr / whole > 200, "\(60 * fr / whole)")
        let level = BeatTracker.windowedLevel(period: whole, blocks: BeatTracker.BlockAutocorrelation(ramp))
        #expect((90...125).contains(60 * fr / level), "\(60 * fr / level)")
        let steady = envelope(from: 120, to: 120)
        let own = try #require(BeatTracker.period(steady))
        #expect(abs(60 * fr / own - 120) < 2)
        #expect(BeatTracker.windowedLevel(period: own, blocks: BeatTracker.BlockAutocorrelation(steady)) == own)
    }

    @Test("the rendered march played with a final ritardando (the last 40 % slowing to 0.65 ×) keeps its beats to the end (F ≥ 0.8 there)")
    func ritardando() throws {
        let (march, truth) = try renderedMarch()
        let slowing = tapeSlowing(march, from: 0.6, to: 0.65)
        let reference = (0..<truth.beats).compactMap { slowing.time(Double($0) * truth.beatPeriod) }
        let r = try #require(try trackedRhythm(slowing.audio))
        let cut = 0.6 * Double(slowing.audio.count) / 44_100
        let tail = reference.filter { $0 >= cut }
        let tailF = BeatTracker.fMeasure(estimated: r.beats.filter { $0 >= cut }, reference: tail)
        #expect(tail.count >= 20)
        #expect(tailF >= 0.8, "last 40 %: F \(tailF); missed \(allFound(r.beats, tail))")
        #expect(BeatTracker.fMeasure(estimated: r.beats, reference: reference) >= 0.9)
        // The curve slows down: the last stretch is at least 20 % slower than the first.
        let first = try #require(r.tempo.first?.bpm), last = try #require(r.tempo.last?.bpm)
        #expect(last <= 0.8 * first && abs(first / (60 / truth.beatPeriod) - 1) < 0.03, "\(r.tempo)")
    }

    @Test("the rendered march slowing over its second half to 0.5 × (beats twice as long) keeps its beats to the end, beyond the tempo states around its first tempo")
    func deepRitardando() throws {
        // From 110 to 55 BPM: an octave, where the states of the tracker's first tempo reach ±0.35 octave; the
        // local tempo's drift moves them (BeatTracker.tempoDrift).
        let (march, truth) = try renderedMarch()
        let slowing = tapeSlowing(march, from: 0.5, to: 0.5)
        let reference = (0..<truth.beats).compactMap { slowing.time(Double($0) * truth.beatPeriod) }
        let r = try #require(try trackedRhythm(slowing.audio))
        let seconds = Double(slowing.audio.count) / 44_100
        // The last quarter of the audio: the march at 0.6–0.5 × its speed.
        let tail = reference.filter { $0 >= 0.75 * seconds }
        let tailF = BeatTracker.fMeasure(estimated: r.beats.filter { $0 >= 0.75 * seconds }, reference: tail)
        #expect(tail.count >= 8)
        // Without the drift: F 0.2 here (0.77 with it) and 0.80 over the whole piece.
        #expect(tailF >= 0.7, "last quarter: F \(tailF); missed \(allFound(r.beats, tail)); tempo \(r.tempo)")
        #expect(BeatTracker.fMeasure(estimated: r.beats, reference: reference) >= 0.85)
    }
}

/// The rendered march of tools/test-renders.sh (110 BPM) and its truth.
private func renderedMarch() throws -> (audio: [Float], truth: (beats: Int, beatPeriod: Double)) {
    let script = TestPaths.repositoryRoot.appendingPathComponent("tools/test-renders.sh").path
    let run = try Run.process("/bin/bash", [script], timeout: 1200)
    let dirLine = try #require(run.stdoutText.split(separator: "\n").last, "\(run)")
    let dir = URL(fileURLWithPath: String(dirLine).trimmingCharacters(in: .whitespaces))
    struct Truth: Decodable { var beats: Int; var beatPeriod: Double }
    let truth = try #require(try JSONDecoder().decode([String: Truth].self, from: Data(contentsOf: dir.appendingPathComponent("truth.json")))["march"])
    return (try Fixtures.decode(dir.appendingPathComponent("march.wav")), (truth.beats, truth.beatPeriod))
}

/// Variable-speed playback of `source` (44.1 kHz), a tape slowing down: output sample i reads the source at
/// position pos(i), advancing by the speed, 1 until the share `knee` of the source and then falling linearly to
/// `end`. Returns the audio and, for a source time, its output time (nil past the end).
private func tapeSlowing(_ source: [Float], from knee: Double, to end: Double) -> (audio: [Float], time: (Double) -> Double?) {
    let rate = 44_100.0, n = Double(source.count), k = knee * n
    var out: [Float] = [], positions: [Double] = []
    var pos = 0.0
    while pos < n - 1 {
        let i = Int(pos), f = Float(pos - Double(i))
        out.append(source[i] * (1 - f) + source[i + 1] * f)
        positions.append(pos)
        pos += pos < k ? 1 : 1 - (1 - end) * (pos - k) / (n - k)
    }
    // A source time's output time: the first output sample that reads at or past it.
    let time: (Double) -> Double? = { t in
        let target = t * rate
        var lo = 0, hi = positions.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if positions[mid] < target { lo = mid + 1 } else { hi = mid }
        }
        return lo < positions.count ? Double(lo) / rate : nil
    }
    return (out, time)
}
