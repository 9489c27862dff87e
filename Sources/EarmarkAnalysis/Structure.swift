import EarmarkAudio
import EarmarkDSP
import Foundation

/// A labelled stretch of a piece.
public struct StructureRange: Codable, Sendable, Equatable {
    public var start: Double
    public var end: Double
    /// Sections that sound alike share a label (A, B, C …); segments and phrases have none.
    public var label: String?

    public init(start: Double, end: Double, label: String? = nil) {
        self.start = start
        self.end = end
        self.label = label
    }
}

/// Structure of a piece (Music Understanding's dimension): sections (large parts, labelled by
/// similarity), segments (finer changes) and phrases (groups of four bars inside segments, when the
/// bars are known).
public struct StructureResult: Codable, Sendable, Equatable {
    public static let kind = "structure"
    /// 3: sections inside a song from its repetitions, boundaries on bar lines (2: changes of music only).
    public static let version = 3

    public var sections: [StructureRange]
    public var segments: [StructureRange]
    public var phrases: [StructureRange]
    public var duration: Double
    /// Why there are no sections: the file holds no music (see ``MusicPresence``); nil when it does.
    public var reason: NonMusicReason? = nil
}

/// Finds structure from the self-similarity of 0.46-s feature blocks (12 pitch classes and 14 mel-cepstral
/// coefficients, each standardised over the piece; cosine similarity) and from the spectral flux of its frames.
///
/// Sections: the piece's own parts from its repetitions (``innerBoundaries(unit:band:window:threshold:gap:edge:)``,
/// structure features after Serrà et al. 2014 over a band of lags up to 3 minutes) and changes of music
/// (``sectionBoundaries(unit:flux:)``: Foote novelty, minus repetition and rhythm similarity across the point);
/// labels from the best diagonal joining two sections (``sectionLabels(x:band:cuts:threshold:)``); an inner
/// boundary between two sections that both occur once is dropped. The number of sections is not fixed in
/// advance. Segments: peaks of a ±3-s novelty that stand out from their ±8 s neighbourhood (mean + 0.5
/// deviations), plus the section boundaries. Boundaries move to the nearest bar line within half a bar.
public final class StructureAnalyzer {
    static let sampleRate = 11_025.0
    static let fftSize = 2048
    static let hop = 1024
    /// Frames per feature block (5 × 1024 samples at 11,025 Hz ≈ 0.46 s).
    static let framesPerBlock = 5
    /// Seconds per feature block.
    public static var blockDuration: Double { Double(framesPerBlock * hop) / sampleRate }
    /// Mel bands (40 Hz–5 kHz) behind the cepstral coefficients, and how many coefficients are kept.
    static let melBands = 40
    static let cepstra = 14

    private let spectrum: FramedSpectrum
    private var frames: [[Double]] = []
    /// Spectral flux of each frame (rise of log10(1 + power), summed over bins): the onsets behind the rhythm cue.
    private var flux: [Double] = []
    private var previousLog: [Float] = []
    private let pitchClassOfBin: [Int]
    /// Per mel band, its spectrum bins and triangular weights.
    private let melTaps: [[(bin: Int, weight: Double)]]
    /// DCT-II basis: `dct[k][m]` = cos(π k (2m + 1) / (2 · melBands)).
    private let dct: [[Double]]

    public init(inputRate: Double = AudioConstants.sampleRate) throws {
        spectrum = try FramedSpectrum(inputRate: inputRate, sampleRate: StructureAnalyzer.sampleRate,
                                      fftSize: StructureAnalyzer.fftSize, hop: StructureAnalyzer.hop)
        let n = StructureAnalyzer.fftSize
        let binHz = StructureAnalyzer.sampleRate / Double(n)
        pitchClassOfBin = (0...(n / 2)).map { k in
            let f = Double(k) * binHz
            return f >= 55 && f <= 2_000 ? FramedSpectrum.pitchClass(of: f) : -1
        }
        let bands = StructureAnalyzer.melBands
        func mel(_ f: Double) -> Double { 2595 * log10(1 + f / 700) }
        let edges = (0...(bands + 1)).map { i -> Double in
            let m = mel(40) + (mel(5_000) - mel(40)) * Double(i) / Double(bands + 1)
            return 700 * (pow(10, m / 2595) - 1)
        }
        melTaps = (0..<bands).map { m in
            let (l, c, r) = (edges[m], edges[m + 1], edges[m + 2])
            return (0...(n / 2)).compactMap { k in
                let f = Double(k) * binHz
                let w = min((f - l) / (c - l), (r - f) / (r - c))
                return w > 0 ? (bin: k, weight: w) : nil
            }
        }
        dct = (0..<StructureAnalyzer.cepstra).map { k in
            (0..<bands).map { m in cos(Double.pi * Double(k) * (2 * Double(m) + 1) / (2 * Double(bands))) }
        }
    }

