import EarmarkAudio
import EarmarkDSP
import Foundation

/// Beats, bars and tempo of a piece (Music Understanding's rhythm dimension).
public struct RhythmResult: Codable, Sendable, Equatable {
    public static let kind = "rhythm"
    public static let version = 10

    /// Beat times in seconds.
    public var beats: [Double]
    /// Bar (downbeat) times in seconds, a subset of `beats`.
    public var bars: [Double]
    /// Beats per bar the bars were laid out with (2, 3 or 4; in compound time a beat is a dotted quarter;
    /// with a change of time signature, those of most of the piece).
    public var beatsPerBar: Int
    /// Beats per minute over the whole piece: the median of the local tempo (``tempo``) weighted by time,
    /// the least-squares slope of beat time over beat number when the tempo holds; nil with fewer than two beats.
    public var bpm: Double?
    /// The local tempo: stretches in which the beat keeps one tempo, in order, from the first beat to the last
    /// (empty with fewer than two beats, and in analyses stored before version 3).
    public var tempo: [TempoSegment] = []
    /// The time signature of most of the piece (nil with too few beats to tell, and in analyses stored before version 4).
    public var timeSignature: TimeSignature? = nil
    /// The time signature over time: stretches in order, a new one where it changes (empty when
    /// ``timeSignature`` is nil).
    public var timeSignatures: [TimeSignatureSegment] = []
    public var duration: Double
    /// Why there are no beats: the file holds no music (see ``MusicPresence``); nil when it does.
    public var reason: NonMusicReason? = nil

    public init(beats: [Double], bars: [Double], beatsPerBar: Int, bpm: Double?, tempo: [TempoSegment] = [],
                timeSignature: TimeSignature? = nil, timeSignatures: [TimeSignatureSegment] = [], duration: Double,
                reason: NonMusicReason? = nil) {
        self.beats = beats
        self.bars = bars
        self.beatsPerBar = beatsPerBar
        self.bpm = bpm
        self.tempo = tempo
        self.timeSignature = timeSignature
        self.timeSignatures = timeSignatures
        self.duration = duration
        self.reason = reason
    }

    private enum CodingKeys: String, CodingKey { case beats, bars, beatsPerBar, bpm, tempo, timeSignature, timeSignatures, duration, reason }

    /// Decodes analyses of every version; those stored before version 3 have no `tempo`, before version 4 no
    /// time signature.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        beats = try c.decode([Double].self, forKey: .beats)
        bars = try c.decode([Double].self, forKey: .bars)
        beatsPerBar = try c.decode(Int.self, forKey: .beatsPerBar)
        bpm = try c.decodeIfPresent(Double.self, forKey: .bpm)
        tempo = try c.decodeIfPresent([TempoSegment].self, forKey: .tempo) ?? []
        timeSignature = try c.decodeIfPresent(TimeSignature.self, forKey: .timeSignature)
        timeSignatures = try c.decodeIfPresent([TimeSignatureSegment].self, forKey: .timeSignatures) ?? []
        duration = try c.decode(Double.self, forKey: .duration)
        reason = try c.decodeIfPresent(NonMusicReason.self, forKey: .reason)
    }
}

/// A time signature: beats per bar and how the beat divides, written as musicians write it: 2/4, 3/4 and 4/4
/// have beats of two eighths (2/2: of two quarters), 6/8, 9/8 and 12/8 two, three or four beats of three eighths
/// (compound time). Encoded as its text, e.g. `"6/8"`.
public struct TimeSignature: Codable, Sendable, Hashable, CustomStringConvertible {
    public var numerator: Int
    public var denominator: Int

    public init(numerator: Int, denominator: Int) {
        self.numerator = numerator
        self.denominator = denominator
    }

    /// The signature of `beatsPerBar` beats that divide in three (`compound`) or two; `cut` makes two simple
    /// beats 2/2 instead of 2/4.
    public init(beatsPerBar: Int, compound: Bool, cut: Bool = false) {
        if compound {
            self.init(numerator: 3 * beatsPerBar, denominator: 8)
        } else {
            self.init(numerator: beatsPerBar, denominator: cut && beatsPerBar == 2 ? 2 : 4)
        }
    }

    /// Parses text such as `"6/8"`; nil unless both numbers are positive.
    public init?(_ text: String) {
        let parts = text.split(separator: "/")
        guard parts.count == 2, let n = Int(parts[0].trimmingCharacters(in: .whitespaces)),
              let d = Int(parts[1].trimmingCharacters(in: .whitespaces)), n > 0, d > 0 else { return nil }
        self.init(numerator: n, denominator: d)
    }

    /// Compound time: the beat divides in three (6/8, 9/8, 12/8, 6/16…).
    public var isCompound: Bool { denominator >= 8 && numerator % 3 == 0 && numerator > 3 }
    /// Beats per bar: the numerator, a third of it in compound time.
    public var beatsPerBar: Int { isCompound ? numerator / 3 : numerator }
    /// `"6/8"`.
    public var description: String { "\(numerator)/\(denominator)" }

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let t = TimeSignature(text) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "not a time signature: \(text)"))
        }
        self = t
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(description)
    }
}

/// A stretch of a piece in one time signature (see ``RhythmResult/timeSignatures``): from one downbeat to a
/// later one (the last stretch to the last beat), in seconds.
public struct TimeSignatureSegment: Codable, Sendable, Equatable {
    public var start: Double
    public var end: Double
    public var timeSignature: TimeSignature

    public init(start: Double, end: Double, timeSignature: TimeSignature) {
        self.start = start
        self.end = end
        self.timeSignature = timeSignature
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
/// curve from the beat intervals, the time signature (the beat divided in two or three from the onsets between
/// beats, a compound metre's dotted-quarter beat from the bass accents) and bars by the beat phase with the most
/// harmonic change (chroma before and after the beat) and low-frequency onset energy. Feed audio with
/// ``append(_:)``, then call ``result(music:)``.
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
        return combPeriod(r)?.period
    }

