@testable import EarmarkAnalysis
import EarmarkAudio
import EarmarkTestSupport
import Foundation
import Testing

/// Interleaved 1-kHz sine segments at 48 kHz: (seconds, peak level in dBFS per channel).
func tone(_ segments: [(seconds: Double, levels: [Double])], rate: Double = 48_000) -> [Float] {
    var out: [Float] = []
    var n = 0
    for seg in segments {
        let gains = seg.levels.map { Float(pow(10, $0 / 20)) }
        for _ in 0..<Int(seg.seconds * rate) {
            let s = Float(sin(2 * Double.pi * 1000 * Double(n) / rate))
            for g in gains { out.append(g * s) }
            n += 1
        }
    }
    return out
}

func measure(_ samples: [Float], channels: Int, rate: Double = 48_000) throws -> LoudnessResult {
    let meter = try LoudnessMeter(sampleRate: rate, channels: channels)
    // In uneven pieces, as a stream would arrive.
    var i = 0, k = 0
    while i < samples.count {
        let n = min(samples.count - i, channels * (1000 + 777 * (k % 5)))
        meter.append(Array(samples[i..<(i + n)]))
        i += n
        k += 1
    }
    return meter.result()
}

@Suite("Loudness (EBU R 128)")
struct LoudnessTests {
    @Test("EBU Tech 3341 cases 1, 2, 3 and 5: integrated loudness within ±0.1 LU")
    func integrated() throws {
        let cases: [(String, [(Double, [Double])], Double)] = [
            ("1", [(20, [-23, -23])], -23), ("2", [(20, [-33, -33])], -33),
            ("3", [(10, [-36, -36]), (60, [-23, -23]), (10, [-36, -36])], -23),
            ("5", [(20, [-26, -26]), (20.1, [-20, -20]), (20, [-26, -26])], -23),
        ]
        for (name, segments, expected) in cases {
            let r = try measure(tone(segments.map { ($0.0, $0.1) }), channels: 2)
            let value = try #require(r.integrated, "case \(name)")
            #expect(abs(value - expected) <= 0.1, "case \(name): \(value)")
        }
    }

    @Test("EBU Tech 3341 case 6 (5.0) and a 5.1 layout whose LFE channel does not count")
    func surround() throws {
        let five = try measure(tone([(20, [-28, -28, -24, -30, -30])]), channels: 5)
        #expect(abs((five.integrated ?? 0) + 23) <= 0.1, "\(String(describing: five.integrated))")
        // The same with a loud LFE channel in the fourth place: still −23.
        let six = try measure(tone([(20, [-28, -28, -24, -6, -30, -30])]), channels: 6)
        #expect(abs((six.integrated ?? 0) + 23) <= 0.1, "\(String(describing: six.integrated))")
    }

    @Test("EBU Tech 3342 cases 1 and 4: loudness range; series every 100 ms")
    func range() throws {
        let r1 = try measure(tone([(20, [-20, -20]), (20, [-30, -30])]), channels: 2)
        #expect(abs((r1.range ?? 0) - 10) <= 0.1)
        let r4 = try measure(tone([(20, [-50, -50]), (20, [-35, -35]), (20, [-20, -20]), (20, [-35, -35]), (20, [-50, -50])]), channels: 2)
        #expect(abs((r4.range ?? 0) - 15) <= 0.1)
        // 40 s: momentary from 0.4 s and short-term from 3 s, every 0.1 s.
        #expect(r1.momentary.count == 397 && r1.shortTerm.count == 371, "\(r1.momentary.count) \(r1.shortTerm.count)")
        #expect(abs(r1.momentary[100].value - (-20)) < 0.1 && abs(r1.momentary.last!.value - (-30)) < 0.1)
        #expect(abs((r1.truePeak ?? 0) - (-20)) < 0.2 && abs((r1.samplePeak ?? 0) - (-20)) < 0.01)
    }

    @Test("silence, a half-second file and white noise give empty or sensible results, never a crash")
    func edgeCases() throws {
        let silence = try measure([Float](repeating: 0, count: 2 * 48_000 * 5), channels: 2)
        #expect(silence.integrated == nil && silence.range == nil && silence.truePeak == nil)
        #expect(silence.momentary.isEmpty)
        let short = try measure(tone([(0.5, [-20])]), channels: 1)
        #expect(short.shortTerm.isEmpty && short.momentary.count == 2)
        var rng = SystemRandomNumberGenerator()
        let noise = (0..<(48_000 * 10)).map { _ in Float.random(in: -0.1...0.1, using: &rng) }
        let n = try measure(noise, channels: 1)
        let value = try #require(n.integrated)
        #expect(value > -40 && value < -15)
        #expect(throws: AudioError.self) { try LoudnessMeter(sampleRate: 0, channels: 2) }
        #expect(throws: AudioError.self) { try LoudnessMeter(sampleRate: 48_000, channels: 0) }
    }