    public func append(_ samples: [Float]) { spectrum.append(samples) { addFrame($0) } }

    /// One frame's features: the pitch-class profile (magnitudes, summing to 1) and the mel cepstrum.
    private func addFrame(_ power: [Float]) {
        var v = [Double](repeating: 0, count: 12 + StructureAnalyzer.cepstra)
        for k in power.indices where pitchClassOfBin[k] >= 0 { v[pitchClassOfBin[k]] += Double(power[k]).squareRoot() }
        let chromaSum = v[0..<12].reduce(0, +)
        for i in 0..<12 { v[i] = chromaSum > 0 ? v[i] / chromaSum : 0 }
        let logMel = melTaps.map { taps in log10(1e-10 + taps.reduce(0) { $0 + $1.weight * Double(power[$1.bin]) }) }
        for (k, basis) in dct.enumerated() {
            var c = 0.0
            for m in basis.indices { c += basis[m] * logMel[m] }
            v[12 + k] = c
        }
        frames.append(v)
        let logPower = power.map { log10(1 + $0) }
        var rise: Float = 0
        for k in previousLog.indices { rise += max(0, logPower[k] - previousLog[k]) }
        flux.append(Double(rise))
        previousLog = logPower
    }

    /// Half-second blocks of the frame features, each dimension standardised over the piece.
    private func blocks(_ frames: [[Double]]) -> [[Double]] {
        let perBlock = StructureAnalyzer.framesPerBlock
        var out: [[Double]] = []
        var i = 0
        while i < frames.count {
            let chunk = frames[i..<min(frames.count, i + perBlock)]
            var mean = [Double](repeating: 0, count: chunk.first!.count)
            for f in chunk { for d in mean.indices { mean[d] += f[d] } }
            out.append(mean.map { $0 / Double(chunk.count) })
            i += perBlock
        }
        guard let dims = out.first?.count else { return [] }
        for d in 0..<dims {
            let m = out.reduce(0) { $0 + $1[d] } / Double(out.count)
            let sd = (out.reduce(0) { $0 + ($1[d] - m) * ($1[d] - m) } / Double(out.count)).squareRoot()
            for b in out.indices { out[b][d] = sd > 1e-9 ? (out[b][d] - m) / sd : 0 }
        }
        return out
    }

    /// The blocks scaled to unit length (cosine similarity becomes a dot product).
    static func unitVectors(_ x: [[Double]]) -> [[Double]] {
        x.map { v in
            let norm = max(1e-9, v.reduce(0) { $0 + $1 * $1 }.squareRoot())
            return v.map { $0 / norm }
        }
    }

    @inline(__always) static func dot(_ a: [Double], _ b: [Double]) -> Double {
        var s = 0.0
        for d in a.indices { s += a[d] * b[d] }
        return s
    }

    /// Foote novelty on the cosine self-similarity of the blocks: a Gaussian-tapered checkerboard kernel
    /// of half-width `w` blocks slid along the diagonal. Similarities are computed inside the kernel's band
    /// only, so memory stays linear in the length of the piece. `unit`: the blocks scaled to unit length.
    static func novelty(unit: [[Double]], halfWidth w: Int) -> [Double] {
        let n = unit.count
        let taper = (-w..<w).map { exp(-0.5 * pow((Double($0) + 0.5) / (0.5 * Double(w)), 2)) }
        var out = [Double](repeating: 0, count: n)
        for c in 0..<n {
            var sum = 0.0, weight = 0.0
            for a in -w..<w where c + a >= 0 && c + a < n {
                for b in a..<w where c + b >= 0 && c + b < n {
                    let sign: Double = (a < 0) == (b < 0) ? 1 : -1
                    let g = taper[a + w] * taper[b + w] * (a == b ? 1 : 2)   // the matrix is symmetric
                    sum += sign * g * dot(unit[c + a], unit[c + b])
                    weight += g
                }
            }
            out[c] = weight > 0 ? max(0, sum / weight) : 0
        }
        return out
    }

