import CEBUR128
import EarmarkAudio
import Foundation

/// A value over a stretch of time, as Music Understanding's results are: seconds from the start.
public struct TimedValue: Sendable, Codable, Equatable {
    public var start: Double
    public var end: Double
    public var value: Double
    public init(start: Double, end: Double, value: Double) {
        self.start = start
        self.end = end
        self.value = value
    }
}

/// EBU R 128 loudness of a piece of audio (ITU-R BS.1770-4 measurement, through libebur128).
///
/// Levels are in LUFS; `nil` where the measurement is undefined (silence, or audio shorter than the
/// window). Series hold one value every 100 ms for the window ending at `end`.
public struct LoudnessResult: Sendable, Codable, Equatable {
    /// Integrated (gated, programme) loudness.
    public var integrated: Double?
    /// Loudness range (EBU Tech 3342), in LU.
    public var range: Double?
    /// Highest true peak (4× oversampled) over all channels, in dBTP.
    public var truePeak: Double?
    /// Highest sample peak over all channels, in dBFS.
    public var samplePeak: Double?
    /// Highest momentary and short-term loudness.
    public var maximumMomentary: Double?
    public var maximumShortTerm: Double?
    /// Momentary loudness (400-ms window) every 100 ms.
    public var momentary: [TimedValue]
    /// Short-term loudness (3-s window) every 100 ms.
    public var shortTerm: [TimedValue]
    /// Seconds of audio measured, sample rate and channels of the measurement.
    public var duration: Double
    public var sampleRate: Double
    public var channels: Int
}

/// Measures loudness incrementally: append buffers (any rate, any channel count up to 64), read
/// ``momentary``/``shortTerm`` at any time, take the ``result()`` at the end.
///
/// Channels are weighted as BS.1770 says for the usual layouts: 1 mono (counted as one channel),
/// 2 L R, 3 L R C, 5 L R C Ls Rs, 6 L R C LFE Ls Rs (the LFE channel is not counted); other counts weigh
/// every channel 1.
public final class LoudnessMeter {
    public let sampleRate: Double
    public let channels: Int
    private let state: UnsafeMutablePointer<ebur128_state>
    private let truePeakMeter: TruePeakMeter
    private var frames = 0
    private let step: Int
    private var sinceStep = 0
    private var momentarySeries: [TimedValue] = []
    private var shortTermSeries: [TimedValue] = []
    /// Whether a 100-ms step is a whole number of frames that libebur128's 100-ms window and its own blocks
    /// agree on (rates that are multiples of 10 Hz): then momentary and short-term loudness at each step
    /// are made from the last 4 and 30 step energies (`stepEnergies`), one 100-ms window read per step,
    /// instead of asking libebur128 to sum the last 400 ms and 3 s again every 100 ms (a 3-s sum every
    /// 100 ms was most of a loudness measurement's cost).
    private let stepWindows: Bool
    /// The mean K-weighted energy of each of the last (up to) 30 steps, oldest first.
    private var stepEnergies: [Double] = []

    public init(sampleRate: Double, channels: Int) throws {
        guard sampleRate.isFinite, sampleRate >= 8000, sampleRate <= 384_000 else {
            throw AudioError(.invalidFormat, "loudness needs a sample rate of 8–384 kHz, not \(sampleRate) Hz")
        }
        guard (1...64).contains(channels) else { throw AudioError(.invalidFormat, "loudness needs 1–64 channels, not \(channels)") }
        // True peak is measured by TruePeakMeter: libebur128 interpolates every sample, which was about
        // half of the cost of a loudness measurement.
        let mode = Int32(EBUR128_MODE_I.rawValue | EBUR128_MODE_LRA.rawValue
            | EBUR128_MODE_SAMPLE_PEAK.rawValue | EBUR128_MODE_M.rawValue | EBUR128_MODE_S.rawValue)
        guard let st = ebur128_init(UInt32(channels), UInt(sampleRate.rounded()), mode) else {
            throw AudioError(.invalidFormat, "libebur128 cannot measure \(channels) channels at \(sampleRate) Hz")
        }
        state = st
        truePeakMeter = TruePeakMeter(channels: channels, sampleRate: sampleRate)
        self.sampleRate = sampleRate
        self.channels = channels
        step = Int((sampleRate / 10).rounded())
        stepWindows = sampleRate == sampleRate.rounded() && Int(sampleRate) % 10 == 0
        stepEnergies.reserveCapacity(31)
        let layout: [Int32]
        switch channels {
        case 3: layout = [EBUR128_LEFT, EBUR128_RIGHT, EBUR128_CENTER].map { Int32($0.rawValue) }
        case 5: layout = [EBUR128_LEFT, EBUR128_RIGHT, EBUR128_CENTER, EBUR128_LEFT_SURROUND, EBUR128_RIGHT_SURROUND].map { Int32($0.rawValue) }
        case 6: layout = [EBUR128_LEFT, EBUR128_RIGHT, EBUR128_CENTER, EBUR128_UNUSED, EBUR128_LEFT_SURROUND, EBUR128_RIGHT_SURROUND].map { Int32($0.rawValue) }
        default: layout = []
        }
        for (i, c) in layout.enumerated() { _ = ebur128_set_channel(st, UInt32(i), c) }
    }

    deinit {
        var st: UnsafeMutablePointer<ebur128_state>? = state
        ebur128_destroy(&st)
    }

    /// Seconds appended so far.
    public var duration: Double { Double(frames) / sampleRate }