    @Test("a real track through the CLI: readable summary and JSON; a damaged file exits 2")
    func cli() async throws {
        let audio = try TestAudio.set()
        let track = try audio.reference("pingus-4")
        let text = try EarmarkCLI.run(["analyze", track.path])
        #expect(text.status == 0 && text.stdoutText.contains("LUFS integrated"), "\(text)")
        let out = try EarmarkCLI.run(["analyze", "--json", track.path])
        let object = try #require(try JSONSerialization.jsonObject(with: out.stdout) as? [String: Any])
        let loudness = try #require(object["loudness"] as? [String: Any])
        let integrated = try #require(loudness["integrated"] as? Double)
        #expect(integrated > -40 && integrated < -5)
        #expect((loudness["channels"] as? Int) == 2 || (loudness["channels"] as? Int) == 1)
        let dir = try TemporaryDirectory("analyze")
        let bad = dir.file("bad.wav")
        try Data("RIFF....WAVEfmt garbage".utf8).write(to: bad)
        let failed = try EarmarkCLI.run(["analyze", bad.path])
        #expect(failed.status == 2 && !failed.stderrText.isEmpty, "\(failed)")
        let unknown = try EarmarkCLI.run(["analyze", "--only", "tempo", track.path])
        #expect(unknown.status == 64, "\(unknown)")
    }
}

@Suite("True peak (4× interpolation, skipping what cannot beat the peak)")
struct TruePeakTests {
    /// A stereo sine at `frequency` Hz of peak `amplitude`, starting `phase` radians into its cycle,
    /// faded in and out over 0.1 s so that no abrupt edge overshoots.
    func sine(frequency: Double, phase: Double, amplitude: Double, rate: Double, seconds: Double) -> [Float] {
        let n = Int(rate * seconds), fade = Int(rate / 10)
        var out: [Float] = []
        out.reserveCapacity(2 * n)
        for i in 0..<n {
            let ramp = min(1, Double(min(i, n - 1 - i)) / Double(fade))
            let v = Float(amplitude * ramp * sin(2 * .pi * frequency * Double(i) / rate + phase))
            out += [v, v]
        }
        return out
    }

    @Test("a sine sampled off its crests reads its amplitude, 0.7–3 dB above its samples",
          arguments: [(12_000.0, Double.pi / 4), (8_000.0, 0.0), (6_000.0, Double.pi / 8)])
    func offCrest(frequency: Double, phase: Double) {
        let x = sine(frequency: frequency, phase: phase, amplitude: 0.5, rate: 48_000, seconds: 1)
        let meter = TruePeakMeter(channels: 2, sampleRate: 48_000)
        x.withUnsafeBufferPointer { meter.append($0) }
        let samplePeak = x.map(abs).max()!
        let peak = meter.channelPeaks.max()!
        #expect(abs(20 * log10(Double(peak) / 0.5)) < 0.05, "true peak \(peak)")
        #expect(20 * log10(Double(peak / samplePeak)) > 0.6)
    }

    @Test("skipping gives exactly what interpolating every sample gives, across buffer boundaries",
          arguments: [44_100.0, 96_000.0])
    func skippingIsExact(rate: Double) {
        var rng = SystemRandomNumberGenerator()
        // Quiet noise with a few loud bursts, in buffers of odd sizes.
        var x = (0..<60_000).map { _ in Float.random(in: -0.05...0.05, using: &rng) }
        for burst in [7_000, 33_333, 51_000] { for i in burst..<(burst + 40) { x[i] = Float.random(in: -0.9...0.9, using: &rng) } }
        let fast = TruePeakMeter(channels: 2, sampleRate: rate), slow = TruePeakMeter(channels: 2, sampleRate: rate)
        slow.skips = false
        var i = 0
        for size in [998, 4_410, 17, 20_000, 34_575] where i < x.count {
            let piece = Array(x[i..<min(x.count, i + 2 * (size / 2))])
            piece.withUnsafeBufferPointer { fast.append($0); slow.append($0) }
            i += piece.count
        }
        #expect(fast.channelPeaks == slow.channelPeaks)
        #expect(fast.channelPeaks.allSatisfy { $0 >= 0.5 })
    }
}
