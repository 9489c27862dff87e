import EarmarkAudio
import EarmarkDSP
import Foundation

/// Beats, bars and tempo of a piece (Music Understanding's rhythm dimension).
public struct RhythmResult: Codable, Sendable, Equatable {
    public static let kind = "rhythm"
    public static let version = 1

    /// Beat times in seconds.
    public var beats: [Double]
    /// Bar (downbeat) times in seconds, a subset of `beats`.
    public var bars: [Double]
    /// Beats per bar the bars were laid out with (3 or 4).
    public var beatsPerBar: Int
    /// Beats per minute from the least-squares slope of beat time over beat number; nil with fewer than two beats.
    public var bpm: Double?
    public var duration: Double
}

/// Pace (Music Understanding's dimension): how many musical events — note and drum onsets — happen
/// per minute, over 10-s ranges every 5 s. An onset is a peak of the onset envelope that is the
/// largest within ±100 ms and exceeds its ±1.5 s neighbourhood's mean by a quarter of the standard
/// deviation of the whole piece (chosen on half of the multi-part MIDI renders of
/// tools/instrument-data.sh against the scores' note onsets; one deviation, version 1, counted about 60 %
/// of them); a video editor cuts every 60 / pace seconds.
public struct PaceResult: Codable, Sendable, Equatable {
    public static let kind = "pace"
    public static let version = 2

    /// Events per minute over the whole piece.
    public var overall: Double
    public var values: [TimedValue]
    public var duration: Double
}

/// Tracks beats: a spectral-flux onset envelope (log-compressed band energies, 86 frames a second),
/// the tempo from its autocorrelation weighted towards 120 BPM, beats by dynamic programming that
/// rewards onsets and punishes intervals off the tempo, and bars by the beat phase whose beats carry
/// the most low-frequency onset energy. Feed audio with ``append(_:)``, then call ``result()``.
public final class BeatTracker {
    static let sampleRate = 11_025.0
    static let fftSize = 1024
    static let hop = 128
    static let bandCount = 24

    private let spectrum: FramedSpectrum
    private var previousBands: [Float]?
    private var flux: [Float] = []
    private var lowFlux: [Float] = []
    /// Band edges in FFT bins, log-spaced from 30 Hz to 5 kHz.
    private let edges: [Int]

    public init(inputRate: Double = AudioConstants.sampleRate) throws {
        spectrum = try FramedSpectrum(inputRate: inputRate, sampleRate: BeatTracker.sampleRate, fftSize: BeatTracker.fftSize,
                                      hop: BeatTracker.hop)
        let binHz = BeatTracker.sampleRate / Double(BeatTracker.fftSize)
        var e: [Int] = []
        for i in 0...BeatTracker.bandCount {
            let f = 30 * pow(5000.0 / 30, Double(i) / Double(BeatTracker.bandCount))
            e.append(max(1, Int((f / binHz).rounded())))
        }
        for i in 1..<e.count where e[i] <= e[i - 1] { e[i] = e[i - 1] + 1 }
        edges = e
    }

    public func append(_ samples: [Float]) { spectrum.append(samples) { addFrame($0) } }

    private func addFrame(_ power: [Float]) {
        let n = BeatTracker.fftSize
        var bands = [Float](repeating: 0, count: BeatTracker.bandCount)
        for b in 0..<BeatTracker.bandCount {
            var s: Float = 0
            for k in edges[b]..<min(edges[b + 1], n / 2) { s += power[k] }
            bands[b] = logf(1 + 1e4 * s)
        }
        if let prev = previousBands {
            var total: Float = 0, low: Float = 0
            for b in 0..<BeatTracker.bandCount {
                let d = max(0, bands[b] - prev[b])
                total += d
                if b < 8 { low += d }   // below about 150 Hz: kick drum and bass
            }
            flux.append(total)
            lowFlux.append(low)
        } else {
            flux.append(0)
            lowFlux.append(0)
        }
        previousBands = bands
    }

    /// The time of an onset whose flux peaks at `frame`: the flux of a frame rises most when a sound
    /// starts about 0.8 of the window into it (measured on clicks: 80 ms after the frame's start).
    static func time(ofFrame frame: Int) -> Double {
        Double(frame) / frameRate + 0.8 * Double(fftSize) / sampleRate
    }

    /// Pace's onset threshold above the local mean, in standard deviations of the envelope (see ``PaceResult``).
    public static let paceDeviations = 0.25

    /// Frames per second of the onset envelope.
    static var frameRate: Double { sampleRate / Double(hop) }

