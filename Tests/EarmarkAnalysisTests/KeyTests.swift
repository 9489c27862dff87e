import EarmarkAnalysis
import EarmarkTestSupport
import Foundation
import Testing

/// Chords of harmonic tones (MIDI note numbers), each `seconds` long, at 44.1 kHz; `cents` detunes everything.
private func progression(_ chords: [[Int]], seconds: Double = 1, cents: Double = 0) -> [Float] {
    let rate = 44_100.0
    var out: [Float] = []
    for chord in chords {
        let n = Int(seconds * rate)
        var buffer = [Float](repeating: 0, count: n)
        for note in chord {
            let f = 440 * pow(2, (Double(note) - 69 + cents / 100) / 12)
            for h in 1...5 where f * Double(h) < 5000 {
                let w = 2 * Double.pi * f * Double(h) / rate, a = 0.08 / Double(h)
                for i in 0..<n {
                    // A short attack and decay so chord changes are audible as onsets.
                    let env = min(1, Double(i) / 400) * exp(-Double(i) / rate * 1.2)
                    buffer[i] += Float(a * env * sin(w * Double(i)))
                }
            }
        }
        out += buffer
    }
    return out
}

private func key(_ samples: [Float]) throws -> KeyResult? {
    let d = try KeyDetector(inputRate: 44_100)
    var i = 0
    while i < samples.count {
        d.append(Array(samples[i..<min(samples.count, i + 10_000)]))
        i += 10_000
    }
    return d.result()
}

// Cadences (I–IV–V–I and relatives) with the bass an octave below.
private let cMajor: [[Int]] = [[48, 60, 64, 67], [53, 60, 65, 69], [55, 59, 62, 67], [48, 60, 64, 67], [45, 57, 60, 64], [50, 57, 62, 65], [55, 59, 62, 65], [48, 60, 64, 67]]
private let aMinor: [[Int]] = [[45, 57, 60, 64], [50, 57, 62, 65], [52, 56, 59, 64], [45, 57, 60, 64], [53, 57, 60, 65], [52, 56, 59, 62], [52, 56, 59, 64], [45, 57, 60, 64]]

@Suite("Key detection")
struct KeyTests {
    @Test("spellings, pitch classes and the MIREX score")
    func keys() {
        #expect(MusicalKey(pitchClass: 1, mode: .major).tonic == "Db")
        #expect(MusicalKey(pitchClass: 1, mode: .minor).tonic == "C#")
        #expect(MusicalKey(pitchClass: 6, mode: .major).tonic == "F#")
        #expect(MusicalKey.pitchClass(of: "Bb") == 10)
        #expect(MusicalKey.pitchClass(of: "B#") == 0)
        #expect(MusicalKey.pitchClass(of: "H") == nil)
        let c = MusicalKey(pitchClass: 0, mode: .major)
        #expect(MusicalKey(pitchClass: 7, mode: .major).mirexScore(against: c) == 0.5)
        #expect(MusicalKey(pitchClass: 5, mode: .major).mirexScore(against: c) == 0.5)
        #expect(MusicalKey(pitchClass: 9, mode: .minor).mirexScore(against: c) == 0.3)
        #expect(MusicalKey(pitchClass: 0, mode: .minor).mirexScore(against: c) == 0.2)
        #expect(MusicalKey(pitchClass: 2, mode: .major).mirexScore(against: c) == 0)
    }

    @Test("cadences in C major and A minor, transposed and detuned by 30 cents, are found")
    func cadences() throws {
        for shift in [0, 3, 7] {
            let major = try #require(try key(progression(cMajor.map { $0.map { $0 + shift } }, cents: shift == 7 ? 30 : 0)))
            #expect(major.key == MusicalKey(pitchClass: shift, mode: .major), "C major + \(shift): \(major.key)")
            let minor = try #require(try key(progression(aMinor.map { $0.map { $0 + shift } })))
            #expect(minor.key == MusicalKey(pitchClass: 9 + shift, mode: .minor), "A minor + \(shift): \(minor.key)")
        }
    }

    @Test("a modulation from C major to Eb major gives two ranges, the change near the join")
    func modulation() throws {
        let first = progression(Array(repeating: cMajor, count: 3).flatMap { $0 }, seconds: 0.8)
        let second = progression(Array(repeating: cMajor.map { $0.map { $0 + 3 } }, count: 3).flatMap { $0 }, seconds: 0.8)
        let r = try #require(try key(first + second))
        #expect(r.ranges.count == 2, "\(r.ranges)")
        #expect(r.ranges.first?.tonic == "C" && r.ranges.last?.tonic == "Eb", "\(r.ranges)")
        if r.ranges.count == 2 { #expect(abs(r.ranges[1].start - 19.2) <= 4, "\(r.ranges)") }
        #expect(abs((r.ranges.last?.end ?? 0) - r.duration) < 1e-9)
    }

    @Test("silence, very short audio and white noise give no key, never a crash")
    func badInput() throws {
        #expect(try key([Float](repeating: 0, count: 44_100 * 5)) == nil)
        #expect(try key([Float](repeating: 0.1, count: 100)) == nil)
        for seed in [7, 8, 9] as [UInt64] {
            let r = try key(Signal.whiteNoise(count: 44_100 * 10, rms: 0.1, seed: seed))
            #expect(r == nil, "noise \(seed): \(String(describing: r?.strength))")
        }
    }
}
