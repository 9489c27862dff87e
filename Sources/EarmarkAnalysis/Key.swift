import EarmarkAudio
import EarmarkDSP
import Foundation

/// A musical key: tonic pitch class with its spelling, and mode.
public struct MusicalKey: Codable, Sendable, Equatable, Hashable, CustomStringConvertible {
    public enum Mode: String, Codable, Sendable { case major, minor }
    /// Pitch class of the tonic, 0 = C … 11 = B.
    public var pitchClass: Int
    public var mode: Mode

    public init(pitchClass: Int, mode: Mode) {
        self.pitchClass = ((pitchClass % 12) + 12) % 12
        self.mode = mode
    }

    /// The tonic as spelled in the usual key signature (one of Apple's 17 spellings): flats for
    /// F, Bb, Eb, Ab, Db major and their relative minors, sharps otherwise (F# major, Eb minor).
    public var tonic: String {
        let major = ["C", "Db", "D", "Eb", "E", "F", "F#", "G", "Ab", "A", "Bb", "B"]
        let minor = ["C", "C#", "D", "Eb", "E", "F", "F#", "G", "G#", "A", "Bb", "B"]
        return mode == .major ? major[pitchClass] : minor[pitchClass]
    }

    public var description: String { "\(tonic) \(mode.rawValue)" }

    /// Parses "C#", "Db", "Bb" … (any of the 17 spellings, also "B#", "Cb", "E#", "Fb") to a pitch class.
    public static func pitchClass(of spelling: String) -> Int? {
        guard let letter = spelling.first, let base = ["C": 0, "D": 2, "E": 4, "F": 5, "G": 7, "A": 9, "B": 11][String(letter).uppercased()] else {
            return nil
        }
        var pc = base
        for c in spelling.dropFirst() {
            switch c {
            case "#", "♯": pc += 1
            case "b", "♭", "-": pc -= 1
            default: return nil
            }
        }
        return ((pc % 12) + 12) % 12
    }

    /// The MIREX key-detection score of `self` as an estimate of `truth`: 1 same key, 0.5 a perfect fifth
    /// away in the same mode, 0.3 relative major/minor, 0.2 parallel major/minor, else 0.
    public func mirexScore(against truth: MusicalKey) -> Double {
        if self == truth { return 1 }
        if mode == truth.mode, (pitchClass - truth.pitchClass + 12) % 12 == 7 || (truth.pitchClass - pitchClass + 12) % 12 == 7 { return 0.5 }
        if mode != truth.mode {
            let relative = truth.mode == .major ? (truth.pitchClass + 9) % 12 : (truth.pitchClass + 3) % 12
            if pitchClass == relative { return 0.3 }
            if pitchClass == truth.pitchClass { return 0.2 }
        }
        return 0
    }
}

/// A key over a time range.
public struct KeyRange: Codable, Sendable, Equatable {
    public var start: Double
    public var end: Double
    public var tonic: String
    public var mode: MusicalKey.Mode
}

/// Key analysis of a piece: the overall key and the keys over time (modulations).
public struct KeyResult: Codable, Sendable, Equatable {
    public static let kind = "key"
    public static let version = 1

    public var tonic: String
    public var mode: MusicalKey.Mode
    /// Correlation of the piece's chroma with the chosen key profile (−1…1), and the margin over the runner-up.
    public var strength: Double
    public var margin: Double
    public var ranges: [KeyRange]
    public var duration: Double

    public var key: MusicalKey { MusicalKey(pitchClass: MusicalKey.pitchClass(of: tonic) ?? 0, mode: mode) }
}

/// Estimates the key from a chromagram: 44.1 kHz mono in, an FFT chroma (log-compressed spectral
/// peaks folded onto pitch classes, tuning estimated from the peaks), correlated with major and minor
/// key profiles; over time, windowed key scores decoded with a switching penalty (Viterbi) give the
/// key ranges. Feed audio with ``append(_:)``, then call ``result()``.
public final class KeyDetector {
    public static let sampleRate = 11_025.0
    static let fftSize = 4096
    static let hop = 2048
    /// Pitch range folded into the chroma, MIDI notes (A1 … C7).
    static let lowestNote = 33.0, highestNote = 96.0

