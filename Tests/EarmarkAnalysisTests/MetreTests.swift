@testable import EarmarkAnalysis
import EarmarkTestSupport
import Foundation
import Testing

/// The folder of the pieces tools/test-renders.sh writes note by note and renders with FluidSynth.
private func renders() throws -> URL {
    let script = TestPaths.repositoryRoot.appendingPathComponent("tools/test-renders.sh").path
    let run = try Run.process("/bin/bash", [script], timeout: 1200)
    let dirLine = try #require(run.stdoutText.split(separator: "\n").last, "\(run)")
    return URL(fileURLWithPath: String(dirLine).trimmingCharacters(in: .whitespaces))
}


@Suite("Metre: time signature")
struct MetreTests {
    @Test("rendered pieces get their own time signature: the jig 6/8 (beats at the dotted quarter), the barcarolle 12/8 (its bass leans on the first of four beats only), the march 4/4, the waltz 3/4",
          arguments: ["jig", "barcarolle", "march", "waltz"])
    func rendered(piece: String) throws {
        let dir = try renders()
        struct Truth: Decodable { var bpm: Double; var beatsPerBar: Int; var timeSignature: String }
        let truth = try #require(try JSONDecoder().decode([String: Truth].self, from: Data(contentsOf: dir.appendingPathComponent("truth.json")))[piece])
        let r = try #require(try trackedRhythm(Fixtures.decode(dir.appendingPathComponent("\(piece).wav"))))
        let signature = try #require(r.timeSignature, "no time signature for \(piece)")
        #expect(signature.description == truth.timeSignature, "\(piece): \(signature), bars of \(r.beatsPerBar), \(r.bpm ?? 0) BPM")
        #expect(r.timeSignatures.count == 1 && r.timeSignatures.first?.timeSignature == signature)
        #expect(r.beatsPerBar == truth.beatsPerBar)
        // The beat is the signature's: in 6/8 the dotted quarter, not the eighth nor two eighths.
        let bpm = try #require(r.bpm)
        #expect(abs(bpm / truth.bpm - 1) < 0.03, "\(piece): \(bpm) BPM, truth \(truth.bpm)")
    }

    @Test("the rendered march followed by the waltz: 4/4, then 3/4 from within 2 s of the join, bars of three after it")
    func change() throws {
        let dir = try renders()
        let march = try Fixtures.decode(dir.appendingPathComponent("march.wav"))
        let waltz = try Fixtures.decode(dir.appendingPathComponent("waltz.wav"))
        let join = Double(march.count) / 44_100
        let r = try #require(try trackedRhythm(march + waltz))
        let stretches = r.timeSignatures.map { "\($0.start)-\($0.end) \($0.timeSignature)" }
        try #require(r.timeSignatures.count == 2, "\(stretches)")
        #expect(r.timeSignatures[0].timeSignature.description == "4/4" && r.timeSignatures[1].timeSignature.description == "3/4", "\(stretches)")
        #expect(abs(r.timeSignatures[1].start - join) < 2 && r.timeSignatures[0].end == r.timeSignatures[1].start, "\(stretches), join \(join)")
        // Bars of three after the change: downbeats 3 beats apart.
        let after = r.beats.filter { $0 > join + 2 }, bars = r.bars.filter { $0 > join + 2 }
        #expect(bars.count >= 15 && abs(Double(after.count) / Double(bars.count) - 3) < 0.2, "\(after.count) beats, \(bars.count) bars")
    }

    @Test("in compound time the bass tells 12/8 from 6/8: harmony leaning on beats 1 and 3 alike does not make bars of two")
    func compoundBars() {
        // 48 dotted-quarter beats whose whole accents (harmony and bass) lean on every other beat, the first a little more.
        let accents = (0..<48).map { i -> Double in i % 4 == 0 ? 2.2 : (i % 2 == 0 ? 2 : -1) }
        // The bass leans on the bar's first beat only (12/8), or on every other beat alike (6/8).
        let first = (0..<48).map { i -> Double in i % 4 == 0 ? 1.5 : -0.5 }
        let pairs = (0..<48).map { i -> Double in i % 2 == 0 ? 1 : -1 }
        #expect(BeatTracker.bassDuple(first, range: 0..<48) ?? 1 < BeatTracker.compoundBassDuple)
        let twelve = BeatTracker.metre(accents: accents, bass: first, compound: true)
        #expect(twelve.signature.description == "12/8" && twelve.meter == 4 && twelve.phase == 0, "\(twelve)")
        let six = BeatTracker.metre(accents: accents, bass: pairs, compound: true)
        #expect(six.signature.description == "6/8" && six.meter == 2 && six.phase == 0, "\(six)")
        // In simple time the bass alone does not make bars of two: a kick on 1 and 3 under chords that change on 1 stays 4/4.
        let chords = (0..<48).map { i -> Double in i % 4 == 0 ? 3 : -1 }
        #expect(BeatTracker.metre(accents: chords, bass: pairs, compound: false).signature.description == "4/4")
        // Too few beats to tell the bass's pattern.
        #expect(BeatTracker.bassDuple(pairs, range: 0..<6) == nil)
    }