    /// Appends interleaved samples (`channels` per frame); sampled series advance every 100 ms.
    public func append(_ samples: [Float]) {
        samples.withUnsafeBufferPointer { buf in
            truePeakMeter.append(buf)
            var offset = 0
            let total = buf.count / channels
            while offset < total {
                let n = min(total - offset, step - sinceStep)
                _ = ebur128_add_frames_float(state, buf.baseAddress! + offset * channels, n)
                offset += n
                sinceStep += n
                frames += n
                if sinceStep == step {
                    sinceStep = 0
                    record()
                }
            }
        }
    }

    private func record() {
        let t = duration
        if stepWindows {
            var level = 0.0
            // The window's loudness back to its energy (-inf: energy 0).
            let energy = ebur128_loudness_window(state, 100, &level) == 0 && level.isFinite
                ? Foundation.pow(10, (level + 0.691) / 10) : 0
            stepEnergies.append(energy)
            if stepEnergies.count > 30 { stepEnergies.removeFirst() }
        }
        if t >= 0.4 - 1e-9, let m = momentary {
            momentarySeries.append(TimedValue(start: t - 0.4, end: t, value: m))
        }
        if t >= 3 - 1e-9, let s = shortTerm {
            shortTermSeries.append(TimedValue(start: t - 3, end: t, value: s))
        }
    }

    /// Loudness of the last 400 ms (nil before 400 ms or in silence).
    public var momentary: Double? {
        guard duration >= 0.4 - 1e-9 else { return nil }
        return fromSteps(4) ?? finite { ebur128_loudness_momentary(state, &$0) }
    }
    /// Loudness of the last 3 s (nil before 3 s or in silence).
    public var shortTerm: Double? {
        guard duration >= 3 - 1e-9 else { return nil }
        return fromSteps(30) ?? finite { ebur128_loudness_shortterm(state, &$0) }
    }

    /// The loudness of the last `count` steps from their energies, at a step boundary (nil elsewhere, and
    /// when the steps are not kept); -inf (silence) is nil, as libebur128's own answer would be.
    private func fromSteps(_ count: Int) -> Double?? {
        guard stepWindows, sinceStep == 0, stepEnergies.count >= count else { return nil }
        let energy = stepEnergies.suffix(count).reduce(0, +) / Double(count)
        guard energy > 0 else { return .some(nil) }
        // libebur128's energy-to-loudness formula.
        let level = 10 * Foundation.log(energy) / Foundation.log(10.0) - 0.691
        return .some(level.isFinite ? level : nil)
    }

    private func finite(_ read: (inout Double) -> Int32) -> Double? {
        var v = 0.0
        guard read(&v) == 0, v.isFinite else { return nil }
        return v
    }

    /// Everything measured so far.
    public func result() -> LoudnessResult {
        var peak = -Double.infinity
        for c in 0..<channels {
            var p = 0.0
            if ebur128_sample_peak(state, UInt32(c), &p) == 0 { peak = max(peak, p) }
        }
        // The meter's peaks include the samples themselves.
        let truePeak = Double(truePeakMeter.channelPeaks.max() ?? 0)
        func dB(_ x: Double) -> Double? { x > 0 && x.isFinite ? 20 * log10(x) : nil }
        let integrated = finite { ebur128_loudness_global(state, &$0) }
        return LoudnessResult(
            integrated: integrated,
            // Without an integrated loudness (silence) there is no range either, though libebur128 says 0.
            range: integrated == nil ? nil : finite { ebur128_loudness_range(state, &$0) },
            truePeak: dB(truePeak), samplePeak: dB(peak),
            maximumMomentary: momentarySeries.map(\.value).max(), maximumShortTerm: shortTermSeries.map(\.value).max(),
            momentary: momentarySeries, shortTerm: shortTermSeries,
            duration: duration, sampleRate: sampleRate, channels: channels)
    }

    /// Measures a whole file (its own rate and channels).
    public static func measure(path: String) throws -> LoudnessResult {
        try measure(reading: MultichannelFileReader(path: path))
    }

    /// Measures what is left of an open reader.
    public static func measure(reading reader: MultichannelFileReader) throws -> LoudnessResult {
        let meter = try LoudnessMeter(sampleRate: reader.sampleRate, channels: reader.channels)
        while let b = try reader.next() { meter.append(b.samples) }
        return meter.result()
    }
}

/// The loudness a catalog keeps per track (analysis kind "loudness", version 1): the summary values
/// and the short-term loudness once a second, compact enough to store for every track.
public struct LoudnessSummary: Sendable, Codable, Equatable {
    public static let kind = "loudness"
    public static let version = 1
    public var integrated: Double?
    public var range: Double?
    public var truePeak: Double?
    public var samplePeak: Double?
    public var maximumMomentary: Double?
    public var maximumShortTerm: Double?
    /// Short-term (3-s) loudness of the 3 s ending at 3, 4, 5, … s, to 0.1 LU; null in silence.
    public var shortTermPerSecond: [Double?]
    public var duration: Double

    public init(_ r: LoudnessResult) {
        func round1(_ x: Double?) -> Double? { x.map { ($0 * 10).rounded() / 10 } }
        func round2(_ x: Double?) -> Double? { x.map { ($0 * 100).rounded() / 100 } }
        integrated = round2(r.integrated)
        range = round2(r.range)
        truePeak = round2(r.truePeak)
        samplePeak = round2(r.samplePeak)
        maximumMomentary = round2(r.maximumMomentary)
        maximumShortTerm = round2(r.maximumShortTerm)
        duration = r.duration
        var perSecond: [Double?] = []
        var byEnd: [Int: Double] = [:]
        for v in r.shortTerm { byEnd[Int((v.end * 10).rounded())] = v.value }
        var t = 30
        while Double(t) / 10 <= r.duration + 1e-9 {
            perSecond.append(round1(byEnd[t]))
            t += 10
        }
        shortTermPerSecond = perSecond
    }
}