    /// How well the music around block `i` repeats across it: the best mean similarity of a stretch of
    /// `window` blocks ending by `i` with one starting at `i` or later, both within ±`reach` blocks of `i`
    /// (a diagonal stripe of the self-similarity matrix); -1 when none fits.
    static func repetition(unit u: [[Double]], at i: Int, window: Int, reach: Int) -> Double {
        let n = u.count
        let w = min(window, i, n - i)
        guard w > 0 else { return -1 }
        let lo = max(0, i - reach), hi = min(n, i + reach)
        var best = -1.0
        for lag in w..<max(w, hi - lo) {
            // Stretches t..<t+w (before i) and t+lag..<t+lag+w (from i on), inside lo..<hi.
            let first = max(lo, i - lag), last = min(i - w, hi - w - lag)
            guard first <= last else { continue }
            var sum = 0.0
            for k in first..<(first + w) { sum += dot(u[k], u[k + lag]) }
            best = max(best, sum / Double(w))
            var t = first
            while t < last {
                sum += dot(u[t + w], u[t + w + lag]) - dot(u[t], u[t + lag])
                t += 1
                best = max(best, sum / Double(w))
            }
        }
        return best
    }

    /// Normalised autocorrelation of the onset strength `e[range]` at lags 2…31 frames (0.2–2.9 s), nil when too short.
    static func autocorrelation(_ e: [Double], _ range: Range<Int>) -> [Double]? {
        let r = range.clamped(to: e.indices)
        guard r.count >= 36 else { return nil }
        let mean = e[r].reduce(0, +) / Double(r.count)
        let s = e[r].map { $0 - mean }
        let variance = s.reduce(0) { $0 + $1 * $1 } / Double(s.count)
        return (2..<32).map { lag in
            var sum = 0.0
            for t in 0..<(s.count - lag) { sum += s[t] * s[t + lag] }
            return sum / Double(s.count - lag) / (variance + 1e-12)
        }
    }

    /// How alike the rhythm is before and after frame `f`: the cosine of the onset autocorrelations of the
    /// `span` frames on either side (0 when a side is too short). A piece tends to keep its pulse across
    /// its own section changes.
    static func rhythmSimilarity(flux: [Double], at f: Int, span: Int) -> Double {
        guard let a = autocorrelation(flux, max(0, f - span)..<f), let b = autocorrelation(flux, f..<(f + span)) else { return 0 }
        let na = a.reduce(0) { $0 + $1 * $1 }.squareRoot(), nb = b.reduce(0) { $0 + $1 * $1 }.squareRoot()
        return dot(a, b) / (na * nb + 1e-9)
    }

    /// Section boundaries (block indices): peaks of the ±4-s novelty, each scored by the ±16-s novelty near it
    /// minus half its repetition and a fifth of its rhythm similarity (8 s either side); those scoring at
    /// least -0.05, strongest first, 8 s apart and 6 s from the ends.
    static func sectionBoundaries(unit: [[Double]], flux: [Double]) -> [Int] {
        let bd = blockDuration, n = unit.count
        let short = novelty(unit: unit, halfWidth: Int(4 / bd))
        let wide = novelty(unit: unit, halfWidth: Int(16 / bd))
        let radius = Int(2 / bd), edge = 6 / bd
        var scored: [(block: Int, score: Double)] = []
        for i in 0..<n where Double(i) >= edge && Double(i) <= Double(n) - edge && short[i] > 0 {
            guard short[max(0, i - radius)...min(n - 1, i + radius)].max() == short[i] else { continue }
            let near = wide[max(0, i - 3)...min(n - 1, i + 3)].max() ?? 0
            let repeats = repetition(unit: unit, at: i, window: Int(6 / bd), reach: Int(40 / bd))
            let rhythm = rhythmSimilarity(flux: flux, at: i * framesPerBlock, span: Int(8 * sampleRate / Double(hop)))
            scored.append((i, near - 0.5 * repeats - 0.2 * rhythm))
        }
        var chosen: [Int] = []
        for c in scored.sorted(by: { $0.score > $1.score }) where c.score >= -0.05 {
            if !chosen.contains(where: { Double(abs($0 - c.block)) * bd < 8 }) { chosen.append(c.block) }
        }
        return chosen.sorted()
    }