    /// Removes the local mean (about 0.5 s) and half-wave rectifies, then scales to unit deviation.
    static func normalized(_ x: [Float]) -> [Double] {
        let r = Int(0.25 * frameRate)
        var prefix = [Double](repeating: 0, count: x.count + 1)
        for i in x.indices { prefix[i + 1] = prefix[i] + Double(x[i]) }
        var out = x.indices.map { i -> Double in
            let lo = max(0, i - r), hi = min(x.count, i + r + 1)
            return max(0, Double(x[i]) - (prefix[hi] - prefix[lo]) / Double(hi - lo))
        }
        let mean = out.reduce(0, +) / Double(max(1, out.count))
        let sd = (out.reduce(0) { $0 + ($1 - mean) * ($1 - mean) } / Double(max(1, out.count))).squareRoot()
        if sd > 0 { out = out.map { $0 / sd } }
        return out
    }

    /// The beat period in frames: autocorrelation of the envelope over 40–240 BPM, weighted by a
    /// log-normal prior around 120 BPM (one octave wide), with its double and triple periods added in.
    static func period(_ onset: [Double]) -> Double? {
        let fr = frameRate
        let minLag = Int(fr * 60 / 240), maxLag = Int(fr * 60 / 40)
        guard onset.count > 3 * maxLag / 2 else { return nil }
        func ac(_ lag: Int) -> Double {
            guard lag < onset.count else { return 0 }
            var s = 0.0
            for i in lag..<onset.count { s += onset[i] * onset[i - lag] }
            return s / Double(onset.count - lag)
        }
        let raw = (0...(3 * maxLag)).map { $0 < minLag / 2 ? 0 : ac($0) }
        var best = -1.0, bestLag = 0
        for lag in minLag...maxLag {
            let bpm = 60 * fr / Double(lag)
            let prior = exp(-0.5 * pow(log2(bpm / 120) / 1.0, 2))
            let score = (raw[lag] + 0.5 * raw[min(raw.count - 1, 2 * lag)] + 0.33 * raw[min(raw.count - 1, 3 * lag)]) * prior
            if score > best { (best, bestLag) = (score, lag) }
        }
        guard best > 0 else { return nil }
        // Octave check: when the envelope repeats about as strongly at half the period, and that tempo
        // is still plausible, the pulse is the faster one (a slow prior must not halve a brisk waltz).
        let half = Int((Double(bestLag) / 2).rounded())
        if half >= minLag, 60 * fr / Double(half) <= 180, raw[half] >= 0.7 * raw[bestLag] { bestLag = half }
        // Refine to a fraction of a frame with a parabola through the neighbours.
        let a = raw[bestLag - 1], b = raw[bestLag], c = raw[bestLag + 1]
        let d = a - 2 * b + c
        return Double(bestLag) + (d < 0 ? 0.5 * (a - c) / d : 0)
    }

    /// Beats by dynamic programming: each frame's score is its onset strength plus the best earlier
    /// beat's score less a penalty growing with the squared log ratio of the interval to the period.
    static func beats(_ onset: [Double], period: Double, tightness: Double = 300) -> [Int] {
        let n = onset.count
        guard n > 0, period >= 2 else { return [] }
        var score = onset, back = [Int](repeating: -1, count: n)
        let lo = Int(period / 2), hi = Int(2 * period)
        for t in 0..<n {
            var best = -Double.infinity, arg = -1
            for tau in max(0, t - hi)...max(0, t - lo) where tau < t {
                let v = score[tau] - tightness * pow(log(Double(t - tau) / period), 2)
                if v > best { (best, arg) = (v, tau) }
            }
            if arg >= 0, best > 0 {
                score[t] = onset[t] + best
                back[t] = arg
            }
        }
        // The last beat: the best-scoring frame within the last period.
        let tail = max(0, n - Int(period))..<n
        guard var t = tail.max(by: { score[$0] < score[$1] }) else { return [] }
        var out = [t]
        while back[t] >= 0 {
            t = back[t]
            out.append(t)
        }
        return out.reversed()
    }

