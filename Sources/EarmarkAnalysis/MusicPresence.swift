import Foundation

/// Why key, rhythm, structure and pace found nothing to measure.
public enum NonMusicReason: String, Codable, Sendable {
    /// The audio is silent (or near-silent: dither, faint hiss) throughout.
    case silence
    /// The audio holds sound, mostly speech, but no music.
    case speech
    /// The audio holds sound, but neither music nor mostly speech (noise, crowds, machines).
    case noMusic = "no music"
}

/// A stretch of a file, in seconds, where music plays.
public struct MusicRange: Codable, Sendable, Equatable {
    public var start: Double
    public var end: Double
    public init(start: Double, end: Double) {
        self.start = start
        self.end = end
    }
    public var duration: Double { end - start }
}

/// One window (about a second) of evidence about whether music plays.
public struct MusicEvidence: Sendable, Equatable {
    public var start: Double
    public var end: Double
    /// RMS level of the window's mono audio in dBFS (a full-scale sine is −3).
    public var level: Double
    /// The sound classifier's music score (its best music label, 0…1); nil without a classifier.
    public var music: Double?
    /// The sound classifier's speech score (its best speech label, 0…1); nil without a classifier.
    public var speech: Double?

    public init(start: Double, end: Double, level: Double, music: Double? = nil, speech: Double? = nil) {
        self.start = start
        self.end = end
        self.level = level
        self.music = music
        self.speech = speech
    }
}

/// Where a file holds music: key, rhythm, structure and pace are measured only inside ``ranges``.
///
/// A window is silent below ``silenceLevel`` dBFS (the sound classifier's threshold for silence). With
/// the sound classifier's scores a window is music when its best music label reaches ``musicOnset`` and
/// stays music while it holds ``musicOffset``; without them every window that is not silent counts as
/// music (only silence is told apart). Ranges closer than ``bridge`` seconds are joined and ranges shorter
/// than ``minimumDuration`` dropped; music up to the last whole window lasts to the end of the file (a
/// last part-window, padded by the classifier, is not trusted). With no range left, ``reason`` says why: silence when under
/// ``minimumDuration`` seconds of the file is louder than silence, speech when most of the sound is
/// speech (speech score at least 0.5), else no music.
public struct MusicPresence: Codable, Sendable, Equatable {
    public static let kind = "music"
    public static let version = 1

    /// Where music plays, in time order; empty when there is none.
    public var ranges: [MusicRange]
    /// Why there is no music; nil when ``ranges`` is not empty.
    public var reason: NonMusicReason?
    /// What told music apart: `classifier` (the sound classifier's music and speech scores and the
    /// level) or `level` (the level alone: only silence is found).
    public var method: String
    public var duration: Double

    /// RMS level (dBFS) under which a window is silent: the sound classifier's own threshold
    /// (`SoundCategory.silenceLevel`). Dither at −90 dBFS and a quiet room's hiss fall under it; the
    /// quietest bars of the test set's music stay 20 dB above it.
    public static let silenceLevel = -55.0
    /// Music score at which a music range starts and under which it ends (hysteresis).
    public static let musicOnset = 0.3, musicOffset = 0.15
    /// Gaps up to this many seconds inside music are bridged (a breath, a pause, a spoken word).
    public static let bridge = 3.0
    /// Music ranges shorter than this many seconds are dropped: too short for a key or a tempo.
    public static let minimumDuration = 4.0

    /// Music everywhere: what analysis measured before music was told apart.
    public static func whole(duration: Double) -> MusicPresence {
        MusicPresence(ranges: duration > 0 ? [MusicRange(start: 0, end: duration)] : [], reason: duration > 0 ? nil : .silence,
                      method: "none", duration: duration)
    }

    public init(ranges: [MusicRange], reason: NonMusicReason?, method: String, duration: Double) {
        self.ranges = ranges
        self.reason = reason
        self.method = method
        self.duration = duration
    }

    /// Music ranges from time-ordered windows of evidence covering `duration` seconds.
    public init(evidence: [MusicEvidence], duration: Double) {
        let classified = !evidence.isEmpty && evidence.allSatisfy { $0.music != nil }
        method = classified ? "classifier" : "level"
        self.duration = duration
        // Per window: 1 music, 0 not (without a classifier: sound is music).
        // A last window shorter than the others, or running past the end, was padded (the classifier's): the one
        // before it speaks for the tail.
        var whole = evidence[...]
        if evidence.count > 1, let last = evidence.last {
            let before = evidence[evidence.count - 2]
            if last.end > duration + 1e-6 || last.end - last.start < 0.99 * (before.end - before.start) { whole = evidence.dropLast() }
        }
        let values = whole.map { w -> (start: Double, end: Double, value: Double) in
            let loud = w.level >= MusicPresence.silenceLevel
            return (w.start, min(w.end, duration), loud ? (classified ? w.music ?? 0 : 1) : 0)
        }
        var open: MusicRange?
        var raw: [MusicRange] = []
        for v in values {
            if var r = open {
                if v.value >= MusicPresence.musicOffset {
                    r.end = v.end
                    open = r
                } else {
                    raw.append(r)
                    open = nil
                }
            } else if v.value >= MusicPresence.musicOnset {
                open = MusicRange(start: v.start, end: v.end)
            }
        }
        if var r = open {
            // The classifier leaves the file's last part-window out: music to the last window plays to the end.
            if let last = values.last, r.end >= last.end, duration - r.end < 1 { r.end = duration }
            raw.append(r)
        }
        var merged: [MusicRange] = []
        for r in raw {
            if let last = merged.last, r.start - last.end <= MusicPresence.bridge {
                merged[merged.count - 1].end = max(last.end, r.end)
            } else {
                merged.append(r)
            }
        }
        ranges = merged.filter { $0.duration >= MusicPresence.minimumDuration }
        if !ranges.isEmpty {
            reason = nil
            return
        }
        let loud = evidence.filter { $0.level >= MusicPresence.silenceLevel }
        let loudSeconds = loud.reduce(0) { $0 + ($1.end - $1.start) }
        if loudSeconds < MusicPresence.minimumDuration {
            reason = .silence
        } else if classified, 2 * loud.filter({ ($0.speech ?? 0) >= 0.5 }).count > loud.count {
            reason = .speech
        } else {
            reason = .noMusic
        }
    }