    /// Repetition inside a piece over a band of lags: `similarity[i * (maxLag + 1) + l]` is the mean cosine of the
    /// blocks i−h…i+h with the blocks i+l−h…i+l+h (a delay embedding of 2h+1 blocks), 0 past the end.
    struct LagBand {
        let count: Int
        let maxLag: Int
        var similarity: [Float]

        init(unit u: [[Double]], maxLag: Int, halfWindow h: Int) {
            let n = u.count
            count = n
            self.maxLag = max(0, min(maxLag, n - 1))
            let width = self.maxLag + 1
            similarity = [Float](repeating: 0, count: n * width)
            var column = [Double](repeating: 0, count: n + 1)
            for l in 0...self.maxLag {
                // Prefix sums of the raw cosines along the diagonal of lag l, then the centred window mean.
                column[0] = 0
                for i in 0..<n { column[i + 1] = column[i] + (i + l < n ? StructureAnalyzer.dot(u[i], u[i + l]) : 0) }
                for i in 0..<(n - l) {
                    let lo = max(0, i - h), hi = min(n - l, i + h + 1)
                    similarity[i * width + l] = Float((column[hi] - column[lo]) / Double(hi - lo))
                }
            }
        }

        /// The similarity of blocks i and j (|i − j| ≤ maxLag), else nil.
        @inline(__always) func at(_ i: Int, _ j: Int) -> Float? {
            let (a, b) = i <= j ? (i, j) : (j, i)
            return b - a <= maxLag ? similarity[a * (maxLag + 1) + b - a] : nil
        }
    }

    /// Structure features (after Serrà, Müller, Grosche & Arcos 2014, "Unsupervised music structure annotation by
    /// time series structure features and segment similarity"): each block's mutual nearest neighbours (the
    /// `neighbours` most similar blocks at least `minLag` away, kept where each is among the other's) are
    /// written as a row of lags −maxLag…maxLag; where the lags at which the music recurs change, a section
    /// starts. Returns, per block, the difference of the mean rows `window` blocks before and after it (lags
    /// blurred over ±1), scaled by their sizes: 0 where the repetition pattern stays, up to 1 where it changes
    /// completely, 0 where nothing recurs on either side.
    static func structureNovelty(band: LagBand, neighbours k: Int, minLag: Int, window: Int) -> [Double] {
        let n = band.count, L = band.maxLag
        guard n > 2 * minLag, L >= minLag else { return [Double](repeating: 0, count: n) }
        // Each block's k best partners.
        var best = [[Int]](repeating: [], count: n)
        for i in 0..<n {
            var cands: [(j: Int, s: Float)] = []
            for j in max(0, i - L)...min(n - 1, i + L) where abs(i - j) >= minLag {
                cands.append((j, band.at(i, j)!))
            }
            cands.sort { $0.s > $1.s }
            best[i] = cands.prefix(k).filter { $0.s > 0 }.map(\.j)
        }
        let width = 2 * L + 1
        // Running sums over time of each lag's recurrence (mutual neighbours only).
        var prefix = [Float](repeating: 0, count: (n + 1) * width)
        for i in 0..<n {
            let row = (i + 1) * width, previous = i * width
            for l in 0..<width { prefix[row + l] = prefix[previous + l] }
            for j in best[i] where best[j].contains(i) { prefix[row + (j - i + L)] += 1 }
        }
        var out = [Double](repeating: 0, count: n)
        var before = [Double](repeating: 0, count: width), after = [Double](repeating: 0, count: width)
        for i in 1..<n {
            let lo = max(0, i - window), hi = min(n, i + window)
            for l in 0..<width {
                before[l] = Double(prefix[i * width + l] - prefix[lo * width + l]) / Double(i - lo)
                after[l] = Double(prefix[hi * width + l] - prefix[i * width + l]) / Double(hi - i)
            }
            var diff = 0.0, size = 0.0
            for l in 0..<width {
                let a = before[max(0, l - 1)] + before[l] + before[min(width - 1, l + 1)]
                let b = after[max(0, l - 1)] + after[l] + after[min(width - 1, l + 1)]
                diff += (a - b) * (a - b)
                size += a * a + b * b
            }
            out[i] = size > 0 ? diff / size : 0
        }
        return out
    }