    /// Everything appended: beats, bars and BPM (nil when the audio has no steady pulse).
    public func result() -> RhythmResult? {
        spectrum.finish { addFrame($0) }
        let duration = spectrum.duration
        let onset = BeatTracker.normalized(flux)
        guard onset.contains(where: { $0 > 0 }), let period = BeatTracker.period(onset) else { return nil }
        let frames = BeatTracker.beats(onset, period: period)
        let times = frames.map { BeatTracker.time(ofFrame: $0) }
        guard times.count >= 2 else { return nil }
        // Bars: for 3 and 4 beats a bar, the phase whose beats carry the most low-band onset energy;
        // the meter with the clearer contrast between its best phase and the rest wins.
        let low = BeatTracker.normalized(lowFlux)
        func strength(_ f: Int) -> Double {
            var s = 0.0
            for d in -2...2 where f + d >= 0 && f + d < low.count { s = max(s, low[f + d] + 0.5 * onset[f + d]) }
            return s
        }
        var bestMeter = 4, bestPhase = 0, bestContrast = -Double.infinity
        for meter in [4, 3] {
            var sums = [Double](repeating: 0, count: meter), counts = [Double](repeating: 0, count: meter)
            for (i, f) in frames.enumerated() {
                sums[i % meter] += strength(f)
                counts[i % meter] += 1
            }
            let means = (0..<meter).map { counts[$0] > 0 ? sums[$0] / counts[$0] : 0 }
            let phase = means.indices.max { means[$0] < means[$1] }!
            let others = means.enumerated().filter { $0.offset != phase }.map(\.element)
            let contrast = means[phase] - others.reduce(0, +) / Double(max(1, others.count))
            // Four beats a bar unless three is clearly better.
            if contrast > bestContrast * (meter == 3 ? 1.3 : 1) { (bestMeter, bestPhase, bestContrast) = (meter, phase, contrast) }
        }
        let bars = times.enumerated().filter { $0.offset % bestMeter == bestPhase }.map(\.element)
        // The tempo from the least-squares slope of beat time over beat number: finer than one frame.
        let n = Double(times.count), meanI = (n - 1) / 2, meanT = times.reduce(0, +) / n
        var sxy = 0.0, sxx = 0.0
        for (i, t) in times.enumerated() {
            sxy += (Double(i) - meanI) * (t - meanT)
            sxx += (Double(i) - meanI) * (Double(i) - meanI)
        }
        let slope = sxx > 0 ? sxy / sxx : 0
        return RhythmResult(beats: times, bars: bars, beatsPerBar: bestMeter, bpm: slope > 0 ? 60 / slope : nil, duration: duration)
    }

    /// Onset events per minute (see ``PaceResult``), from everything appended so far; call after ``result()``
    /// or on its own (it flushes the converter only once). `deviations`: how far above its neighbourhood's
    /// mean, in standard deviations of the whole envelope, a peak must rise to count (see ``PaceResult``).
    public func pace(deviations: Double = BeatTracker.paceDeviations) -> PaceResult? {
        spectrum.finish { addFrame($0) }
        let duration = spectrum.duration
        let env = BeatTracker.normalized(flux)
        guard duration >= 1, env.contains(where: { $0 > 0 }) else { return nil }
        let fr = BeatTracker.frameRate
        let near = max(1, Int(0.1 * fr)), wide = Int(1.5 * fr)
        let mean = env.reduce(0, +) / Double(env.count)
        let sd = (env.reduce(0) { $0 + ($1 - mean) * ($1 - mean) } / Double(env.count)).squareRoot()
        var prefix = [Double](repeating: 0, count: env.count + 1)
        for i in env.indices { prefix[i + 1] = prefix[i] + env[i] }
        var onsets: [Double] = []
        for i in env.indices where env[i] > 0 {
            let lo = max(0, i - near), hi = min(env.count - 1, i + near)
            guard env[lo...hi].max() == env[i], env[lo..<i].allSatisfy({ $0 < env[i] }) else { continue }
            let wlo = max(0, i - wide), whi = min(env.count, i + wide + 1)
            if env[i] > (prefix[whi] - prefix[wlo]) / Double(whi - wlo) + deviations * sd { onsets.append(BeatTracker.time(ofFrame: i)) }
        }
        var values: [TimedValue] = []
        var start = 0.0
        repeat {
            let end = min(duration, start + 10)
            let count = onsets.filter { $0 >= start && $0 < end }.count
            if end - start >= 2 { values.append(TimedValue(start: start, end: end, value: Double(count) * 60 / (end - start))) }
            start += 5
        } while start + 5 < duration
        return PaceResult(overall: Double(onsets.count) * 60 / duration, values: values, duration: duration)
    }

    /// Beat-tracking F-measure (MIREX style): an estimated beat is right when it is within `tolerance`
    /// seconds of a reference beat not matched already.
    public static func fMeasure(estimated: [Double], reference: [Double], tolerance: Double = 0.07) -> Double {
        guard !estimated.isEmpty, !reference.isEmpty else { return estimated.isEmpty && reference.isEmpty ? 1 : 0 }
        var used = [Bool](repeating: false, count: reference.count)
        var hits = 0
        var j = 0
        for e in estimated {
            while j < reference.count, reference[j] < e - tolerance { j += 1 }
            var k = j
            while k < reference.count, reference[k] <= e + tolerance {
                if !used[k] { used[k] = true; hits += 1; break }
                k += 1
            }
        }
        let p = Double(hits) / Double(estimated.count), r = Double(hits) / Double(reference.count)
        return p + r > 0 ? 2 * p * r / (p + r) : 0
    }
}