    private let spectrum: FramedSpectrum
    /// Per frame: the spectral peaks (fractional MIDI note, log magnitude).
    private var allPeaks: [[(note: Double, weight: Double)]] = []

    public init(inputRate: Double = AudioConstants.sampleRate) throws {
        spectrum = try FramedSpectrum(inputRate: inputRate, sampleRate: KeyDetector.sampleRate, fftSize: KeyDetector.fftSize,
                                      hop: KeyDetector.hop)
    }

    /// Appends mono samples at the rate given to `init`.
    public func append(_ samples: [Float]) {
        spectrum.append(samples) { addFrame($0) }
    }

    private func addFrame(_ power: [Float]) {
        let n = KeyDetector.fftSize
        let binHz = KeyDetector.sampleRate / Double(n)
        let lowBin = Int(440 * pow(2, (KeyDetector.lowestNote - 69) / 12) / binHz)
        let highBin = min(n / 2 - 1, Int(440 * pow(2, (KeyDetector.highestNote - 69) / 12) / binHz) + 1)
        var peaks: [(Double, Double)] = []
        for k in max(1, lowBin)...highBin where power[k] > power[k - 1] && power[k] >= power[k + 1] && power[k] > 1e-10 {
            // Parabolic interpolation of the peak on log power gives its frequency within a fraction of a bin.
            let a = log(Double(power[k - 1]) + 1e-20), b = log(Double(power[k]) + 1e-20), c = log(Double(power[k + 1]) + 1e-20)
            let denom = a - 2 * b + c
            let delta = denom < 0 ? 0.5 * (a - c) / denom : 0
            let f = (Double(k) + delta) * binHz
            let note = 69 + 12 * log2(f / 440)
            guard note >= KeyDetector.lowestNote, note <= KeyDetector.highestNote else { continue }
            peaks.append((note, Double(power[k])))
        }
        // Keep the strong peaks only (within 40 dB of the frame's strongest): noise adds no pitch.
        let strongest = peaks.map(\.1).max() ?? 0
        allPeaks.append(peaks.filter { $0.1 >= strongest * 1e-4 }.map { (note: $0.0, weight: log1p($0.1 / max(strongest, 1e-20) * 1e4)) })
    }

    /// How much the bass of the last 3 s (the share of frames on each pitch class) adds to the keys with that tonic.
    static let endingWeight = 0.3

    /// Below this correlation with the best key profile the audio has no key.
    public static let minimumStrength = 0.42

    /// Major and minor key profiles (Albrecht & Shanahan 2013, from a corpus of classical pieces), tonic first.
    static let majorProfile: [Double] = [0.238, 0.006, 0.111, 0.006, 0.137, 0.094, 0.016, 0.214, 0.009, 0.080, 0.008, 0.081]
    static let minorProfile: [Double] = [0.220, 0.006, 0.104, 0.123, 0.019, 0.103, 0.012, 0.214, 0.062, 0.022, 0.061, 0.052]

    /// Pearson correlation of a chroma vector with the 24 keys' profiles (0–11 major C…B, 12–23 minor).
    static func keyScores(_ chroma: [Double]) -> [Double] {
        func correlation(_ x: [Double], _ y: [Double]) -> Double {
            let mx = x.reduce(0, +) / 12, my = y.reduce(0, +) / 12
            var sxy = 0.0, sxx = 0.0, syy = 0.0
            for i in 0..<12 {
                sxy += (x[i] - mx) * (y[i] - my)
                sxx += (x[i] - mx) * (x[i] - mx)
                syy += (y[i] - my) * (y[i] - my)
            }
            return sxx > 0 && syy > 0 ? sxy / (sxx * syy).squareRoot() : 0
        }
        var out: [Double] = []
        for profile in [majorProfile, minorProfile] {
            for tonic in 0..<12 {
                let rotated = (0..<12).map { profile[(($0 - tonic) % 12 + 12) % 12] }
                out.append(correlation(chroma, rotated))
            }
        }
        return out
    }

