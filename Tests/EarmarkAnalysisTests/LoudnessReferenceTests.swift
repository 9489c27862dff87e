import CEBUR128
@testable import EarmarkAnalysis
import EarmarkAudio
import EarmarkDSP
import EarmarkTestSupport
import Foundation
import Testing

/// What libebur128 1.2 measures for interleaved `samples`, read as LoudnessMeter read it before it measured
/// by itself (modes I, LRA, sample peak, M, S; BS.1770 layouts for 3, 5 and 6 channels; momentary and
/// short-term loudness after every 100-ms step from 0.4 s and 3 s on): the reference of the tests below.
struct LibEBUR128Measurement {
    var integrated: Double?
    var range: Double?
    var samplePeak: Double?
    /// (end of the window in seconds, loudness) for every step with a finite value.
    var momentary: [(Double, Double)] = []
    var shortTerm: [(Double, Double)] = []

    init(_ samples: [Float], channels: Int, rate: Double) throws {
        let mode = Int32(EBUR128_MODE_I.rawValue | EBUR128_MODE_LRA.rawValue
            | EBUR128_MODE_SAMPLE_PEAK.rawValue | EBUR128_MODE_M.rawValue | EBUR128_MODE_S.rawValue)
        let state = try #require(ebur128_init(UInt32(channels), UInt(rate.rounded()), mode))
        defer {
            var st: UnsafeMutablePointer<ebur128_state>? = state
            ebur128_destroy(&st)
        }
        let layout: [Int32]
        switch channels {
        case 3: layout = [EBUR128_LEFT, EBUR128_RIGHT, EBUR128_CENTER].map { Int32($0.rawValue) }
        case 5: layout = [EBUR128_LEFT, EBUR128_RIGHT, EBUR128_CENTER, EBUR128_LEFT_SURROUND, EBUR128_RIGHT_SURROUND].map { Int32($0.rawValue) }
        case 6: layout = [EBUR128_LEFT, EBUR128_RIGHT, EBUR128_CENTER, EBUR128_UNUSED, EBUR128_LEFT_SURROUND, EBUR128_RIGHT_SURROUND].map { Int32($0.rawValue) }
        default: layout = []
        }
        for (i, c) in layout.enumerated() { _ = ebur128_set_channel(state, UInt32(i), c) }
        func finite(_ read: (inout Double) -> Int32) -> Double? {
            var v = 0.0
            guard read(&v) == 0, v.isFinite else { return nil }
            return v
        }
        let step = (Int(rate.rounded()) + 5) / 10
        let frames = samples.count / channels
        var done = 0
        samples.withUnsafeBufferPointer { buf in
            while done < frames {
                let n = min(step, frames - done)
                _ = ebur128_add_frames_float(state, buf.baseAddress! + done * channels, n)
                done += n
                guard n == step else { break }
                let t = Double(done) / rate
                if t >= 0.4 - 1e-9, let m = finite({ ebur128_loudness_momentary(state, &$0) }) { momentary.append((t, m)) }
                if t >= 3 - 1e-9, let s = finite({ ebur128_loudness_shortterm(state, &$0) }) { shortTerm.append((t, s)) }
            }
        }
        integrated = finite { ebur128_loudness_global(state, &$0) }
        range = integrated == nil ? nil : finite { ebur128_loudness_range(state, &$0) }
        var peak = -Double.infinity
        for c in 0..<channels {
            var p = 0.0
            if ebur128_sample_peak(state, UInt32(c), &p) == 0 { peak = max(peak, p) }
        }
        samplePeak = peak > 0 && peak.isFinite ? 20 * log10(peak) : nil
    }
}

@Suite("Loudness measured here against libebur128")
struct LoudnessReferenceTests {
    /// The largest difference (LU) allowed between LoudnessMeter and libebur128 for integrated loudness,
    /// range and every momentary and short-term value: the two sum the same K-weighted energies in other
    /// orders (steps of 100 ms here, every block's samples there), which differ in the last bits only.
    static let tolerance = 1e-9

