import EarmarkAudio
import EarmarkDSP
import Foundation

/// A labelled stretch of a piece.
public struct StructureRange: Codable, Sendable, Equatable {
    public var start: Double
    public var end: Double
    /// Sections that sound alike share a label (A, B, C …); segments and phrases have none.
    public var label: String?
}

/// Structure of a piece (Music Understanding's dimension): sections (large parts, labelled by
/// similarity), segments (finer changes) and phrases (groups of four bars inside segments, when the
/// bars are known).
public struct StructureResult: Codable, Sendable, Equatable {
    public static let kind = "structure"
    public static let version = 1

    public var sections: [StructureRange]
    public var segments: [StructureRange]
    public var phrases: [StructureRange]
    public var duration: Double
}

/// Finds structure from the self-similarity of 0.46-s feature blocks (12 pitch classes and 20 log band
/// energies, each standardised; cosine similarity near the diagonal): Foote's checkerboard novelty with
/// a wide kernel (±16 s) gives section boundaries, a narrow one (±3 s) segment boundaries. A boundary is
/// a novelty peak that stands out from its ±8 s neighbourhood (mean + 0.5 deviations) and, for
/// sections, from the whole piece (mean + 0.5 deviations); sections are at least 8 s apart.
public final class StructureAnalyzer {
    static let sampleRate = 11_025.0
    static let fftSize = 2048
    static let hop = 1024
    /// Frames per feature block (5 × 1024 samples at 11,025 Hz ≈ 0.46 s).
    static let framesPerBlock = 5
    /// Seconds per feature block.
    public static var blockDuration: Double { Double(framesPerBlock * hop) / sampleRate }
    static let bands = 20

    private let spectrum: FramedSpectrum
    private var frames: [[Double]] = []
    private let pitchClassOfBin: [Int]
    private let bandOfBin: [Int]

    public init(inputRate: Double = AudioConstants.sampleRate) throws {
        spectrum = try FramedSpectrum(inputRate: inputRate, sampleRate: StructureAnalyzer.sampleRate,
                                      fftSize: StructureAnalyzer.fftSize, hop: StructureAnalyzer.hop)
        let n = StructureAnalyzer.fftSize
        let binHz = StructureAnalyzer.sampleRate / Double(n)
        pitchClassOfBin = (0...(n / 2)).map { k in
            let f = Double(k) * binHz
            guard f >= 55, f <= 2_000 else { return -1 }
            return ((Int((69 + 12 * log2(f / 440)).rounded()) % 12) + 12) % 12
        }
        bandOfBin = (0...(n / 2)).map { k in
            let f = max(1, Double(k) * binHz)
            guard f >= 40, f < 5_000 else { return -1 }
            return min(StructureAnalyzer.bands - 1, Int(Double(StructureAnalyzer.bands) * log(f / 40) / log(5_000.0 / 40)))
        }
    }

    public func append(_ samples: [Float]) { spectrum.append(samples) { addFrame($0) } }

    private func addFrame(_ power: [Float]) {
        let n = StructureAnalyzer.fftSize
        var v = [Double](repeating: 0, count: 12 + StructureAnalyzer.bands)
        for k in 0...(n / 2) {
            let p = Double(power[k])
            if pitchClassOfBin[k] >= 0 { v[pitchClassOfBin[k]] += p.squareRoot() }
            if bandOfBin[k] >= 0 { v[12 + bandOfBin[k]] += p }
        }
        let chromaSum = v[0..<12].reduce(0, +)
        for i in 0..<12 { v[i] = chromaSum > 0 ? v[i] / chromaSum : 0 }
        for i in 12..<v.count { v[i] = log10(1e-10 + v[i]) }
        frames.append(v)
    }