    /// The global tuning offset in semitones (−0.5…0.5): the circular mean of the peaks' deviations from equal temperament.
    private static func tuning(_ framePeaks: [[(note: Double, weight: Double)]]) -> Double {
        var x = 0.0, y = 0.0
        for frame in framePeaks {
            for p in frame {
                let angle = 2 * Double.pi * (p.note - p.note.rounded())
                x += p.weight * cos(angle)
                y += p.weight * sin(angle)
            }
        }
        return x == 0 && y == 0 ? 0 : atan2(y, x) / (2 * Double.pi)
    }

    /// Pitch-class profile of `frames`: each frame's peaks are gathered on semitones (less the farther
    /// from one), a semitone's salience sums its own level and its first harmonics' (subharmonic
    /// summation), and a salience counts only where it beats those an octave and a twelfth below, so
    /// a note's overtones (its fifth above all) do not pose as notes of their own.
    private static func chroma(_ framePeaks: [[(note: Double, weight: Double)]], frames: Range<Int>, tuning: Double) -> [Double] {
        var c = [Double](repeating: 0, count: 12)
        let harmonics = [(0, 1.0), (12, 0.6), (19, 0.4), (24, 0.3), (28, 0.2)]
        var bins = [Double](repeating: 0, count: 128), salience = [Double](repeating: 0, count: 128)
        for f in frames {
            for i in bins.indices { bins[i] = 0 }
            for p in framePeaks[f] {
                let note = p.note - tuning
                let nearest = note.rounded()
                if nearest >= 0, nearest < 128 { bins[Int(nearest)] += p.weight * max(0, 1 - 2 * abs(note - nearest)) }
            }
            for f0 in 24..<100 {
                var v = 0.0
                for (offset, weight) in harmonics where f0 + offset < 128 { v += weight * bins[f0 + offset] }
                salience[f0] = v
            }
            for f0 in 24..<100 where salience[f0] > 0.5 * max(salience[f0 - 12], salience[f0 - 19]) {
                c[f0 % 12] += salience[f0]
            }
        }
        return c
    }