    @Test("eighths of a compound metre tracked at 152 a minute are regrouped into dotted quarters when those fall into bars; a waltz at 152 whose downbeats are alike is not")
    func eighthsInBars() {
        // 96 tracked beats 34 frames apart (152 a minute), onsets on them only; the bass on every third beat, the bar's
        // first (every twelfth) louder (12/8 tracked at its eighths), or every third beat alike (a waltz at its beats).
        let frames = (0..<96).map { 100 + 34 * $0 }
        var onset = [Double](repeating: 0, count: frames.last! + 100), compound = onset, waltz = onset
        for (i, f) in frames.enumerated() {
            onset[f] = 1
            compound[f] = i % 12 == 0 ? 3 : (i % 3 == 0 ? 1 : 0.1)
            waltz[f] = i % 3 == 0 ? 1 : 0.1
        }
        let eighths = BeatTracker.beatDivision(frames: frames, onset: onset, low: compound)
        #expect(eighths.compound && eighths.beats.count == 32 && eighths.beats.first == frames[0] && eighths.beats[1] - eighths.beats[0] == 102,
                "\(eighths.compound), \(eighths.beats.prefix(3))")
        let beats = BeatTracker.beatDivision(frames: frames, onset: onset, low: waltz)
        #expect(!beats.compound && beats.beats == frames)
    }

    @Test("silence and a few clicks have no time signature")
    func none() throws {
        let silent = try trackedRhythm([Float](repeating: 0, count: 44_100 * 20))
        #expect(silent?.timeSignature == nil && (silent?.timeSignatures.isEmpty ?? true))
        var clicks = [Float](repeating: 0, count: 44_100 * 3)
        for k in 0..<4 { for n in 0..<200 { clicks[k * 22_050 + 4_410 + n] = Float(sin(Double(n) * 0.3)) * 0.5 } }
        let few = try trackedRhythm(clicks)
        #expect(few?.timeSignature == nil, "\(String(describing: few?.timeSignature)) from \(few?.beats.count ?? 0) beats")
    }

    @Test("time signatures read and write as text; analyses stored before version 4 decode without one")
    func codable() throws {
        #expect(TimeSignature("6/8") == TimeSignature(numerator: 6, denominator: 8))
        #expect(TimeSignature("6/8")?.isCompound == true && TimeSignature("6/8")?.beatsPerBar == 2)
        #expect(TimeSignature("12/8")?.beatsPerBar == 4 && TimeSignature("3/8")?.isCompound == false)
        #expect(TimeSignature(beatsPerBar: 3, compound: true).description == "9/8")
        #expect(TimeSignature(beatsPerBar: 2, compound: false, cut: true).description == "2/2")
        #expect(TimeSignature("x/4") == nil && TimeSignature("4/0") == nil && TimeSignature("4") == nil)
        let old = #"{"beats":[0.5,1,1.5],"bars":[0.5],"beatsPerBar":4,"bpm":120,"tempo":[],"duration":2}"#
        let r = try JSONDecoder().decode(RhythmResult.self, from: Data(old.utf8))
        #expect(r.timeSignature == nil && r.timeSignatures.isEmpty)
        var new = r
        new.timeSignature = TimeSignature(numerator: 6, denominator: 8)
        new.timeSignatures = [TimeSignatureSegment(start: 0.5, end: 1.5, timeSignature: TimeSignature(numerator: 6, denominator: 8))]
        let data = try JSONEncoder().encode(new)
        #expect(String(decoding: data, as: UTF8.self).contains(#""timeSignature":"6\/8""#))
        #expect(try JSONDecoder().decode(RhythmResult.self, from: data) == new)
        #expect(throws: DecodingError.self) {
            try JSONDecoder().decode(RhythmResult.self, from: Data(#"{"beats":[],"bars":[],"beatsPerBar":4,"timeSignature":"six","duration":2}"#.utf8))
        }
    }
}
