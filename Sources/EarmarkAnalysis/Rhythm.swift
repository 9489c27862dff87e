import EarmarkAudio
import EarmarkDSP
import Foundation

/// Beats, bars and tempo of a piece (Music Understanding's rhythm dimension).
public struct RhythmResult: Codable, Sendable, Equatable {
    public static let kind = "rhythm"
    public static let version = 2

    /// Beat times in seconds.
    public var beats: [Double]
    /// Bar (downbeat) times in seconds, a subset of `beats`.
    public var bars: [Double]
    /// Beats per bar the bars were laid out with (3 or 4).
    public var beatsPerBar: Int
    /// Beats per minute from the least-squares slope of beat time over beat number; nil with fewer than two beats.
    public var bpm: Double?
    public var duration: Double
    /// Why there are no beats: the file holds no music (see ``MusicPresence``); nil when it does.
    public var reason: NonMusicReason? = nil
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
    /// Why there are no events: the file holds no music (see ``MusicPresence``); nil when it does.
    public var reason: NonMusicReason? = nil
}

/// Tracks beats: a spectral-flux onset envelope (40 log-spaced bands, 86 frames a second), the tempo
/// from a comb filter over its autocorrelation (four multiples of each period) weighted towards
/// 130 BPM, beats by dynamic programming that rewards onsets and harmonic changes and punishes
/// intervals off the tempo, and bars by the beat phase with the most harmonic change (chroma before and after the beat) and
/// low-frequency onset energy. Feed audio with ``append(_:)``, then call ``result(music:)``.
public final class BeatTracker {
    static let sampleRate = 11_025.0
    static let fftSize = 1024
    static let hop = 128
    static let bandCount = 24
    static let fineBandCount = 40
    /// Chroma is taken from bins of about 65 Hz to 2 kHz.
    static let chromaBins = 6...190

    private let spectrum: FramedSpectrum
    private var previousBands: [Float]?
    /// Pace's envelope (24 bands) and the low bands' part of it.
    private var flux: [Float] = []
    private var lowFlux: [Float] = []
    /// Band edges in FFT bins, log-spaced from 30 Hz to 5 kHz.
    private let edges: [Int]
    /// The beat tracker's envelope: flux of 40 bands log-spaced from 30 Hz to 5.5 kHz, log(1 + 100 E).
    private var novelty: [Float] = []
    private var previousFine: [Float]?
    private let fineEdges: [Int]
    /// Twelve pitch-class magnitudes a frame, frame after frame.
    private var chroma: [Float] = []
    private let pitchClass: [Int]

    public init(inputRate: Double = AudioConstants.sampleRate) throws {
        spectrum = try FramedSpectrum(inputRate: inputRate, sampleRate: BeatTracker.sampleRate, fftSize: BeatTracker.fftSize,
                                      hop: BeatTracker.hop)
        let binHz = BeatTracker.sampleRate / Double(BeatTracker.fftSize)
        edges = BeatTracker.logBandEdges(count: BeatTracker.bandCount, top: 5000, binHz: binHz)
        fineEdges = BeatTracker.logBandEdges(count: BeatTracker.fineBandCount, top: 5500, binHz: binHz)
        pitchClass = BeatTracker.chromaBins.map { FramedSpectrum.pitchClass(of: Double($0) * binHz) }
    }

    /// log(1 + gain · E) of each band's energy E, band b being bins `edges[b]..<edges[b + 1]` below `limit`.
    static func logBandEnergies(_ power: [Float], edges: [Int], upTo limit: Int, gain: Float) -> [Float] {
        (0..<(edges.count - 1)).map { b in
            var s: Float = 0
            for k in edges[b]..<min(edges[b + 1], limit) { s += power[k] }
            return logf(1 + gain * s)
        }
    }

    /// FFT bin edges of `count` bands log-spaced from 30 Hz to `top` Hz, each at least one bin wide.
    static func logBandEdges(count: Int, top: Double, binHz: Double) -> [Int] {
        var e = (0...count).map { i in max(1, Int((30 * pow(top / 30, Double(i) / Double(count)) / binHz).rounded())) }
        for i in 1..<e.count where e[i] <= e[i - 1] { e[i] = e[i - 1] + 1 }
        return e
    }

