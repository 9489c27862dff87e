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

/// EBU R 128 loudness of a piece of audio (ITU-R BS.1770-4 measurement, as libebur128 makes it).
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
/// ``momentary``/``shortTerm`` at any time (as of the last whole 100-ms step), take the ``result()`` at the end.
///
/// Channels are weighted as libebur128 weighs them by default, with BS.1770's layouts for 3, 5 and 6
/// channels: 1 mono (counted as one channel), 2 L R, 3 L R C, 5 L R C Ls Rs, 6 L R C LFE Ls Rs (the LFE
/// channel is not counted); 4 channels are L R Ls Rs; from 7 on, the first six are weighed as 6 channels
/// and the rest are not counted (surround channels count 1.41).
///
/// The measurement is BS.1770-4 / EBU R 128 (Tech 3341, 3342) as libebur128 1.2 makes it, done here: a
/// 100-ms step's K-weighted energy is computed once, and the 400-ms gating blocks, the 3-s short-term
/// windows and the series are sums of steps, where libebur128 sums the samples of every 400-ms block
/// and 3-s window again (most of its cost). The values differ from libebur128's only in the rounding of
/// those sums: LoudnessTests compare the two on real and synthetic audio, 1 to 8 channels, within 1e-9 LU.
public final class LoudnessMeter {
    public let sampleRate: Double
    public let channels: Int
    private let filter: KWeighting
    private var states: [KWeighting.State]
    /// Each channel's weight in the sum of energies; 0: not counted.
    private let weights: [Double]
    private let truePeakMeter: TruePeakMeter
    private var frames = 0
    /// Frames in a 100-ms step (libebur128's rounding: (rate + 5) / 10).
    private let step: Int
    private var sinceStep = 0
    /// Each channel's sum of squared K-weighted samples in the current step so far.
    private var partial: [Double]
    private var stepsDone = 0
    /// The weighted sums of squares of the last 30 steps, a ring indexed by step number modulo 30.
    private var recent = [Double](repeating: 0, count: 30)
    /// Energies of the 400-ms gating blocks (one per step from the fourth on) and of the 3-s short-term
    /// windows ending on whole seconds, at or above the absolute gate (−70 LUFS).
    private var blocks: [Double] = []
    private var shortTermBlocks: [Double] = []
    private var momentarySeries: [TimedValue] = []
    private var shortTermSeries: [TimedValue] = []

    /// Energy of −70 LUFS, the absolute gate.
    static let absoluteGate = pow(10.0, (-70.0 + 0.691) / 10.0)

    public init(sampleRate: Double, channels: Int) throws {
        guard sampleRate.isFinite, sampleRate >= 8000, sampleRate <= 384_000 else {
            throw AudioError(.invalidFormat, "loudness needs a sample rate of 8–384 kHz, not \(sampleRate) Hz")
        }
        guard (1...64).contains(channels) else { throw AudioError(.invalidFormat, "loudness needs 1–64 channels, not \(channels)") }
        let rate = Int(sampleRate.rounded())
        filter = KWeighting(sampleRate: Double(rate))
        states = Array(repeating: KWeighting.State(), count: channels)
        weights = LoudnessMeter.weights(channels: channels)
        partial = Array(repeating: 0, count: channels)
        truePeakMeter = TruePeakMeter(channels: channels, sampleRate: sampleRate)
        self.sampleRate = sampleRate
        self.channels = channels
        step = (rate + 5) / 10
    }

    /// L R C (1), LFE (0), Ls Rs (1.41); 4 channels are L R Ls Rs, 5 are L R C Ls Rs.
    static func weights(channels: Int) -> [Double] {
        if channels == 4 { return [1, 1, 1.41, 1.41] }
        if channels == 5 { return [1, 1, 1, 1.41, 1.41] }
        return (0..<channels).map { c in c < 3 ? 1 : c == 4 || c == 5 ? 1.41 : 0 }
    }

    /// Seconds appended so far.
    public var duration: Double { Double(frames) / sampleRate }

    /// Appends interleaved samples (`channels` per frame); sampled series advance every 100 ms.
    public func append(_ samples: [Float]) {
        samples.withUnsafeBufferPointer { buf in
            guard let base = buf.baseAddress else { return }
            truePeakMeter.append(buf)
            var offset = 0
            let total = buf.count / channels
            while offset < total {
                let n = min(total - offset, step - sinceStep)
                for c in 0..<channels {
                    partial[c] += filter.sumOfSquares(base + offset * channels + c, stride: channels, count: n, state: &states[c])
                }
                offset += n
                sinceStep += n
                frames += n
                if sinceStep == step {
                    sinceStep = 0
                    endStep()
                }
            }
        }
    }