    func compare(_ samples: [Float], channels: Int, rate: Double, _ what: String) throws {
        let reference = try LibEBUR128Measurement(samples, channels: channels, rate: rate)
        let r = try measure(samples, channels: channels, rate: rate)
        func close(_ a: Double?, _ b: Double?) -> Bool {
            switch (a, b) {
            case (nil, nil): return true
            case let (x?, y?): return abs(x - y) <= LoudnessReferenceTests.tolerance
            default: return false
            }
        }
        #expect(close(r.integrated, reference.integrated), "\(what): integrated \(String(describing: r.integrated)) vs \(String(describing: reference.integrated))")
        #expect(close(r.range, reference.range), "\(what): range \(String(describing: r.range)) vs \(String(describing: reference.range))")
        #expect(r.samplePeak == reference.samplePeak, "\(what): sample peak")
        for (name, mine, theirs) in [("momentary", r.momentary, reference.momentary), ("short-term", r.shortTerm, reference.shortTerm)] {
            #expect(mine.count == theirs.count, "\(what): \(name) \(mine.count) values vs \(theirs.count)")
            let worst = zip(mine, theirs).map { m, t in abs(m.end - t.0) < 1e-9 ? abs(m.value - t.1) : .infinity }.max() ?? 0
            #expect(worst <= LoudnessReferenceTests.tolerance, "\(what): \(name) differs by up to \(worst) LU")
        }
    }

    @Test("real music (stereo and mono, 44.1 and 48 kHz): the same integrated loudness, range, peaks and series")
    func realMusic() throws {
        let audio = try TestAudio.set()
        for stem in ["pingus-4", "goin_march"] {
            let reader = try MultichannelFileReader(path: try audio.reference(stem).path)
            var samples: [Float] = []
            while let b = try reader.next(), samples.count < 40 * Int(reader.sampleRate) * reader.channels { samples += b.samples }
            try compare(samples, channels: reader.channels, rate: reader.sampleRate, "\(stem), \(reader.channels) channels")
            let mono = samples.withUnsafeBufferPointer { downmixToMono($0, channels: reader.channels) }
            try compare(mono, channels: 1, rate: reader.sampleRate, "\(stem), mono")
            let resampled = try Resampler(inputRate: reader.sampleRate, outputRate: 48_000)
            try compare(resampled.process(mono) + resampled.flush(), channels: 1, rate: 48_000, "\(stem), mono at 48 kHz")
        }
    }

    @Test("noise with level steps and silences, 1–8 channels, 8 to 96 kHz (11,025 Hz: steps of 1,103 frames)",
          arguments: [(1, 44_100.0), (2, 48_000.0), (3, 11_025.0), (4, 22_050.0), (5, 48_000.0), (6, 44_100.0), (7, 8_000.0), (8, 96_000.0)])
    func synthetic(channels: Int, rate: Double) throws {
        var rng = SplitMix64(seed: 1770, stream: UInt64(channels))
        // 12 s: loud, quiet, silent, loud again, with each channel at its own level.
        let levels: [Float] = [0.5, 0.02, 0, 0.3]
        let frames = Int(12 * rate)
        var samples = [Float](repeating: 0, count: frames * channels)
        for f in 0..<frames {
            let level = levels[min(3, f * 4 / frames)]
            for c in 0..<channels { samples[f * channels + c] = level * Float(c + 1) / Float(channels) * Float(rng.uniform(in: -1...1)) }
        }
        try compare(samples, channels: channels, rate: rate, "\(channels) channels at \(rate) Hz")
    }

    @Test("silence and audio shorter than a block or a short-term window measure as libebur128 does")
    func edges() throws {
        try compare([Float](repeating: 0, count: 44_100 * 4), channels: 1, rate: 44_100, "silence")
        try compare(tone([(0.35, [-20])], rate: 44_100), channels: 1, rate: 44_100, "0.35 s")
        try compare(tone([(2.5, [-20, -26])], rate: 44_100), channels: 2, rate: 44_100, "2.5 s")
    }
}