    public func append(_ samples: [Float]) { spectrum.append(samples) { addFrame($0) } }

    private func addFrame(_ power: [Float]) {
        let n = BeatTracker.fftSize
        let bands = BeatTracker.logBandEnergies(power, edges: edges, upTo: n / 2, gain: 1e4)
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
        let fine = BeatTracker.logBandEnergies(power, edges: fineEdges, upTo: n / 2, gain: 100)
        var total: Float = 0
        if let prev = previousFine {
            for b in 0..<BeatTracker.fineBandCount { total += max(0, fine[b] - prev[b]) }
        }
        novelty.append(total)
        previousFine = fine
        var c = [Float](repeating: 0, count: 12)
        for (i, k) in BeatTracker.chromaBins.enumerated() { c[pitchClass[i]] += power[k].squareRoot() }
        chroma += c
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

    /// The beat period in frames: a comb filter over the envelope's autocorrelation (the sum over
    /// the first four multiples of a period, each the best of its lag ± half a frame times √k), for
    /// 40–250 BPM on a grid of 1/120 octave, weighted by a log-normal prior around 130 BPM one octave
    /// wide (chosen on the even-numbered pieces of tools/music-data.sh's set).
    static func period(_ onset: [Double]) -> Double? {
        let fr = frameRate
        let maxLag = Int(fr * 60 / 40)
        guard onset.count > 3 * maxLag / 2 else { return nil }
        let mean = onset.reduce(0, +) / Double(onset.count)
        let x = onset.map { $0 - mean }
        let lagCount = min(onset.count, 4 * maxLag + 8)
        var r = [Double](repeating: 0, count: lagCount)
        x.withUnsafeBufferPointer { p in
            for lag in 0..<lagCount {
                var s = 0.0
                for i in lag..<p.count { s += p[i] * p[i - lag] }
                r[lag] = s / Double(p.count - lag)
            }
        }
        guard r[0] > 0 else { return nil }
        func at(_ lag: Double) -> Double {
            let i = Int(lag)
            guard i >= 0, i + 1 < r.count else { return 0 }
            let f = lag - Double(i)
            return r[i] * (1 - f) + r[i + 1] * f
        }
        var best = -Double.infinity, bestBPM = 0.0
        var i = 0
        while true {
            let bpm = 30 * pow(2, Double(i) / 120)
            i += 1
            if bpm < 40 { continue }
            if bpm > 250 { break }
            let lag = 60 * fr / bpm
            var comb = 0.0
            for k in 1...4 {
                let l = Double(k) * lag, d = 0.5 * Double(k).squareRoot()
                comb += max(at(l), at(max(1, l - d)), at(l + d))
            }
            let score = comb * exp(-0.5 * pow(log2(bpm / 130), 2))
            if score > best { (best, bestBPM) = (score, bpm) }
        }
        guard best > 0 else { return nil }
        return 60 * fr / bestBPM
    }

    /// Per frame, the cosine distance between the chroma summed over the `span` frames before it and
    /// over the `span` frames from it on: high where the harmony changes.
    static func harmonicChange(_ chroma: [Float], span: Int) -> [Float] {
        let n = chroma.count / 12
        var prefix = [Double](repeating: 0, count: 12 * (n + 1))
        for f in 0..<n { for p in 0..<12 { prefix[12 * (f + 1) + p] = prefix[12 * f + p] + Double(chroma[12 * f + p]) } }
        return (0..<n).map { t -> Float in
            let a0 = max(0, t - span), b1 = min(n, t + span)
            var dot = 0.0, na = 0.0, nb = 0.0
            for p in 0..<12 {
                let a = prefix[12 * t + p] - prefix[12 * a0 + p], b = prefix[12 * b1 + p] - prefix[12 * t + p]
                dot += a * b
                na += a * a
                nb += b * b
            }
            return Float(1 - dot / ((na * nb).squareRoot() + 1e-9))
        }
    }

    /// Beats by dynamic programming (Ellis 2007): each frame's score is its strength in `onset` plus the
    /// best earlier beat's score less `tightness` times the squared log ratio of the interval to the
    /// period (2 000: the period barely bends; chosen on the even-numbered pieces of tools/music-data.sh's set).
    static func beats(_ onset: [Double], period: Double, tightness: Double = 2_000) -> [Int] {
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

    /// Beats per bar (4, or 3 when clearly better) and the index of the first downbeat among `frames`:
    /// each beat scores harmonic change (the cosine distance between the chroma of the one and of the two
    /// beats before it and after it) plus its low-band onset strength, the three equally weighted after each
    /// is standardised over the beats (chosen on the even-numbered pieces of tools/music-data.sh's set); the
    /// phase of the meter whose beats score most above the others' mean wins.
    static func bars(frames: [Int], low: [Double], chroma: [Float]) -> (meter: Int, phase: Int) {
        let count = frames.count, frameCount = chroma.count / 12
        guard count >= 2 else { return (4, 0) }
        // The unit chroma vector of each beat's span, up to the next beat (the last one as long as the one before).
        var spans: [[Double]] = []
        for i in 0..<count {
            let start = min(frames[i], frameCount)
            let end = min(frameCount, max(start + 1, i + 1 < count ? frames[i + 1] : frames[i] + frames[i] - frames[i - 1]))
            var v = [Double](repeating: 0, count: 12)
            for f in start..<end { for p in 0..<12 { v[p] += Double(chroma[12 * f + p]) } }
            let norm = v.reduce(0) { $0 + $1 * $1 }.squareRoot()
            spans.append(norm > 0 ? v.map { $0 / norm } : v)
        }
        func standardised(_ x: [Double]) -> [Double] {
            let mean = x.reduce(0, +) / Double(x.count)
            let sd = (x.reduce(0) { $0 + ($1 - mean) * ($1 - mean) } / Double(x.count)).squareRoot()
            return x.map { ($0 - mean) / (sd + 1e-9) }
        }
        func change(_ w: Int) -> [Double] {
            standardised((0..<count).map { i -> Double in
                guard i >= w, i + w <= count else { return 0 }
                var a = [Double](repeating: 0, count: 12), b = a
                for j in (i - w)..<i { for p in 0..<12 { a[p] += spans[j][p] } }
                for j in i..<(i + w) { for p in 0..<12 { b[p] += spans[j][p] } }
                let dot = zip(a, b).reduce(0) { $0 + $1.0 * $1.1 }
                let na = a.reduce(0) { $0 + $1 * $1 }.squareRoot(), nb = b.reduce(0) { $0 + $1 * $1 }.squareRoot()
                return 1 - dot / (na * nb + 1e-9)
            })
        }
        let lowStrength = standardised(frames.map { f -> Double in
            var s = 0.0
            for d in -3...3 where f + d >= 0 && f + d < low.count { s = max(s, low[f + d]) }
            return s
        })
        let one = change(1), two = change(2)
        let score = (0..<count).map { lowStrength[$0] + one[$0] + two[$0] }
        var bestMeter = 4, bestPhase = 0, bestContrast = -Double.infinity
        for meter in [4, 3] {
            var sums = [Double](repeating: 0, count: meter), counts = [Double](repeating: 0, count: meter)
            for (i, s) in score.enumerated() {
                sums[i % meter] += s
                counts[i % meter] += 1
            }
            let means = (0..<meter).map { counts[$0] > 0 ? sums[$0] / counts[$0] : 0 }
            let phase = means.indices.max { means[$0] < means[$1] }!
            let others = means.enumerated().filter { $0.offset != phase }.map(\.element)
            // Four beats a bar unless three is clearly better.
            let contrast = (means[phase] - others.reduce(0, +) / Double(max(1, others.count))) / (meter == 3 ? 1.3 : 1)
            if contrast > bestContrast { (bestMeter, bestPhase, bestContrast) = (meter, phase, contrast) }
        }
        return (bestMeter, bestPhase)
    }

    /// The frames inside `music`'s ranges (nil: all of them, as without `music`).
    private func selection(_ music: MusicPresence?) -> FrameSelection? {
        music?.selection(count: novelty.count, hop: BeatTracker.hop, fftSize: BeatTracker.fftSize,
                         sampleRate: BeatTracker.sampleRate, frameRate: BeatTracker.frameRate)
    }

    /// Everything appended: beats, bars and BPM (nil when the audio has no steady pulse). With `music`,
    /// only its ranges are tracked (joined end to end, the BPM measured on the joined beats), and
    /// without music the result is empty with the reason.
    public func result(music: MusicPresence? = nil) -> RhythmResult? {
        spectrum.finish { addFrame($0) }
        let duration = spectrum.duration
        if let music, !music.hasMusic {
            return RhythmResult(beats: [], bars: [], beatsPerBar: 4, bpm: nil, duration: duration, reason: music.reason)
        }
        let selection = selection(music)
        let novelty = selection?.pick(self.novelty) ?? self.novelty
        let chroma = selection?.pick(self.chroma, stride: 12) ?? self.chroma
        let lowFlux = selection?.pick(self.lowFlux) ?? self.lowFlux
        let onset = BeatTracker.normalized(novelty)
        guard onset.contains(where: { $0 > 0 }), let period = BeatTracker.period(onset) else { return nil }
        // Beats follow the onsets and, at 1.5 times their weight, the harmonic changes: chords change on
        // the beat far more often than off it, which keeps the tracker off syncopated off-beats.
        let harmonic = BeatTracker.normalized(BeatTracker.harmonicChange(chroma, span: 30))
        let frames = BeatTracker.beats(zip(onset, harmonic).map { $0 + 1.5 * $1 }, period: period)
        let times = frames.map { BeatTracker.time(ofFrame: $0) }
        guard times.count >= 2 else { return nil }
        let (meter, phase) = BeatTracker.bars(frames: frames, low: BeatTracker.normalized(lowFlux), chroma: chroma)
        let fileTimes = selection.map { sel in frames.map { BeatTracker.time(ofFrame: sel.frames[$0]) } } ?? times
        let bars = fileTimes.enumerated().filter { $0.offset % meter == phase }.map(\.element)
        // The tempo from the least-squares slope of beat time over beat number: finer than one frame.
        let n = Double(times.count), meanI = (n - 1) / 2, meanT = times.reduce(0, +) / n
        var sxy = 0.0, sxx = 0.0
        for (i, t) in times.enumerated() {
            sxy += (Double(i) - meanI) * (t - meanT)
            sxx += (Double(i) - meanI) * (Double(i) - meanI)
        }
        let slope = sxx > 0 ? sxy / sxx : 0
        return RhythmResult(beats: fileTimes, bars: bars, beatsPerBar: meter, bpm: slope > 0 ? 60 / slope : nil, duration: duration)
    }

    /// Onset events per minute (see ``PaceResult``), from everything appended so far; call after ``result(music:)``
    /// or on its own (it flushes the converter only once). `deviations`: how far above its neighbourhood's
    /// mean, in standard deviations of the whole envelope, a peak must rise to count (see ``PaceResult``).
    /// With `music`, only its ranges count (the ranges of 10 s start again in each), and without music the
    /// result is empty with the reason.
    public func pace(deviations: Double = BeatTracker.paceDeviations, music: MusicPresence? = nil) -> PaceResult? {
        spectrum.finish { addFrame($0) }
        let duration = spectrum.duration
        if let music, !music.hasMusic { return PaceResult(overall: 0, values: [], duration: duration, reason: music.reason) }
        let selection = selection(music)
        let env = BeatTracker.normalized(selection?.pick(flux) ?? flux)
        let spans: [(start: Double, end: Double)] = selection == nil ? [(0, duration)]
            : (music?.ranges ?? []).map { ($0.start, min($0.end, duration)) }
        let seconds = spans.reduce(0) { $0 + $1.end - $1.start }
        guard seconds >= 1, env.contains(where: { $0 > 0 }) else { return nil }
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
            if env[i] > (prefix[whi] - prefix[wlo]) / Double(whi - wlo) + deviations * sd {
                onsets.append(BeatTracker.time(ofFrame: selection?.frames[i] ?? i))
            }
        }
        var values: [TimedValue] = []
        for (lo, hi) in spans {
            var start = lo
            repeat {
                let end = min(hi, start + 10)
                let count = onsets.filter { $0 >= start && $0 < end }.count
                if end - start >= 2 { values.append(TimedValue(start: start, end: end, value: Double(count) * 60 / (end - start))) }
                start += 5
            } while start + 5 < hi
        }
        return PaceResult(overall: Double(onsets.count) * 60 / seconds, values: values, duration: duration)
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
