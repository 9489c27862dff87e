import EarmarkAudio
import EarmarkDSP
import Foundation

/// Beats, bars and tempo of a piece (Music Understanding's rhythm dimension).
public struct RhythmResult: Codable, Sendable, Equatable {
    public static let kind = "rhythm"
    public static let version = 3

    /// Beat times in seconds.
    public var beats: [Double]
    /// Bar (downbeat) times in seconds, a subset of `beats`.
    public var bars: [Double]
    /// Beats per bar the bars were laid out with (3 or 4).
    public var beatsPerBar: Int
    /// Beats per minute over the whole piece: the median of the local tempo (``tempo``) weighted by time,
    /// the least-squares slope of beat time over beat number when the tempo holds; nil with fewer than two beats.
    public var bpm: Double?
    /// The local tempo: stretches in which the beat keeps one tempo, in order, from the first beat to the last
    /// (empty with fewer than two beats, and in analyses stored before version 3).
    public var tempo: [TempoSegment] = []
    public var duration: Double
    /// Why there are no beats: the file holds no music (see ``MusicPresence``); nil when it does.
    public var reason: NonMusicReason? = nil

    public init(beats: [Double], bars: [Double], beatsPerBar: Int, bpm: Double?, tempo: [TempoSegment] = [], duration: Double,
                reason: NonMusicReason? = nil) {
        self.beats = beats
        self.bars = bars
        self.beatsPerBar = beatsPerBar
        self.bpm = bpm
        self.tempo = tempo
        self.duration = duration
        self.reason = reason
    }

    private enum CodingKeys: String, CodingKey { case beats, bars, beatsPerBar, bpm, tempo, duration, reason }

    /// Decodes analyses of every version; those stored before version 3 have no `tempo`.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        beats = try c.decode([Double].self, forKey: .beats)
        bars = try c.decode([Double].self, forKey: .bars)
        beatsPerBar = try c.decode(Int.self, forKey: .beatsPerBar)
        bpm = try c.decodeIfPresent(Double.self, forKey: .bpm)
        tempo = try c.decodeIfPresent([TempoSegment].self, forKey: .tempo) ?? []
        duration = try c.decode(Double.self, forKey: .duration)
        reason = try c.decodeIfPresent(NonMusicReason.self, forKey: .reason)
    }
}

/// A stretch of a piece at one tempo (see ``RhythmResult/tempo``): from one beat to a later one, in seconds.
public struct TempoSegment: Codable, Sendable, Equatable {
    public var start: Double
    public var end: Double
    /// Beats per minute over the stretch: its beat count over its length.
    public var bpm: Double

    public init(start: Double, end: Double, bpm: Double) {
        self.start = start
        self.end = end
        self.bpm = bpm
    }
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

/// Tracks beats: a spectral-flux onset envelope (40 log-spaced bands, 86 frames a second), a starting
/// period from a comb filter over its autocorrelation (four multiples of each period) weighted towards
/// 130 BPM, beats by dynamic programming over time and tempo that rewards onsets and harmonic changes and
/// lets the period drift, the metrical level from how many of every other beat carry onsets, a tempo
/// curve from the beat intervals, and bars by the beat phase with the most harmonic change (chroma before
/// and after the beat) and low-frequency onset energy. Feed audio with ``append(_:)``, then call ``result(music:)``.
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

    /// The starting beat period in frames: a comb filter over the envelope's autocorrelation (the sum over
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

    /// Tempo states of ``beats(_:period:)``: periods `1/stateSteps` octave apart, `stateSpan` octaves either
    /// side of the piece's period.
    static let stateSteps = 40.0
    static let stateSpan = 0.35