    /// How well section `a` (blocks) recurs as section `b`: the best mean similarity along a diagonal joining
    /// them (their starts aligned within ±`slack` blocks), over at least half the shorter one; nil when the
    /// lag is outside the band.
    static func sectionMatch(band: LagBand, _ a: Range<Int>, _ b: Range<Int>, slack: Int) -> Double? {
        let base = b.lowerBound - a.lowerBound
        let need = max(1, min(a.count, b.count) / 2)
        var bestScore: Double? = nil
        for lag in (base - slack)...(base + slack) where lag > 0 && lag <= band.maxLag {
            var sum = 0.0, count = 0
            for i in a where b.contains(i + lag) {
                sum += Double(band.at(i, i + lag)!)
                count += 1
            }
            if count >= need { bestScore = max(bestScore ?? -1, sum / Double(count)) }
        }
        return bestScore
    }

    /// Labels of the sections between `cuts` (block indices; 0, 1, … in order of first appearance): a section
    /// takes the label of the first earlier section it repeats (the best diagonal of the lag band joining them,
    /// starts aligned within ±3 s, has a mean similarity ≥ `threshold`; sections farther apart than the band:
    /// their mean features' cosine ≥ 0.6), else the next label. `x`: the standardised blocks.
    static func sectionLabels(x: [[Double]], band: LagBand, cuts: [Int], threshold: Double = 0.5) -> [Int] {
        let edges = [0] + cuts + [x.count]
        let blockRanges = zip(edges, edges.dropFirst()).map { lo, hi in min(lo, x.count - 1)..<max(min(lo, x.count - 1) + 1, hi) }
        let means = blockRanges.map { r -> [Double] in
            var m = [Double](repeating: 0, count: x[0].count)
            for b in r { for d in m.indices { m[d] += x[b][d] } }
            let norm = max(1e-9, m.reduce(0) { $0 + $1 * $1 }.squareRoot())
            return m.map { $0 / norm }
        }
        var labels: [Int] = []
        var next = 0
        for i in blockRanges.indices {
            var label: Int? = nil
            for j in 0..<i {
                let repeats: Bool
                if let match = sectionMatch(band: band, blockRanges[j], blockRanges[i], slack: Int(3 / blockDuration)) {
                    repeats = match >= threshold
                } else {
                    repeats = dot(means[i], means[j]) >= 0.6 && blockRanges[i].lowerBound - blockRanges[j].lowerBound > band.maxLag
                }
                if repeats { label = labels[j]; break }
            }
            if let label { labels.append(label) } else { labels.append(next); next += 1 }
        }
        return labels
    }

    /// Section boundaries inside a piece (block indices) and the curve they come from: peaks (the highest
    /// within ±3 s) of the structure novelty (``structureNovelty(band:neighbours:minLag:window:)``; neighbours:
    /// 3 % of the blocks in reach, at least 3 s away; `window` s either side) reaching `threshold`, strongest
    /// first, `gap` s apart and `edge` s from the ends.
    static func innerBoundaries(unit: [[Double]], band: LagBand, window: Double = 10, threshold: Double = 0.8,
                                gap: Double = 6, edge edgeSeconds: Double = 6) -> (cuts: [Int], curve: [Double]) {
        let bd = blockDuration, n = unit.count
        let reach = min(n - 1, 2 * band.maxLag)
        let k = max(2, Int((0.03 * Double(reach)).rounded()))
        let curve = structureNovelty(band: band, neighbours: k, minLag: Int(3 / bd), window: Int(window / bd))
        let radius = Int(3 / bd), edge = Int(edgeSeconds / bd)
        var candidates: [Int] = []
        for i in curve.indices where i >= edge && i <= n - edge && curve[i] >= threshold {
            if curve[max(0, i - radius)...min(n - 1, i + radius)].max() == curve[i] { candidates.append(i) }
        }
        var chosen: [Int] = []
        for c in candidates.sorted(by: { curve[$0] > curve[$1] }) where !chosen.contains(where: { Double(abs($0 - c)) * bd < gap }) {
            chosen.append(c)
        }
        return (chosen.sorted(), curve)
    }