    /// Half-second blocks of the frame features, each dimension standardised over the piece.
    private func blocks() -> [[Double]] {
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

    /// Foote novelty on the cosine self-similarity of the blocks: a Gaussian-tapered checkerboard kernel
    /// of half-width `w` blocks slid along the diagonal. Similarities are computed inside the kernel's band
    /// only, so memory stays linear in the length of the piece.
    static func novelty(_ x: [[Double]], halfWidth w: Int) -> [Double] {
        let n = x.count
        let unit = x.map { v -> [Double] in
            let norm = max(1e-9, v.reduce(0) { $0 + $1 * $1 }.squareRoot())
            return v.map { $0 / norm }
        }
        func sim(_ i: Int, _ j: Int) -> Double {
            var dot = 0.0
            for d in unit[i].indices { dot += unit[i][d] * unit[j][d] }
            return dot
        }
        let taper = (-w..<w).map { exp(-0.5 * pow((Double($0) + 0.5) / (0.5 * Double(w)), 2)) }
        var out = [Double](repeating: 0, count: n)
        for c in 0..<n {
            var sum = 0.0, weight = 0.0
            for a in -w..<w where c + a >= 0 && c + a < n {
                for b in a..<w where c + b >= 0 && c + b < n {
                    let sign: Double = (a < 0) == (b < 0) ? 1 : -1
                    let g = taper[a + w] * taper[b + w] * (a == b ? 1 : 2)   // the matrix is symmetric
                    sum += sign * g * sim(c + a, c + b)
                    weight += g
                }
            }
            out[c] = weight > 0 ? max(0, sum / weight) : 0
        }
        return out
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
    public func result(bars: [Double] = []) -> StructureResult? {
        spectrum.finish { addFrame($0) }
        let duration = spectrum.duration
        let x = blocks()
        guard x.count >= 8 else { return nil }
        let bd = StructureAnalyzer.blockDuration
        let edge = Int(4 / bd)  // no boundary within 4 s of either end
        func boundaries(halfWidth: Int, gap: Int, global: Double) -> [Double] {
            let nov = StructureAnalyzer.novelty(x, halfWidth: halfWidth)
            let m = nov.reduce(0, +) / Double(nov.count)
            let sd = (nov.reduce(0) { $0 + ($1 - m) * ($1 - m) } / Double(nov.count)).squareRoot()
            return StructureAnalyzer.peaks(nov, radius: Int(8 / bd), k: 0.5, gap: gap)
                .filter { $0 >= edge && $0 <= x.count - edge && nov[$0] >= m + global * sd }.map { Double($0) * bd }
        }
        let sectionCuts = boundaries(halfWidth: Int(16 / bd), gap: Int(8 / bd), global: 0.5)
        let segmentCuts = (boundaries(halfWidth: Int(3 / bd), gap: Int(2 / bd), global: 0) + sectionCuts)
            .sorted().reduce(into: [Double]()) { out, t in if out.last.map({ t - $0 >= 1.5 }) ?? true { out.append(t) } }
        func ranges(_ cuts: [Double]) -> [StructureRange] {
            let edges = [0] + cuts + [duration]
            return zip(edges, edges.dropFirst()).map { StructureRange(start: $0, end: $1, label: nil) }
        }
        var sections = ranges(sectionCuts)
        // Label sections by similarity of their mean features: a section joins the first earlier label
        // whose mean it matches with cosine ≥ 0.6, else gets the next letter.
        var means: [[Double]] = []
        var labels: [Int] = []
        for (i, r) in sections.enumerated() {
            let lo = min(x.count - 1, Int(r.start / bd)), hi = max(lo + 1, min(x.count, Int(r.end / bd)))
            var m = [Double](repeating: 0, count: x[0].count)
            for b in lo..<hi { for d in m.indices { m[d] += x[b][d] } }
            let norm = max(1e-9, m.reduce(0) { $0 + $1 * $1 }.squareRoot())
            m = m.map { $0 / norm }
            var label = means.count
            for (j, other) in means.enumerated() where zip(m, other).reduce(0, { $0 + $1.0 * $1.1 }) >= 0.6 {
                label = labels[j]
                break
            }
            means.append(m)
            labels.append(label)
            let letters = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
            sections[i].label = label < letters.count ? String(letters[label]) : "S\(label)"
        }
        let segments = ranges(segmentCuts)
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

    /// Boundary hit rate F-measure: an estimated boundary is right within `tolerance` s of an unmatched reference one.
    public static func boundaryF(estimated: [Double], reference: [Double], tolerance: Double = 3) -> Double {
        BeatTracker.fMeasure(estimated: estimated, reference: reference, tolerance: tolerance)
    }
}