    /// Beats by dynamic programming over (frame, tempo state), after Ellis (2007) with the tempo free to
    /// drift: a beat at frame t in state k (period P_k) scores its strength in `onset`, less twice the mean
    /// strength, plus the best score of a beat about P_k frames earlier (within 3 %, less `tightness` ·
    /// log²(interval / P_k)) in a state at most two steps away, less `change` per step; any farther state
    /// costs `jump` (a new tempo, as at the join of a medley). States span ±``stateSpan`` octaves around
    /// `period`, so the metrical level stays the one the comb chose (``metricalLevel(_:strength:halving:)``
    /// may halve it afterwards). Returns the beat frames and each beat's period. Change, jump and the
    /// mean's weight were chosen on the rhythm set and its tempo-change variants (see docs/analysis.md).
    static func beats(_ onset: [Double], period: Double, tightness: Double = 2_000, change: Double = 2,
                      jump: Double = 20) -> [(frame: Int, period: Double)] {
        let n = onset.count
        guard n > 0, period >= 4 else { return [] }
        let half = Int(stateSteps * stateSpan)
        let periods = (-half...half).map { period * pow(2, Double($0) / stateSteps) }.filter { $0 >= 4 }
        let k0 = periods.count
        let lows = periods.map { max(1, Int(($0 * 0.97).rounded(.down))) }
        let highs = periods.map { Int(($0 * 1.03).rounded(.up)) }
        let ring = highs.max()! + 1
        // Each beat pays twice the mean strength, so that a faster path is not paid for beats on nothing.
        let bias = 2 * onset.reduce(0, +) / Double(n)
        // Scores of the last `ring` frames; back pointers (interval, state) of every frame and state.
        var score = [Double](repeating: 0, count: ring * k0), rowBest = [Double](repeating: -.infinity, count: ring)
        var rowArg = [Int](repeating: 0, count: ring)
        var backD = [UInt16](repeating: 0, count: n * k0), backK = [Int16](repeating: -1, count: n * k0)
        let penalty: [[Double]] = periods.indices.map { k in (lows[k]...highs[k]).map { tightness * pow(log(Double($0) / periods[k]), 2) } }
        for t in 0..<n {
            let row = (t % ring) * k0
            var best = -Double.infinity, arg = 0
            for k in 0..<k0 {
                var bestV = 0.0, bestD = 0, bestK = -1
                for d in lows[k]...highs[k] where d <= t {
                    let prev = ((t - d) % ring) * k0, p = penalty[k][d - lows[k]]
                    for k2 in max(0, k - 2)...min(k0 - 1, k + 2) {
                        let v = score[prev + k2] - p - change * Double(abs(k2 - k))
                        if v > bestV { (bestV, bestD, bestK) = (v, d, k2) }
                    }
                    let v = rowBest[(t - d) % ring] - p - jump
                    if v > bestV { (bestV, bestD, bestK) = (v, d, rowArg[(t - d) % ring]) }
                }
                let s = onset[t] - bias + bestV
                score[row + k] = s
                if bestK >= 0 {
                    backD[t * k0 + k] = UInt16(bestD)
                    backK[t * k0 + k] = Int16(bestK)
                }
                if s > best { (best, arg) = (s, k) }
            }
            rowBest[t % ring] = best
            rowArg[t % ring] = arg
        }
        // The last beat: the best-scoring frame and state within the last period (scores of the last
        // `ring` frames are still held).
        var end = (t: -1, k: 0), endScore = -Double.infinity
        for t in max(0, n - Int(period), n - ring + 1)..<n {
            for k in 0..<k0 where score[(t % ring) * k0 + k] > endScore { (end, endScore) = ((t, k), score[(t % ring) * k0 + k]) }
        }
        guard end.t >= 0 else { return [] }
        var out = [(frame: end.t, period: periods[end.k])]
        var (t, k) = end
        while backK[t * k0 + k] >= 0 {
            (t, k) = (t - Int(backD[t * k0 + k]), Int(backK[t * k0 + k]))
            out.append((t, periods[k]))
        }
        return out.reversed()
    }