    /// Whether any music was found.
    public var hasMusic: Bool { !ranges.isEmpty }

    /// Whether the ranges cover the whole file (nothing to leave out).
    public var coversAll: Bool {
        ranges.count == 1 && ranges[0].start <= 0 && ranges[0].end >= duration
    }

    /// The frames of an analysis (frame `i` centred at `centre(i)` seconds) that lie inside the ranges.
    func frames(count: Int, centre: (Int) -> Double) -> [Int] {
        var out: [Int] = []
        var r = 0
        for i in 0..<count {
            let t = centre(i)
            while r < ranges.count, ranges[r].end <= t { r += 1 }
            if r < ranges.count, t >= ranges[r].start { out.append(i) }
        }
        return out
    }

    /// The frames inside the ranges of an analysis of `count` frames, `fftSize` samples every `hop` at
    /// `sampleRate` (`frameRate` frames a second), as a ``FrameSelection``; nil when the music covers the file.
    func selection(count: Int, hop: Int, fftSize: Int, sampleRate: Double, frameRate: Double) -> FrameSelection? {
        coversAll ? nil : FrameSelection(frames: frames(count: count) { (Double($0 * hop) + Double(fftSize) / 2) / sampleRate },
                                         frameRate: frameRate)
    }

    /// `items` (time ranges in file seconds, in order) cut to the music ranges: parts outside them are
    /// dropped, an item across a gap is split in two.
    func clip<T>(_ items: [T], start: (T) -> Double, end: (T) -> Double, make: (T, Double, Double) -> T) -> [T] {
        var out: [T] = []
        for item in items {
            for r in ranges {
                let s = max(start(item), r.start), e = min(end(item), r.end)
                if e - s > 1e-9 { out.append(make(item, s, e)) }
            }
        }
        return out
    }
}

/// Frames of an analysis kept for music, joined end to end: maps times on the joined frames back to the file.
struct FrameSelection {
    /// The file frame of each joined frame.
    let frames: [Int]
    /// Frames a second.
    let frameRate: Double

    /// The file time of `t` seconds on the joined frames: shifted by as many frames as were left out before it.
    func fileTime(_ t: Double) -> Double {
        guard !frames.isEmpty else { return t }
        let j = min(frames.count - 1, max(0, Int((t * frameRate).rounded(.down))))
        return t + Double(frames[j] - j) / frameRate
    }

    /// The elements of `values` (one per frame, `stride` numbers each) at the kept frames.
    func pick<T>(_ values: [T], stride: Int = 1) -> [T] {
        var out: [T] = []
        out.reserveCapacity(frames.count * stride)
        for f in frames where (f + 1) * stride <= values.count { out += values[(f * stride)..<((f + 1) * stride)] }
        return out
    }
}

/// RMS level of mono audio over back-to-back windows (0.96 s, as the sound classifier's): the level
/// evidence of ``MusicPresence`` when no classifier runs.
public final class LevelWindows {
    public static let windowDuration = 0.96
    private let windowLength: Int
    private let sampleRate: Double
    private var sum = 0.0
    private var count = 0
    private var levels: [Double] = []

    public init(sampleRate: Double) {
        self.sampleRate = sampleRate
        windowLength = max(1, Int((LevelWindows.windowDuration * sampleRate).rounded()))
    }

    public func append(_ samples: [Float]) {
        samples.withUnsafeBufferPointer { p in
            for s in p {
                sum += Double(s) * Double(s)
                count += 1
                if count == windowLength { close() }
            }
        }
    }

    private func close() {
        levels.append(max(-120, 10 * log10(sum / Double(max(1, count)) + 1e-30)))
        sum = 0
        count = 0
    }

    /// The windows so far, a last partial window included (when at least a tenth of a window long).
    public func evidence() -> [MusicEvidence] {
        var all = levels
        if count >= windowLength / 10, count > 0 { all.append(max(-120, 10 * log10(sum / Double(count) + 1e-30))) }
        let step = Double(windowLength) / sampleRate
        return all.enumerated().map { i, level in
            MusicEvidence(start: Double(i) * step, end: Double(i + 1) * step, level: level)
        }
    }
}