    private func endStep() {
        var sum = 0.0
        for c in 0..<channels {
            // Channel sums weighted as libebur128 weighs a block's (0 × a NaN would still count).
            if weights[c] == 1 { sum += partial[c] } else if weights[c] != 0 { sum += partial[c] * weights[c] }
            partial[c] = 0
            states[c].flushDenormals()
        }
        recent[stepsDone % 30] = sum
        stepsDone += 1
        if stepsDone >= 4, let e = energy(steps: 4), e >= LoudnessMeter.absoluteGate { blocks.append(e) }
        // Short-term windows for the loudness range: 3 s, every second.
        if stepsDone >= 30 && stepsDone % 10 == 0, let e = energy(steps: 30), e >= LoudnessMeter.absoluteGate {
            shortTermBlocks.append(e)
        }
        let t = duration
        if let m = momentary { momentarySeries.append(TimedValue(start: t - 0.4, end: t, value: m)) }
        if let s = shortTerm { shortTermSeries.append(TimedValue(start: t - 3, end: t, value: s)) }
    }

    /// Mean weighted energy of the last `count` whole steps (oldest first in the sum); nil before there are as many.
    private func energy(steps count: Int) -> Double? {
        guard stepsDone >= count else { return nil }
        var sum = 0.0
        for k in (stepsDone - count)..<stepsDone { sum += recent[k % 30] }
        return sum / Double(count * step)
    }

    /// libebur128's energy-to-loudness formula; nil for silence.
    static func loudness(_ energy: Double) -> Double? {
        guard energy > 0 else { return nil }
        let level = 10 * (Foundation.log(energy) / Foundation.log(10.0)) - 0.691
        return level.isFinite ? level : nil
    }

    /// Loudness of the 400 ms that end at the last whole 100-ms step (nil before 400 ms or in silence).
    public var momentary: Double? { energy(steps: 4).flatMap(LoudnessMeter.loudness) }
    /// Loudness of the 3 s that end at the last whole 100-ms step (nil before 3 s or in silence).
    public var shortTerm: Double? { energy(steps: 30).flatMap(LoudnessMeter.loudness) }

    /// Gated loudness of `blocks` (BS.1770-4: the blocks within 10 LU of the ungated mean); nil without any.
    static func integrated(_ blocks: [Double]) -> Double? {
        guard !blocks.isEmpty else { return nil }
        let gate = blocks.reduce(0, +) / Double(blocks.count) * pow(10.0, -10.0 / 10.0)
        var sum = 0.0, count = 0
        for e in blocks where e >= gate {
            sum += e
            count += 1
        }
        return count == 0 ? nil : loudness(sum / Double(count))
    }

    /// Loudness range (EBU Tech 3342) of short-term `blocks`: from the 10th to the 95th percentile of those
    /// within 20 LU of their mean; 0 without any.
    static func range(_ blocks: [Double]) -> Double {
        guard !blocks.isEmpty else { return 0 }
        let sorted = blocks.sorted()
        let gate = sorted.reduce(0, +) / Double(sorted.count) * pow(10.0, -20.0 / 10.0)
        let first = sorted.firstIndex { $0 >= gate } ?? sorted.count
        let n = sorted.count - first
        guard n > 0 else { return 0 }
        let high = sorted[first + Int(Double(n - 1) * 0.95 + 0.5)]
        let low = sorted[first + Int(Double(n - 1) * 0.1 + 0.5)]
        guard let h = loudness(high), let l = loudness(low) else { return 0 }
        return h - l
    }

    /// Everything measured so far.
    public func result() -> LoudnessResult {
        let peak = Double(truePeakMeter.channelSamplePeaks.max() ?? 0)
        // The meter's peaks include the samples themselves.
        let truePeak = Double(truePeakMeter.channelPeaks.max() ?? 0)
        func dB(_ x: Double) -> Double? { x > 0 && x.isFinite ? 20 * log10(x) : nil }
        let integrated = LoudnessMeter.integrated(blocks)
        return LoudnessResult(
            integrated: integrated,
            // Without an integrated loudness (silence) there is no range either, though libebur128 says 0.
            range: integrated == nil ? nil : LoudnessMeter.range(shortTermBlocks),
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