    /// The metrical level from the music itself: given beats tracked at the period the comb chose, the
    /// beat is taken to be twice as slow, on the half with more onsets, when one half of the beats
    /// (every other one) nearly always carries an onset (in at least 80 % of its beats) and the other half
    /// carries one in at most `halving` times as many: a slow tune has its notes on the beats and only
    /// some between them, while a fast piece's every beat is played. An onset is a peak (±2 frames) of
    /// `strength` of at least a quarter of the median beat's.
    static func metricalLevel(_ beats: [(frame: Int, period: Double)], strength: [Double], halving: Double = 0.6)
        -> [(frame: Int, period: Double)] {
        guard beats.count >= 8 else { return beats }
        let on = beats.map { b -> Double in
            var m = 0.0
            for g in max(0, b.frame - 2)...min(strength.count - 1, b.frame + 2) { m = max(m, strength[g]) }
            return m
        }
        let floor = 0.25 * on.sorted()[on.count / 2]
        func share(from first: Int) -> Double {
            let half = stride(from: first, to: on.count, by: 2).map { on[$0] }
            return Double(half.filter { $0 > floor }.count) / Double(max(1, half.count))
        }
        let even = share(from: 0), odd = share(from: 1)
        guard max(even, odd) >= 0.8, min(even, odd) <= halving * max(even, odd) else { return beats }
        return stride(from: even >= odd ? 0 : 1, to: beats.count, by: 2).map { (beats[$0].frame, 2 * beats[$0].period) }
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
        let strength = zip(onset, harmonic).map { $0 + 1.5 * $1 }
        let tracked = BeatTracker.metricalLevel(BeatTracker.beats(strength, period: period), strength: strength)
        let frames = tracked.map(\.frame)
        let times = frames.map { BeatTracker.time(ofFrame: $0) }
        guard times.count >= 2 else { return nil }
        let (meter, phase) = BeatTracker.bars(frames: frames, low: BeatTracker.normalized(lowFlux), chroma: chroma)
        let fileTimes = selection.map { sel in frames.map { BeatTracker.time(ofFrame: sel.frames[$0]) } } ?? times
        let bars = fileTimes.enumerated().filter { $0.offset % meter == phase }.map(\.element)
        let tempo = BeatTracker.tempoSegments(times).map { TempoSegment(start: fileTimes[$0.first], end: fileTimes[$0.last], bpm: $0.bpm) }
        return RhythmResult(beats: fileTimes, bars: bars, beatsPerBar: meter, bpm: BeatTracker.overallBPM(tempo), tempo: tempo,
                            duration: duration)
    }

    /// Stretches of one tempo among beats at `times` (first and last beat index, beats per minute): the
    /// logarithm of each inter-beat interval, median-filtered over five, is cut into pieces of at least four
    /// intervals that minimise the squared deviation from each piece's mean plus `cost` per piece (optimal
    /// partition by dynamic programming, pieces of at most 256 intervals); neighbours within 1.5 % are joined
    /// again. A piece's tempo is its interval count over its length.
    static func tempoSegments(_ times: [Double], cost: Double = 0.02) -> [(first: Int, last: Int, bpm: Double)] {
        let m = times.count - 1
        guard m >= 1 else { return [] }
        let raw = (0..<m).map { log(max(1e-3, times[$0 + 1] - times[$0])) }
        let x = raw.indices.map { i -> Double in
            let w = raw[max(0, i - 2)...min(m - 1, i + 2)].sorted()
            return w[w.count / 2]
        }
        var s1 = [Double](repeating: 0, count: m + 1), s2 = s1
        for i in 0..<m {
            s1[i + 1] = s1[i] + x[i]
            s2[i + 1] = s2[i] + x[i] * x[i]
        }
        let minimum = min(4, m), longest = 256
        // best[j]: the least cost of cutting intervals 0..<j; from[j]: where its last piece starts.
        var best = [Double](repeating: .infinity, count: m + 1), from = [Int](repeating: 0, count: m + 1)
        best[0] = 0
        for j in 1...m {
            for i in max(0, j - longest)...max(0, j - minimum) where best[i] < .infinity && j - i >= minimum {
                let len = Double(j - i), sum = s1[j] - s1[i]
                let c = best[i] + (s2[j] - s2[i]) - sum * sum / len + cost
                if c < best[j] { (best[j], from[j]) = (c, i) }
            }
        }
        var cuts = [m]
        var j = m
        while j > 0, best[j] < .infinity {
            j = from[j]
            cuts.append(j)
        }
        if cuts.last != 0 { cuts = [m, 0] }
        cuts.reverse()
        var pieces: [(first: Int, last: Int, bpm: Double)] = []
        for (a, b) in zip(cuts, cuts.dropFirst()) {
            let bpm = 60 * Double(b - a) / (times[b] - times[a])
            if let p = pieces.last, abs(log(bpm / p.bpm)) < 0.015 {
                pieces[pieces.count - 1] = (p.first, b, 60 * Double(b - p.first) / (times[b] - times[p.first]))
            } else {
                pieces.append((a, b, bpm))
            }
        }
        return pieces
    }

    /// The tempo most of the piece keeps: the median of the stretches' tempi weighted by their lengths.
    static func overallBPM(_ tempo: [TempoSegment]) -> Double? {
        let sorted = tempo.filter { $0.end > $0.start }.sorted { $0.bpm < $1.bpm }
        let total = sorted.reduce(0) { $0 + $1.end - $1.start }
        guard total > 0 else { return nil }
        var sum = 0.0
        for s in sorted {
            sum += s.end - s.start
            if sum >= total / 2 { return s.bpm }
        }
        return sorted.last?.bpm
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