    /// The key of everything appended, and the key ranges over time. With `music`, only its ranges
    /// count (joined end to end; key ranges are cut to them) and there is no key without music.
    public func result(music: MusicPresence? = nil) -> KeyResult? {
        spectrum.finish { addFrame($0) }
        let duration = spectrum.duration
        if let music, !music.hasMusic { return nil }
        let frameSeconds = Double(KeyDetector.hop) / KeyDetector.sampleRate
        // Only the frames inside the music, joined end to end; times are mapped back to the file.
        let selection = music?.selection(count: allPeaks.count, hop: KeyDetector.hop, fftSize: KeyDetector.fftSize,
                                         sampleRate: KeyDetector.sampleRate, frameRate: 1 / frameSeconds)
        let framePeaks = selection.map { $0.pick(allPeaks) } ?? allPeaks
        guard !framePeaks.isEmpty else { return nil }
        let t = KeyDetector.tuning(framePeaks)
        let global = KeyDetector.chroma(framePeaks, frames: 0..<framePeaks.count, tuning: t)
        guard global.reduce(0, +) > 0 else { return nil }
        let correlations = KeyDetector.keyScores(global)
        var scores = correlations
        let endWeight = KeyDetector.endingWeight
        if endWeight > 0 {
            // Tonal pieces end on their tonic: the bass (lowest strong pitch class) of the last 3 s adds to the keys on it.
            let tail = max(0, framePeaks.count - Int(3 / frameSeconds))..<framePeaks.count
            var bass = [Double](repeating: 0, count: 12)
            for f in tail {
                guard let low = framePeaks[f].filter({ $0.weight > 0.5 * (framePeaks[f].map(\.weight).max() ?? 0) }).min(by: { $0.note < $1.note }) else { continue }
                bass[((Int((low.note - t).rounded()) % 12) + 12) % 12] += 1
            }
            let total = bass.reduce(0, +)
            if total > 0 { for k in 0..<24 { scores[k] += endWeight * bass[k % 12] / total } }
        }
        let order = scores.indices.sorted { scores[$0] > scores[$1] }
        let best = order[0]
        // Speech, noise and unpitched percussion fit no key profile well: no key rather than a guess.
        guard correlations[best] >= KeyDetector.minimumStrength else { return nil }
        let key = MusicalKey(pitchClass: best % 12, mode: best < 12 ? .major : .minor)

        // Key over time: 8-s windows every 2 s, Viterbi over the 24 keys with a penalty for changing.
        let windowFrames = max(1, Int(8 / frameSeconds)), stepFrames = max(1, Int(2 / frameSeconds))
        var windowScores: [[Double]] = []
        var starts: [Int] = []
        var s = 0
        repeat {
            let range = s..<min(framePeaks.count, s + windowFrames)
            let c = KeyDetector.chroma(framePeaks, frames: range, tuning: t)
            windowScores.append(c.reduce(0, +) > 0 ? KeyDetector.keyScores(c) : scores)
            starts.append(s)
            s += stepFrames
        } while s + windowFrames / 2 < framePeaks.count
        let path = KeyDetector.viterbi(windowScores, prior: scores, switchPenalty: 0.6)
        var ranges: [KeyRange] = []
        for (i, k) in path.enumerated() {
            let joined = i == 0 ? 0 : (Double(starts[i]) + Double(windowFrames) / 2 - Double(stepFrames) / 2) * frameSeconds
            let start = selection?.fileTime(joined) ?? joined
            let mk = MusicalKey(pitchClass: k % 12, mode: k < 12 ? .major : .minor)
            if let last = ranges.last, last.tonic == mk.tonic, last.mode == mk.mode { continue }
            if !ranges.isEmpty { ranges[ranges.count - 1].end = start }
            ranges.append(KeyRange(start: start, end: duration, tonic: mk.tonic, mode: mk.mode))
        }
        if selection != nil, let music {
            ranges = music.clip(ranges, start: \.start, end: \.end) { r, s, e in KeyRange(start: s, end: e, tonic: r.tonic, mode: r.mode) }
        }
        return KeyResult(tonic: key.tonic, mode: key.mode, strength: correlations[best], margin: scores[best] - scores[order[1]],
                         ranges: ranges, duration: duration)
    }

    /// The most likely key sequence: per-window correlations as scores, a constant penalty per change,
    /// and a tenth of the global key scores as a prior on every window.
    static func viterbi(_ windows: [[Double]], prior: [Double], switchPenalty: Double) -> [Int] {
        guard !windows.isEmpty else { return [] }
        var score = windows[0].enumerated().map { $0.element + 0.1 * prior[$0.offset] }
        var back: [[Int]] = []
        for w in windows.dropFirst() {
            let bestPrev = score.indices.max { score[$0] < score[$1] }!
            var next = [Double](repeating: 0, count: 24)
            var from = [Int](repeating: 0, count: 24)
            for k in 0..<24 {
                let stay = score[k], change = score[bestPrev] - switchPenalty
                (next[k], from[k]) = stay >= change ? (stay, k) : (change, bestPrev)
                next[k] += w[k] + 0.1 * prior[k]
            }
            back.append(from)
            score = next
        }
        var k = score.indices.max { score[$0] < score[$1] }!
        var path = [k]
        for b in back.reversed() {
            k = b[k]
            path.append(k)
        }
        return path.reversed()
    }

    /// Reads a file (any rate and channel count) and returns its key.
    public static func analyze(path: String) throws -> KeyResult? {
        let reader = try MultichannelFileReader(path: path)
        let detector = try KeyDetector(inputRate: reader.sampleRate)
        while let b = try reader.next() { detector.append(b.mono) }
        return detector.result()
    }
}