    /// Local maxima that exceed the mean plus `k` deviations of their ±`radius` neighbourhood,
    /// at least `gap` blocks apart (the stronger wins).
    static func peaks(_ x: [Double], radius: Int, k: Double, gap: Int) -> [Int] {
        var candidates: [Int] = []
        for i in x.indices where x[i] > 0 {
            let lo = max(0, i - radius), hi = min(x.count - 1, i + radius)
            let window = x[lo...hi]
            guard window.max() == x[i] else { continue }
            let m = window.reduce(0, +) / Double(window.count)
            let sd = (window.reduce(0) { $0 + ($1 - m) * ($1 - m) } / Double(window.count)).squareRoot()
            if x[i] > m + k * sd { candidates.append(i) }
        }
        var chosen: [Int] = []
        for i in candidates.sorted(by: { x[$0] > x[$1] }) where !chosen.contains(where: { abs($0 - i) < gap }) {
            chosen.append(i)
        }
        return chosen.sorted()
    }

    /// Sections, segments and phrases of everything appended; `bars` (from ``BeatTracker``) gives phrases.
    public func result(bars: [Double] = [], music: MusicPresence? = nil) -> StructureResult? {
        spectrum.finish { addFrame($0) }
        let duration = spectrum.duration
        if let music, !music.hasMusic {
            return StructureResult(sections: [], segments: [], phrases: [], duration: duration, reason: music.reason)
        }
        // Only the frames inside the music, joined end to end; boundaries are mapped back to the file.
        let selection = music?.selection(count: frames.count, hop: StructureAnalyzer.hop, fftSize: StructureAnalyzer.fftSize,
                                         sampleRate: StructureAnalyzer.sampleRate,
                                         frameRate: StructureAnalyzer.sampleRate / Double(StructureAnalyzer.hop))
        let flux = selection?.pick(self.flux) ?? self.flux
        let x = blocks(selection?.pick(self.frames) ?? self.frames)
        let joinedDuration = selection.map { Double($0.frames.count * StructureAnalyzer.hop) / StructureAnalyzer.sampleRate } ?? duration
        guard x.count >= 8 else { return nil }
        let bd = StructureAnalyzer.blockDuration
        let edge = Int(4 / bd)  // no segment boundary within 4 s of either end
        let unit = StructureAnalyzer.unitVectors(x)
        // Sections inside the piece from its repetitions (structure features), and changes of music (the
        // medley cues above); a change of music wins over an inner boundary within 6 s of it.
        let band = LagBand(unit: unit, maxLag: Int(180 / bd), halfWindow: Int(1.5 / bd))
        let (inner, innerScore) = StructureAnalyzer.innerBoundaries(unit: unit, band: band)
        let changes = StructureAnalyzer.sectionBoundaries(unit: unit, flux: flux)
        var sectionBlocks = changes
        for b in inner where !changes.contains(where: { Double(abs($0 - b)) * bd < 6 }) { sectionBlocks.append(b) }
        sectionBlocks.sort()
        // An inner boundary between two sections that both occur once is dropped (the weakest first, one at a
        // time, labelling again after each): a section inside a song is told by its repeats.
        var labels = StructureAnalyzer.sectionLabels(x: x, band: band, cuts: sectionBlocks)
        while true {
            var counts: [Int: Int] = [:]
            for l in labels { counts[l, default: 0] += 1 }
            let lonely = sectionBlocks.indices.filter { k in
                !changes.contains(sectionBlocks[k]) && counts[labels[k]] == 1 && counts[labels[k + 1]] == 1
            }
            guard let drop = lonely.min(by: { innerScore[sectionBlocks[$0]] < innerScore[sectionBlocks[$1]] }) else { break }
            sectionBlocks.remove(at: drop)
            labels = StructureAnalyzer.sectionLabels(x: x, band: band, cuts: sectionBlocks)
        }
        let sectionCuts = sectionBlocks.map { Double($0) * bd }
        let finer = StructureAnalyzer.peaks(StructureAnalyzer.novelty(unit: unit, halfWidth: Int(3 / bd)), radius: Int(8 / bd), k: 0.5, gap: Int(2 / bd))
            .filter { $0 >= edge && $0 <= x.count - edge }.map { Double($0) * bd }
        let segmentCuts = (finer + sectionCuts)
            .sorted().reduce(into: [Double]()) { out, t in if out.last.map({ t - $0 >= 1.5 }) ?? true { out.append(t) } }
        func ranges(_ cuts: [Double]) -> [StructureRange] {
            let edges = [0] + cuts + [joinedDuration]
            return zip(edges, edges.dropFirst()).map { StructureRange(start: $0, end: $1, label: nil) }
        }
        var sections = ranges(sectionCuts)
        let letters = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
        for i in sections.indices { sections[i].label = labels[i] < letters.count ? String(letters[labels[i]]) : "S\(labels[i])" }
        var segments = ranges(segmentCuts)
        if let selection, let music {
            // Back to file times, cut to the music ranges (a range across a gap in two).
            func toFile(_ r: [StructureRange]) -> [StructureRange] {
                let mapped = r.map { StructureRange(start: selection.fileTime($0.start), end: selection.fileTime($0.end), label: $0.label) }
                return music.clip(mapped, start: \.start, end: \.end) { StructureRange(start: $1, end: $2, label: $0.label) }
            }
            sections = toFile(sections)
            segments = toFile(segments)
        }
        // Section and segment boundaries move to the nearest bar line within half a bar (at most 2 s).
        if bars.count >= 2 {
            let gaps = zip(bars, bars.dropFirst()).map { $1 - $0 }.sorted()
            let reach = min(2, gaps[gaps.count / 2] / 2)
            sections = StructureAnalyzer.snap(sections, to: bars, within: reach)
            segments = StructureAnalyzer.snap(segments, to: bars, within: reach)
        }
        // Phrases: four bars each, restarting at every segment boundary.
        var phrases: [StructureRange] = []
        if bars.count >= 2 {
            for seg in segments {
                let inside = bars.filter { $0 >= seg.start - 0.25 && $0 < seg.end - 0.25 }
                var i = 0
                while i < inside.count {
                    let end = i + 4 < inside.count ? inside[i + 4] : seg.end
                    phrases.append(StructureRange(start: max(seg.start, inside[i]), end: end, label: nil))
                    i += 4
                }
            }
        }
        return StructureResult(sections: sections, segments: segments, phrases: phrases, duration: duration)
    }