    /// The tempo prior of the comb: log-normal around 130 BPM, one octave wide.
    static func tempoPrior(_ bpm: Double) -> Double { exp(-0.5 * pow(log2(bpm / 130), 2)) }

    /// The comb filter of ``period(_:)`` over an autocorrelation `r` (lag 0 first): the best period in frames
    /// with the prior, and the comb (without the prior) at every lag asked for by `comb(atLag:)`.
    static func combPeriod(_ r: [Double], prior: Bool = true) -> (period: Double, score: Double)? {
        let fr = frameRate
        guard r.count > 1, r[0] > 0 else { return nil }
        var best = -Double.infinity, bestBPM = 0.0
        var i = 0
        while true {
            let bpm = 30 * pow(2, Double(i) / 120)
            i += 1
            if bpm < 40 { continue }
            if bpm > 250 { break }
            let comb = combScore(r, lag: 60 * fr / bpm)
            let score = prior ? comb * tempoPrior(bpm) : comb
            if score > best { (best, bestBPM) = (score, bpm) }
        }
        guard best > 0 else { return nil }
        return (60 * fr / bestBPM, best)
    }

    /// The comb of ``period(_:)`` at one period `lag` (frames) over the autocorrelation `r`.
    static func combScore(_ r: [Double], lag: Double) -> Double {
        func at(_ lag: Double) -> Double {
            let i = Int(lag)
            guard i >= 0, i + 1 < r.count else { return 0 }
            let f = lag - Double(i)
            return r[i] * (1 - f) + r[i + 1] * f
        }
        var comb = 0.0
        for k in 1...4 {
            let l = Double(k) * lag, d = 0.5 * Double(k).squareRoot()
            comb += max(at(l), at(max(1, l - d)), at(l + d))
        }
        return comb
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

    /// A change of tempo for ``beats(_:period:tightness:change:jump:newTempo:)``: the new period (frames) and
    /// the frames `start..<end` in which the change may fall.
    struct TempoChange: Equatable {
        var start: Int
        var end: Int
        var period: Double
    }

    /// The onset envelope's autocorrelation (its mean removed) summed over blocks of ``changeBlock`` seconds, lags up
    /// to four periods of 40 BPM: the local comb of ``tempoChange(_:ratio:steady:foreign:relatedWindows:period:blocks:)`` and
    /// ``tempoDrift(period:blocks:reach:step:cost:least:)`` over any run of blocks.
    struct BlockAutocorrelation {
        let block: Int
        let lagCount: Int
        let count: Int
        /// sums[b * lagCount + lag]: the products x[i] x[i - lag] over the frames i of block b.
        private let sums: [Double]

        init(_ onset: [Double]) {
            let fr = BeatTracker.frameRate
            block = Int(BeatTracker.changeBlock * fr)
            lagCount = 4 * Int(fr * 60 / 40) + 8
            count = onset.count / block
            let mean = onset.reduce(0, +) / Double(max(1, onset.count))
            let x = onset.map { $0 - mean }
            var sums = [Double](repeating: 0, count: count * lagCount)
            let (block, lagCount, count) = (block, lagCount, count)
            x.withUnsafeBufferPointer { p in
                for b in 0..<count {
                    for lag in 0..<lagCount {
                        var s = 0.0
                        var i = max(lag, b * block)
                        while i < (b + 1) * block {
                            s += p[i] * p[i - lag]
                            i += 1
                        }
                        sums[b * lagCount + lag] = s
                    }
                }
            }
            self.sums = sums
        }

        /// The autocorrelation over the blocks `range` (lag 0 first).
        func autocorrelation(_ range: Range<Int>) -> [Double] {
            (0..<lagCount).map { lag in range.reduce(0) { $0 + sums[$1 * lagCount + lag] } / Double(range.count * block) }
        }
    }

    /// Blocks of ``tempoChange(_:)``, in seconds, and the blocks a window spans.
    static let changeBlock = 4.0
    static let changeWindow = 3

    /// One abrupt change of tempo too large for the drifting tracker (as at the join of a medley): the envelope's
    /// autocorrelation in blocks of ``changeBlock`` seconds, the comb's period (``combPeriod(_:prior:)``) in
    /// windows of ``changeWindow`` blocks every block; at the block boundary where the windows wholly before it
    /// and those wholly after it each keep one period (a share of at least `steady` within 6 % of their median),
    /// the medians differ by a factor of at least `ratio` and the music after the boundary has little at the
    /// period before it and the music before little at the period after (the comb without the prior, at most
    /// `foreign` of that at its own period), the new period from that boundary, with the change somewhere in
    /// the block either side of it. Medians an octave apart (within 6 %) are not a change: the local comb flips
    /// between the beat and its half in steady music (a fifth of the chorales of tools/music-data.sh). Medians 4:3 or
    /// 3:2 apart (within 3 %), where a steady piece's comb can move to a triplet level, are a change only with more
    /// evidence (rhythm version 10): every window of both sides keeps its period, each side has at least
    /// `relatedWindows` windows, and the piece's own period `period` (the whole comb's) is within 6 % of one side's
    /// (the whole comb of a medley is one of its pieces' tempi; a change between two levels that are neither, as a
    /// re-barred chorale's eighths in 12/8 then 4/4, is one of subdivision); without `period`, never. `ratio`,
    /// `steady` and `foreign` were set by hand on a rendered march followed by itself 1.4 × faster or 0.7 × as fast
    /// and checked on the chorales (none found in 134 steady pieces; every candidate an octave flip); the 4:3 and 3:2
    /// conditions were chosen on the medley set of tools/tempo-variants.sh (see docs/benchmarks.md). Returns the
    /// period before and the change, nil when there is none.
    static func tempoChange(_ onset: [Double], ratio: Double = 1.25, steady: Double = 0.7, foreign: Double = 0.7,
                            relatedWindows: Int = 5, period: Double? = nil,
                            blocks: BlockAutocorrelation? = nil) -> (period: Double, change: TempoChange)? {
        let blocks = blocks ?? BlockAutocorrelation(onset), windows = blocks.count - changeWindow + 1
        guard windows >= 6 else { return nil }
        func autocorrelation(_ range: Range<Int>) -> [Double] { blocks.autocorrelation(range) }
        let local = (0..<windows).map { w in combPeriod(autocorrelation(w..<(w + changeWindow))).map { log($0.period) } }
        func median(_ v: [Double]) -> Double { let s = v.sorted(); return s[s.count / 2] }
        var best: (cut: Int, steadiness: Double, before: Double, after: Double)?
        for cut in (changeWindow + 2)...(blocks.count - 3) {
            let left = local[0...(cut - changeWindow)].compactMap { $0 }, right = local[cut..<windows].compactMap { $0 }
            guard left.count >= 3, right.count >= 3 else { continue }
            let a = median(left), b = median(right)
            // An octave apart is the same music read at another metrical level (a slow chorale's beats and its eighths).
            guard abs(a - b) >= log(ratio), abs(abs(a - b) - log(2)) > 0.06 else { continue }
            let shareLeft = Double(left.filter { abs($0 - a) <= 0.06 }.count) / Double(left.count)
            let shareRight = Double(right.filter { abs($0 - b) <= 0.06 }.count) / Double(right.count)
            let steadiness = min(shareLeft, shareRight)
            // 4:3 and 3:2 (within 3 %) can be a steady piece's comb moving to a triplet level (mma-metal1: 120 then 158),
            // or a medley of pieces at 120 and 90 or 80 BPM: a change only when both sides hold their period throughout,
            // for long enough, and one of them is the piece's own.
            if abs(abs(a - b) - log(4.0 / 3)) <= 0.03 || abs(abs(a - b) - log(1.5)) <= 0.03 {
                guard steadiness >= 1, min(left.count, right.count) >= relatedWindows, let period,
                      min(abs(log(period) - a), abs(log(period) - b)) <= 0.06 else { continue }
            }
            if steadiness >= steady, steadiness > best?.steadiness ?? -1 { best = (cut, steadiness, exp(a), exp(b)) }
        }
        guard let best else { return nil }
        let before = autocorrelation(0..<(best.cut - 1)), after = autocorrelation((best.cut + 1)..<blocks.count)
        let foreignAfter = combScore(after, lag: best.before) / max(1e-9, combScore(after, lag: best.after))
        let foreignBefore = combScore(before, lag: best.after) / max(1e-9, combScore(before, lag: best.before))
        guard foreignAfter <= foreign, foreignBefore <= foreign else { return nil }
        return (best.before, TempoChange(start: (best.cut - 1) * blocks.block, end: (best.cut + 1) * blocks.block, period: best.after))
    }

    /// The index of the first beat at the new tempo of `change`: the median beat interval before the change
    /// and after it, and the first beat from a period before the change on whose interval to the next beat is
    /// nearer (in ratio) the one after. Nil when there is no beat on either side.
    static func firstBeat(after change: TempoChange, frames: [Int]) -> Int? {
        let intervals = zip(frames, frames.dropFirst()).map { Double($1 - $0) }
        let before = intervals.indices.filter { frames[$0 + 1] <= change.start }.map { intervals[$0] }.sorted()
        let after = intervals.indices.filter { frames[$0] >= change.end }.map { intervals[$0] }.sorted()
        guard !before.isEmpty, !after.isEmpty else { return nil }
        let a = before[before.count / 2], b = after[after.count / 2]
        return intervals.indices.first { i in
            Double(frames[i]) >= Double(change.start) - a && abs(log(intervals[i] / b)) < abs(log(intervals[i] / a))
        }
    }

    /// How far the local tempo drifts from `period` (a ritardando, a ramp): per frame, the centre of the tempo states in
    /// steps of 1/``stateSteps`` octave from `period`, nil when it stays within `least` steps of it everywhere. The
    /// comb without the prior (``combScore(_:lag:)``) in windows of ``changeWindow`` blocks, each as a share of its
    /// best over ±`reach` steps around `period`, is followed by Viterbi: the path starts within the tempo states of
    /// ``beats(_:period:tightness:change:jump:newTempo:drift:)`` (±``stateSpan`` octave), moves at most `step`
    /// steps a block and pays `cost` a step. So it follows a gradual change and cannot reach another metrical level
    /// (an octave, 3:2) without passing through the tempi between, where the comb has little. Window centres are
    /// joined linearly.
    static func tempoDrift(period: Double, blocks: BlockAutocorrelation, reach: Int = 28, step: Int = 3,
                           cost: Double = 0.05, least: Int = 4) -> [Int]? {
        let windows = blocks.count - changeWindow + 1
        guard windows >= 2 else { return nil }
        let half = Int(stateSteps * stateSpan), width = 2 * reach + 1
        let observed = (0..<windows).map { w -> [Double] in
            let r = blocks.autocorrelation(w..<(w + changeWindow))
            let c = (0..<width).map { i -> Double in
                let lag = period * pow(2, Double(i - reach) / stateSteps)
                return lag >= 4 ? max(0, combScore(r, lag: lag)) : 0
            }
            let top = c.max() ?? 0
            return top > 0 ? c.map { $0 / top } : c
        }
        var score = (0..<width).map { abs($0 - reach) <= half ? observed[0][$0] : -Double.infinity }
        var back: [[Int]] = []
        for w in 1..<windows {
            var next = [Double](repeating: -.infinity, count: width), arg = [Int](repeating: 0, count: width)
            for i in 0..<width {
                for j in max(0, i - step)...min(width - 1, i + step) where score[j] > -.infinity {
                    let v = score[j] - cost * Double(abs(i - j))
                    if v > next[i] { (next[i], arg[i]) = (v, j) }
                }
                next[i] += observed[w][i]
            }
            back.append(arg)
            score = next
        }
        var i = score.indices.max { score[$0] < score[$1] }!
        var path = [i - reach]
        for arg in back.reversed() {
            i = arg[i]
            path.append(i - reach)
        }
        path.reverse()
        guard path.contains(where: { abs($0) >= least }) else { return nil }
        let frames = blocks.count * blocks.block
        let centre = Double(changeWindow) / 2
        return (0..<frames).map { t in
            let u = min(Double(windows - 1), max(0, Double(t) / Double(blocks.block) - centre))
            let a = Int(u), f = u - Double(a), b = min(windows - 1, a + 1)
            return Int((Double(path[a]) * (1 - f) + Double(path[b]) * f).rounded())
        }
    }

    /// The starting period checked in windows (rhythm version 10): twice `period` when the comb with the prior, read in each
    /// window of ``changeWindow`` blocks at its best within ±`reach` steps of 1/``stateSteps`` octave and summed over the
    /// windows, is higher there than at `period` (and than at half of it); else `period`. The comb of the whole piece sums
    /// products a whole bar of beats apart, and when the tempo drifts (a ramp by a quarter over 90 s) those lags smear
    /// and the beat's comb falls below that of its eighths, whose lags are half as long; in a window of 12 s the tempo
    /// hardly moves, and each window may sit a little off the candidate. A steady piece's windows add up to its whole
    /// comb, so it keeps its period. `reach` (±0.1 octave) was set by reasoning, not tuned: the ramp of
    /// tools/tempo-variants.sh drifts about 0.03 octave per window. Only doubling is tried: a halved start is the
    /// metrical check's (``metricalLevel(_:strength:onset:halving:contrast:between:)``).
    static func windowedLevel(period: Double, blocks: BlockAutocorrelation, reach: Int = 4) -> Double {
        let windows = blocks.count - changeWindow + 1
        guard windows >= 2 else { return period }
        let local = (0..<windows).map { blocks.autocorrelation($0..<($0 + changeWindow)) }
        func score(_ p: Double) -> Double {
            let bpm = 60 * frameRate / p
            guard bpm >= 40, bpm <= 250 else { return -1 }
            var sum = 0.0
            for r in local {
                var best = -Double.infinity
                for i in -reach...reach { best = max(best, combScore(r, lag: p * pow(2, Double(i) / stateSteps))) }
                sum += best
            }
            return sum * tempoPrior(bpm)
        }
        let own = score(period), double = score(2 * period)
        return own > 0 && double > own && double >= score(period / 2) ? 2 * period : period
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
    /// `period`, so the metrical level stays the one the comb chose (``metricalLevel(_:strength:onset:halving:contrast:between:)``
    /// may halve it afterwards). Returns the beat frames and each beat's period. Change, jump and the
    /// mean's weight were chosen on the rhythm set and its tempo-change variants (see docs/analysis.md).
    static func beats(_ onset: [Double], period: Double, tightness: Double = 2_000, change: Double = 2,
                      jump: Double = 20, newTempo: TempoChange? = nil, drift: [Int]? = nil) -> [(frame: Int, period: Double)] {
        let n = onset.count
        guard n > 0, period >= 4 else { return [] }
        let half = Int(stateSteps * stateSpan)
        // With a new tempo: the states of both periods (and those between), those of the first before the change
        // and those of the second after it.
        let shift = newTempo.map { Int((stateSteps * log2($0.period / period)).rounded()) } ?? 0
        // With a drifting tempo: at frame t also the states within ±half of the local centre drift[t] (the last
        // centre after the drift's frames).
        let drift = newTempo == nil ? drift.flatMap { $0.isEmpty ? nil : $0 } : nil
        func centre(_ t: Int) -> Int { drift.map { $0[min(t, $0.count - 1)] } ?? 0 }
        let all = (min(0, shift, drift?.min() ?? 0) - half)...(max(0, shift, drift?.max() ?? 0) + half)
        let steps = all.filter { period * pow(2, Double($0) / stateSteps) >= 4 }
        guard !steps.isEmpty else { return [] }
        let periods = steps.map { period * pow(2, Double($0) / stateSteps) }
        let k0 = periods.count
        func allowed(_ range: ClosedRange<Int>) -> Range<Int> {
            let lo = steps.firstIndex { $0 >= range.lowerBound } ?? k0, hi = steps.lastIndex { $0 <= range.upperBound } ?? -1
            return lo <= hi ? lo..<(hi + 1) : 0..<0
        }
        let before = allowed(-half...half), after = allowed((shift - half)...(shift + half)), both = 0..<k0
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
            let states = drift != nil ? allowed(min(-half, centre(t) - half)...max(half, centre(t) + half))
                : newTempo.map { t < $0.start ? before : t < $0.end ? both : after } ?? both
            if states != both { for k in 0..<k0 { score[row + k] = -.infinity } }
            for k in states {
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
        let lastPeriod = newTempo?.period ?? period * pow(2, Double(max(0, centre(n - 1))) / stateSteps)
        for t in max(0, n - Int(lastPeriod), n - ring + 1)..<n {
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
    /// beat is taken to be twice as slow, on the half with more onsets, when one half of the beats (every
    /// other one) is clearly weaker than the other: a slow tune has its notes on the beats and only some
    /// between them, while a fast piece's every beat is played. Weaker is told two ways: the stronger half
    /// nearly always carries an onset (in at least 80 % of its beats) and the other one in at most
    /// `halving` times as many (an onset: a peak, ±2 frames, of `strength` of at least a quarter of the
    /// median beat's); or the weaker half's mean strength is at most `contrast` times the stronger's while
    /// the onset envelope `onset` halfway between the beats is at most `between` times that on them (the
    /// tracked beats are the slow beat and its off-beats, with little in between them).
    static func metricalLevel(_ beats: [(frame: Int, period: Double)], strength: [Double], onset: [Double],
                              halving: Double = 0.6, contrast: Double = 0.35, between: Double = 0.5)
        -> [(frame: Int, period: Double)] {
        guard beats.count >= 8 else { return beats }
        func peak(_ x: [Double], _ f: Int) -> Double {
            var m = 0.0
            for g in max(0, f - 2)...min(x.count - 1, f + 2) { m = max(m, x[g]) }
            return m
        }
        let on = beats.map { peak(strength, $0.frame) }
        let floor = 0.25 * on.sorted()[on.count / 2]
        func half(from first: Int) -> (share: Double, mean: Double) {
            let v = stride(from: first, to: on.count, by: 2).map { on[$0] }
            return (Double(v.filter { $0 > floor }.count) / Double(max(1, v.count)), v.reduce(0, +) / Double(max(1, v.count)))
        }
        let even = half(from: 0), odd = half(from: 1)
        let byOnsets = max(even.share, odd.share) >= 0.8 && min(even.share, odd.share) <= halving * max(even.share, odd.share)
        let onBeats = beats.reduce(0) { $0 + peak(onset, $1.frame) }
        let midway = zip(beats, beats.dropFirst()).reduce(0) { $0 + peak(onset, ($1.0.frame + $1.1.frame) / 2) }
        let byStrength = min(even.mean, odd.mean) <= contrast * max(even.mean, odd.mean) && midway <= between * onBeats
        guard byOnsets || byStrength else { return beats }
        let first = byOnsets ? (even.share >= odd.share ? 0 : 1) : (even.mean >= odd.mean ? 0 : 1)
        return stride(from: first, to: beats.count, by: 2).map { (beats[$0].frame, 2 * beats[$0].period) }
    }

    /// Each beat's accent for the bar analysis: harmonic change (the cosine distance between the chroma of the
    /// one and of the two beats before it and after it) plus its low-band onset strength, the three equally
    /// weighted after each is standardised over the beats (chosen on the even-numbered pieces of
    /// tools/music-data.sh's set).
    static func barAccents(frames: [Int], low: [Double], chroma: [Float]) -> [Double] {
        let count = frames.count, frameCount = chroma.count / 12
        guard count >= 2 else { return [Double](repeating: 0, count: count) }
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
        let lowStrength = bassAccents(frames: frames, low: low)
        let one = change(1), two = change(2)
        return (0..<count).map { lowStrength[$0] + one[$0] + two[$0] }
    }

    /// Each beat's low-band onset strength (bands under about 150 Hz: bass and kick drum; the largest within
    /// three frames of the beat), standardised over the beats: the bass part of ``barAccents(frames:low:chroma:)``.
    static func bassAccents(frames: [Int], low: [Double]) -> [Double] {
        let x = frames.map { f -> Double in
            var s = 0.0
            for d in -3...3 where f + d >= 0 && f + d < low.count { s = max(s, low[f + d]) }
            return s
        }
        return standardised(x)
    }

    /// `x` less its mean, over its standard deviation (empty for an empty `x`).
    static func standardised(_ x: [Double]) -> [Double] {
        guard !x.isEmpty else { return [] }
        let mean = x.reduce(0, +) / Double(x.count)
        let sd = (x.reduce(0) { $0 + ($1 - mean) * ($1 - mean) } / Double(x.count)).squareRoot()
        return x.map { ($0 - mean) / (sd + 1e-9) }
    }

    /// How much the bass repeats its strongest accent half a bar of four later: over the beats of `range`, the
    /// mean ``bassAccents(frames:low:)`` at each of four positions; from the strongest position, the lead of
    /// the position two beats on over the stronger of the two between, as a share of the strongest one's lead (1: the bass
    /// marks every second beat alike, bars of two; 0 or less: only every fourth, bars of four). Nil with fewer
    /// than eight beats or no lead.
    static func bassDuple(_ bass: [Double], range: Range<Int>) -> Double? {
        guard range.count >= 8, range.upperBound <= bass.count else { return nil }
        var sums = [Double](repeating: 0, count: 4), counts = sums
        for i in range {
            sums[i % 4] += bass[i]
            counts[i % 4] += 1
        }
        let p = (0..<4).map { sums[$0] / max(1, counts[$0]) }
        let a = p.indices.max { p[$0] < p[$1] }!
        // The stronger of the two between: a strong first beat's note rings on and masks the onset after it.
        let weak = max(p[(a + 1) % 4], p[(a + 3) % 4])
        guard p[a] - weak > 1e-9 else { return nil }
        return (p[(a + 2) % 4] - weak) / (p[a] - weak)
    }

    /// For bars of `meter` beats over the accents of `range`: the phase (the index modulo `meter` of the
    /// downbeats) and the means of the accents at each position of the bar, from the downbeat on.
    static func barProfile(_ accents: [Double], meter: Int, range: Range<Int>) -> (phase: Int, means: [Double]) {
        var sums = [Double](repeating: 0, count: meter), counts = [Double](repeating: 0, count: meter)
        for i in range {
            sums[i % meter] += accents[i]
            counts[i % meter] += 1
        }
        let means = (0..<meter).map { counts[$0] > 0 ? sums[$0] / counts[$0] : 0 }
        let phase = means.indices.max { means[$0] < means[$1] }!
        return (phase, (0..<meter).map { means[(phase + $0) % meter] })
    }

    /// Beats per bar (4, or 3 when clearly better) and the index of the first downbeat among `frames`:
    /// the phase of the meter whose beats' accents (``barAccents(frames:low:chroma:)``) score most above the
    /// others' mean wins.
    static func bars(frames: [Int], low: [Double], chroma: [Float]) -> (meter: Int, phase: Int) {
        guard frames.count >= 2 else { return (4, 0) }
        let accents = barAccents(frames: frames, low: low, chroma: chroma)
        return bars(accents: accents, range: accents.indices)
    }

    /// Bars of three win only when their downbeats lead the other beats by `threeOverFour` times the lead of bars
    /// of four (1.3 before rhythm version 9; 1.45, the middle of the even half of tools/metre-data.sh's set between
    /// its 4/4 pieces read in threes, 1.34 and 1.37, and its 3/4 pieces, 1.58 and up).
    static let threeOverFour = 1.45

    /// ``bars(frames:low:chroma:)`` on accents already computed, over the beats of `range`.
    static func bars(accents: [Double], range: Range<Int>) -> (meter: Int, phase: Int) {
        var bestMeter = 4, bestPhase = 0, bestContrast = -Double.infinity
        for meter in [4, 3] {
            let (phase, means) = barProfile(accents, meter: meter, range: range)
            // Four beats a bar unless three is clearly better.
            let contrast = (means[0] - means.dropFirst().reduce(0, +) / Double(meter - 1)) / (meter == 3 ? threeOverFour : 1)
            if contrast > bestContrast { (bestMeter, bestPhase, bestContrast) = (meter, phase, contrast) }
        }
        return (bestMeter, bestPhase)
    }

    /// The largest value of `x` within a frame of position `f` (0 outside).
    static func peak(_ x: [Double], at f: Double) -> Double {
        let c = Int(f.rounded())
        var m = 0.0
        for g in (c - 1)...(c + 1) where g >= 0 && g < x.count { m = max(m, x[g]) }
        return m
    }

    /// The mean onset strength at fractions of the beat over the beats of `range`: on the beat, at its half
    /// and at its first and second third (each the largest value within a frame of the position; the last
    /// beat, without a next one, is left out).
    static func subdivisions(frames: [Int], onset: [Double], range: Range<Int>)
        -> (beat: Double, half: Double, firstThird: Double, secondThird: Double) {
        var sums = [Double](repeating: 0, count: 4), n = 0.0
        for i in range where i + 1 < frames.count {
            let a = Double(frames[i]), l = Double(frames[i + 1] - frames[i])
            guard l >= 6 else { continue }
            sums[0] += peak(onset, at: a)
            sums[1] += peak(onset, at: a + l / 2)
            sums[2] += peak(onset, at: a + l / 3)
            sums[3] += peak(onset, at: a + 2 * l / 3)
            n += 1
        }
        guard n > 0 else { return (0, 0, 0, 0) }
        return (sums[0] / n, sums[1] / n, sums[2] / n, sums[3] / n)
    }

    /// For accents at a pulse, grouped `size` at a time: the group position (the phase) with the largest mean
    /// and its lead over the mean of the other positions.
    static func grouping(_ accents: [Double], size: Int) -> (phase: Int, contrast: Double) {
        guard accents.count >= 2 * size else { return (0, 0) }
        var sums = [Double](repeating: 0, count: size), counts = sums
        for (i, a) in accents.enumerated() {
            sums[i % size] += a
            counts[i % size] += 1
        }
        let means = (0..<size).map { sums[$0] / counts[$0] }
        let phase = means.indices.max { means[$0] < means[$1] }!
        let others = means.enumerated().filter { $0.offset != phase }.map(\.element)
        return (phase, means[phase] - others.reduce(0, +) / Double(others.count))
    }

    /// Constants of ``beatDivision(frames:onset:low:)``, chosen on the even half of tools/metre-data.sh's set
    /// (a grid of settings; see docs/analysis.md): onsets between the beats count when they reach
    /// `subdivisionFloor` of the onsets on the beats; the beat divides in three when the weaker of its thirds
    /// reaches `thirdsOverHalf` of its half; pulses group in threes when the bass accents every third pulse
    /// `groupingOverPairs` times as much as every second (and more than every fourth); a beat without onsets
    /// between is only regrouped
    /// from `fastestBeat` beats a minute up, or from `fastestGroupedBeat` when the regrouped beats fall into bars
    /// themselves (their bass accents group in twos, threes or fours by at least `barsOverThrees` times the threes'
    /// contrast: a compound metre's bar leans on its first beat, while a waltz whose downbeats are alike has nothing
    /// above its bars). The pulses group in threes also when their bass accents repeat three pulses on more than two
    /// on (the autocorrelation of the standardised accents at lag 3 over lag 2 by `lagThreeOverTwo`) and six on more than
    /// four or eight on (by `lagSixOverFourEight`): the dotted quarters of a compound metre tracked at two eighths, whose
    /// bar accents, twelve eighths apart, lean on pairs and fours as much as on threes.
    static let subdivisionFloor = 0.2
    static let thirdsOverHalf = 1.0
    static let groupingOverPairs = 1.5
    static let fastestBeat = 155.0
    static let fastestGroupedBeat = 145.0
    static let barsOverThrees = 1.0
    static let lagThreeOverTwo = 0.15
    static let lagSixOverFourEight = 0.3

    /// The autocorrelation of `x` (standardised) at each of `lags`: the mean product of values that far apart (0 for a
    /// lag as long as `x`).
    static func lagCorrelations(_ x: [Double], lags: [Int]) -> [Double] {
        let mean = x.reduce(0, +) / Double(x.count)
        let sd = (x.reduce(0) { $0 + ($1 - mean) * ($1 - mean) } / Double(x.count)).squareRoot() + 1e-9
        return lags.map { lag in
            guard x.count > lag else { return 0 }
            var s = 0.0
            for i in lag..<x.count { s += (x[i] - mean) * (x[i - lag] - mean) }
            return s / (sd * sd * Double(x.count - lag))
        }
    }

    /// How the tracked beats divide, and the beat of a compound metre: the mean onset at the thirds of
    /// the beats against their half says whether a beat divides in three (compound: the beats stay) or in
    /// two; in two, or without onsets between beats when they are fast, the pulse of half-beats (or the beats)
    /// may be the eighths of a compound metre tracked at the wrong level (6/8 tracked in quarters or in
    /// eighths): then the low-band onsets accent every third pulse more than every second, and the beat is
    /// every third pulse from the most accented one. Returns whether the metre is compound and the beat frames.
    static func beatDivision(frames: [Int], onset: [Double], low: [Double]) -> (compound: Bool, beats: [Int]) {
        guard frames.count >= 8 else { return (false, frames) }
        let sub = subdivisions(frames: frames, onset: onset, range: frames.indices)
        let thirds = min(sub.firstThird, sub.secondThird)
        let divided = max(sub.half, thirds) >= subdivisionFloor * sub.beat
        if divided && thirds > thirdsOverHalf * sub.half { return (true, frames) }
        let perBeat = divided ? 2 : 1
        let bpm = 60 * frameRate * Double(frames.count - 1) / Double(max(1, frames.last! - frames.first!))
        guard divided || bpm >= fastestGroupedBeat else { return (false, frames) }
        var pulses: [Double] = []
        for i in 0..<(frames.count - 1) {
            for k in 0..<perBeat { pulses.append(Double(frames[i]) + Double(k * (frames[i + 1] - frames[i])) / Double(perBeat)) }
        }
        pulses.append(Double(frames.last!))
        let accents = pulses.map { peak(low, at: $0) }
        // Threes, not pairs, and not fours either: a syncopated bass in 4/4 (accents on 1, the and of 2, 4)
        // leans on threes against pairs but repeats every four or eight pulses.
        let pairs = grouping(accents, size: 2), threes = grouping(accents, size: 3), fours = grouping(accents, size: 4)
        let grouped = threes.contrast > 0 && threes.contrast > groupingOverPairs * max(0, pairs.contrast) && threes.contrast > fours.contrast
        // Every sixth pulse, not every fourth or eighth, repeats the bass: dotted quarters in bars of twelve eighths.
        let r = lagCorrelations(accents, lags: [2, 3, 4, 6, 8])
        let lagged = r[1] - r[0] >= lagThreeOverTwo && r[3] - max(r[2], r[4]) >= lagSixOverFourEight
        guard grouped || lagged else { return (false, frames) }
        if !divided && bpm < fastestBeat {
            let top = stride(from: threes.phase, to: accents.count, by: 3).map { accents[$0] }
            let bars = [2, 3, 4].map { grouping(top, size: $0).contrast }.max()!
            guard bars >= barsOverThrees * threes.contrast else { return (false, frames) }
        }
        let beats = stride(from: threes.phase, to: pulses.count, by: 3).map { Int(pulses[$0].rounded()) }
        return beats.count >= 4 ? (true, beats) : (false, frames)
    }

    /// A bar of 4 is read as two bars of 2 when its third beat leads its second and fourth by at least
    /// `duple` times the first beat's lead (chosen on the even half of tools/metre-data.sh's set: lower values
    /// named 2/4 for many 4/4 pieces; see docs/analysis.md).
    static let duple = 1.0
    /// In compound time 6/8 and 12/8 are told apart by the bass alone (``bassDuple(_:range:)``): two beats a bar
    /// when the bass marks the third beat of a four with at least `compoundBassDuple` of the first's lead. An
    /// accompaniment in 12/8 leans on the bar's first beat only, one in 6/8 on every other beat alike; the harmony,
    /// which the whole accents add, changes on most beats of slow compound music and blurs that. (Chosen on the
    /// even half of tools/metre-data.sh's set: the middle of the gap between its 12/8 pieces, −0.91 and −0.05, and
    /// its 6/8 pieces, 0.27 and up; the total accent's third-beat lead at 0.2 named most 12/8 pieces 6/8.)
    static let compoundBassDuple = 0.11

    /// The time signature and bars of beats whose accents (``barAccents(frames:low:chroma:)``) are given:
    /// bars of 4 or 3 as ``bars(accents:range:)`` lays them, of 2 where the third beat of a 4 is as strong
    /// as its first (``duple``; in compound time where the bass, `bass` from ``bassAccents(frames:low:)``, marks
    /// it nearly as the first: ``compoundBassDuple``); `compound` from
    /// ``beatDivision(frames:onset:low:)``. Returns the signature,
    /// the beats per bar and the index of the first downbeat.
    static func metre(accents: [Double], bass: [Double], compound: Bool, range: Range<Int>? = nil) -> (signature: TimeSignature, meter: Int, phase: Int) {
        let range = range ?? accents.indices
        var (meter, phase) = bars(accents: accents, range: range)
        if meter == 4, range.count >= 8 {
            let m = barProfile(accents, meter: 4, range: range).means
            let weak = (m[1] + m[3]) / 2
            let two = compound ? (bassDuple(bass, range: range) ?? -1) >= compoundBassDuple
                : m[0] > weak && m[2] - weak >= duple * (m[0] - weak)
            if two {
                meter = 2
                phase %= 2
            }
        }
        return (TimeSignature(beatsPerBar: meter, compound: compound), meter, phase)
    }

    /// Beats a window of ``metreChanges(frames:onset:accents:bass:whole:)`` spans, and its hop.
    static let metreWindow = 32
    static let metreHop = 8
    /// The fewest beats a stretch of one time signature may last (shorter ones join a neighbour).
    static let metreRun = 64

    /// Where the time signature changes: the signature (``metre(accents:bass:compound:range:)``, the beat divided in
    /// three when the weaker third of the window's beats reaches ``thirdsOverHalf`` of their half, as for the
    /// whole piece) of windows of ``metreWindow`` beats every ``metreHop``; each beat takes the signature most
    /// of the windows over it give, and a stretch shorter than ``metreRun`` beats joins the one before it (the first,
    /// the one after). Returns the stretches as beat ranges with their signature, bars of `meter` beats from
    /// `phase` (an index into the beats); one stretch, the whole piece's, when nothing changes or the piece
    /// is shorter than two windows.
    static func metreChanges(frames: [Int], onset: [Double], accents: [Double], bass: [Double],
                             whole: (signature: TimeSignature, meter: Int, phase: Int))
        -> [(range: Range<Int>, signature: TimeSignature, meter: Int, phase: Int)] {
        let n = frames.count
        guard n >= 2 * metreWindow else { return [(0..<n, whole.signature, whole.meter, whole.phase)] }
        var votes = [[TimeSignature: Int]](repeating: [:], count: n)
        var start = 0
        while start + metreWindow <= n {
            let range = start..<(start + metreWindow)
            let sub = subdivisions(frames: frames, onset: onset, range: range)
            let thirds = min(sub.firstThird, sub.secondThird)
            let compound = whole.signature.isCompound
                ? !(sub.half >= subdivisionFloor * sub.beat && thirds <= thirdsOverHalf * sub.half)
                : (max(sub.half, thirds) >= subdivisionFloor * sub.beat && thirds > thirdsOverHalf * sub.half)
            let sig = metre(accents: accents, bass: bass, compound: compound, range: range).signature
            for i in range { votes[i][sig, default: 0] += 1 }
            start += start + metreWindow == n ? metreWindow : min(metreHop, n - start - metreWindow)
        }
        let label = votes.map { v in v.max { $0.value < $1.value || ($0.value == $1.value && $0.key == whole.signature) }?.key ?? whole.signature }
        // Runs of one signature, the short ones joined to a neighbour.
        var runs: [(start: Int, end: Int, signature: TimeSignature)] = []
        for (i, sig) in label.enumerated() {
            if let last = runs.last, last.signature == sig { runs[runs.count - 1].end = i + 1 } else { runs.append((i, i + 1, sig)) }
        }
        var changed = true
        while changed && runs.count > 1 {
            changed = false
            if let k = runs.indices.filter({ runs[$0].end - runs[$0].start < metreRun }).min(by: { runs[$0].end - runs[$0].start < runs[$1].end - runs[$1].start }) {
                let into = k > 0 ? k - 1 : k + 1
                runs[into] = (min(runs[into].start, runs[k].start), max(runs[into].end, runs[k].end), runs[into].signature)
                runs.remove(at: k)
                var merged: [(start: Int, end: Int, signature: TimeSignature)] = []
                for r in runs {
                    if let last = merged.last, last.signature == r.signature { merged[merged.count - 1].end = r.end } else { merged.append(r) }
                }
                runs = merged
                changed = true
            }
        }
        guard runs.count > 1 else { return [(0..<n, whole.signature, whole.meter, whole.phase)] }
        return runs.map { r in
            let m = metre(accents: accents, bass: bass, compound: r.signature.isCompound, range: r.start..<r.end)
            return (r.start..<r.end, r.signature, m.meter, m.phase)
        }
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
        guard onset.contains(where: { $0 > 0 }), let wholePeriod = BeatTracker.period(onset) else { return nil }
        // Beats follow the onsets and, at 1.5 times their weight, the harmonic changes: chords change on
        // the beat far more often than off it, which keeps the tracker off syncopated off-beats.
        let harmonic = BeatTracker.normalized(BeatTracker.harmonicChange(chroma, span: 30))
        let strength = zip(onset, harmonic).map { $0 + 1.5 * $1 }
        let blocks = BlockAutocorrelation(onset)
        // A ramp smears the whole comb's long lags: its beat may lose to its eighths there but not in windows of 12 s.
        let period = BeatTracker.windowedLevel(period: wholePeriod, blocks: blocks)
        let change = BeatTracker.tempoChange(onset, period: period, blocks: blocks)
        // A gradual change of tempo beyond the states around the piece's period (a ritardando to two thirds) moves them.
        let drift = change == nil ? BeatTracker.tempoDrift(period: period, blocks: blocks) : nil
        let tracked = BeatTracker.metricalLevel(BeatTracker.beats(strength, period: change?.period ?? period, newTempo: change?.change,
                                                                  drift: drift),
                                                strength: strength, onset: onset)
        let low = BeatTracker.normalized(lowFlux)
        // The metre: a compound metre tracked at a level of two eighths or of one keeps its dotted-quarter beats.
        let division = BeatTracker.beatDivision(frames: tracked.map(\.frame), onset: onset, low: low)
        let frames = division.beats
        let times = frames.map { BeatTracker.time(ofFrame: $0) }
        guard times.count >= 2 else { return nil }
        let accents = BeatTracker.barAccents(frames: frames, low: low, chroma: chroma)
        let bass = BeatTracker.bassAccents(frames: frames, low: low)
        let whole = BeatTracker.metre(accents: accents, bass: bass, compound: division.compound)
        var stretches = BeatTracker.metreChanges(frames: frames, onset: onset, accents: accents, bass: bass, whole: whole)
        // At a change of tempo (a new piece, as at a medley's join) the bars start again: the stretch the change
        // falls in is laid out anew on either side of it.
        if let change, let j = BeatTracker.firstBeat(after: change.change, frames: frames) {
            stretches = stretches.flatMap { s in
                guard j - s.range.lowerBound >= 8, s.range.upperBound - j >= 8 else { return [s] }
                return [s.range.lowerBound..<j, j..<s.range.upperBound].map { r in
                    let m = BeatTracker.metre(accents: accents, bass: bass, compound: s.signature.isCompound, range: r)
                    return (r, m.signature, m.meter, m.phase)
                }
            }
        }
        let fileTimes = selection.map { sel in frames.map { BeatTracker.time(ofFrame: sel.frames[min($0, sel.frames.count - 1)]) } } ?? times
        // Bars start again at each change of time signature.
        var bars: [Double] = []
        for s in stretches {
            bars += s.range.filter { ($0 - s.range.lowerBound) % s.meter == (s.phase - s.range.lowerBound % s.meter + s.meter) % s.meter }
                .map { fileTimes[$0] }
        }
        let tempo = BeatTracker.tempoSegments(times).map { TempoSegment(start: fileTimes[$0.first], end: fileTimes[$0.last], bpm: $0.bpm) }
        // Too few beats to hear a metre: no time signature.
        let known = frames.count >= 8
        // Each stretch from its first downbeat (the first from the first beat) to the next one's start.
        let starts = stretches.enumerated().map { k, s in
            k == 0 ? fileTimes[s.range.lowerBound] : (bars.first { $0 >= fileTimes[s.range.lowerBound] } ?? fileTimes[s.range.lowerBound])
        }
        var signatures: [TimeSignatureSegment] = []
        for k in stretches.indices where known {
            let end = k + 1 < starts.count ? starts[k + 1] : fileTimes.last!
            if let last = signatures.last, last.timeSignature == stretches[k].signature {
                signatures[signatures.count - 1].end = end
            } else {
                signatures.append(TimeSignatureSegment(start: starts[k], end: end, timeSignature: stretches[k].signature))
            }
        }
        // The signature and bar length of most of the piece.
        let main = stretches.max { $0.range.count < $1.range.count }!
        return RhythmResult(beats: fileTimes, bars: bars, beatsPerBar: main.meter, bpm: BeatTracker.overallBPM(tempo), tempo: tempo,
                            timeSignature: known ? main.signature : nil, timeSignatures: signatures, duration: duration)
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