    /// `ranges` (back to back) with each inner boundary moved to the nearest of `bars` within `reach` s, when
    /// that keeps both ranges it joins non-empty.
    static func snap(_ ranges: [StructureRange], to bars: [Double], within reach: Double) -> [StructureRange] {
        var out = ranges
        guard out.count >= 2, !bars.isEmpty else { return out }
        for k in 1..<out.count {
            let t = out[k].start
            guard let bar = bars.min(by: { abs($0 - t) < abs($1 - t) }), abs(bar - t) <= reach,
                  bar > out[k - 1].start, bar < out[k].end, out[k - 1].end == t else { continue }
            out[k].start = bar
            out[k - 1].end = bar
        }
        return out
    }

    /// Pairwise label precision, recall and F-measure (Levy & Sandler 2008) over `frame`-s frames up to the
    /// end of the reference: a pair of frames is "same" when their sections share a label; precision is the
    /// share of the estimate's same pairs that are same in the reference. Frames outside every section of
    /// one side get a label of their own there.
    public static func pairwiseLabelF(estimated: [StructureRange], reference: [StructureRange], frame: Double = 0.5)
        -> (precision: Double, recall: Double, f: Double) {
        guard let end = reference.map(\.end).max(), end > 0 else { return (0, 0, 0) }
        func label(_ r: [StructureRange], _ t: Double, _ i: Int) -> String {
            r.first { $0.start <= t && t < $0.end }?.label ?? "frame \(i)"
        }
        var est: [String: Int] = [:], ref: [String: Int] = [:], both: [String: Int] = [:]
        var i = 0
        while Double(i) * frame + frame / 2 < end {
            let t = Double(i) * frame + frame / 2
            let e = label(estimated, t, i), r = label(reference, t, i)
            est[e, default: 0] += 1
            ref[r, default: 0] += 1
            both[e + "\u{1}" + r, default: 0] += 1
            i += 1
        }
        func pairs(_ c: [String: Int]) -> Double { c.values.reduce(0) { $0 + Double($1 * ($1 - 1) / 2) } }
        let same = pairs(both), e = pairs(est), r = pairs(ref)
        let precision = e > 0 ? same / e : 0, recall = r > 0 ? same / r : 0
        return (precision, recall, precision + recall > 0 ? 2 * precision * recall / (precision + recall) : 0)
    }

    /// Boundary hit rate F-measure: an estimated boundary is right within `tolerance` s of an unmatched reference one.
    public static func boundaryF(estimated: [Double], reference: [Double], tolerance: Double = 3) -> Double {
        BeatTracker.fMeasure(estimated: estimated, reference: reference, tolerance: tolerance)
    }
}
