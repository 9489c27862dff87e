import EarmarkAudio
import Foundation

/// A time range in seconds.
public struct TimeRange: Codable, Sendable, Equatable {
    public var start: Double
    public var end: Double
    public init(start: Double, end: Double) {
        self.start = start
        self.end = end
    }
    public var duration: Double { end - start }
}

/// The broad kind of sound a window holds, from its leading label.
public enum SoundCategory: String, Codable, Sendable, CaseIterable {
    case speech, music, silence, other

    /// Maps each label of `model` to a category. AudioSet models (YAMNet's label order): speech is
    /// Speech … Speech synthesizer (0–5), music is the singing classes (24–32) and the whole Music
    /// subtree (132–276), silence is Silence (494). Other models: labels named speech, music or silence.
    public static func table(for model: SoundModel) -> [SoundCategory] {
        let labels = model.labels
        if labels.count == 521, labels[0].mid == "/m/09x0r", labels[132].mid == "/m/04rlf", labels[494].mid == "/m/028v0c" {
            return labels.indices.map { i in
                switch i {
                case 0...5: .speech
                case 24...32, 132...276: .music
                case 494: .silence
                default: .other
                }
            }
        }
        return labels.map { SoundCategory(rawValue: $0.name.lowercased()) ?? .other }
    }

    /// Windows quieter than this (RMS, dBFS) are silence whatever their leading label: YAMNet names
    /// faint hiss or dither "White noise" or "Static", which is not what a listener hears.
    public static let silenceLevel = -55.0

    /// The category of `window`: silence below ``silenceLevel``, else its leading label's (`table` from ``table(for:)``).
    public static func of(_ window: SoundWindow, table: [SoundCategory]) -> SoundCategory? {
        if window.level < silenceLevel { return .silence }
        guard let top = window.scores.indices.max(by: { window.scores[$0] < window.scores[$1] }) else { return nil }
        return table[top]
    }
}

/// How much of the audio a label leads.
public struct LabelShare: Codable, Sendable, Equatable {
    public var label: String
    public var identifier: String
    /// Fraction of windows whose best label this is.
    public var share: Double
    /// Mean confidence of the label over those windows.
    public var meanConfidence: Double
}

/// What a stretch of audio holds: its dominant labels and where speech is.
public struct SoundSummary: Codable, Sendable, Equatable {
    /// Labels leading at least one window, most windows first (at most 5).
    public var dominant: [LabelShare]
    /// Time ranges with speech (see ``SpeechActivity``).
    public var speech: [TimeRange]
    /// Fraction of the audio inside `speech`.
    public var speechShare: Double
    /// Fraction of windows in each category (see ``SoundCategory/of(_:table:)``).
    public var categoryShares: [String: Double]
    /// Seconds classified.
    public var duration: Double

    public init(windows: [SoundWindow], duration: Double, speechDetector: SpeechActivity) {
        var count: [String: (n: Int, sum: Double, label: LabelConfidence)] = [:]
        for w in windows {
            guard let top = w.labels.first else { continue }
            let old = count[top.identifier] ?? (0, 0, top)
            count[top.identifier] = (old.n + 1, old.sum + top.confidence, top)
        }
        let total = Double(max(1, windows.count))
        dominant = count.sorted { $0.value.n > $1.value.n || ($0.value.n == $1.value.n && $0.key < $1.key) }.prefix(5).map {
            LabelShare(label: $0.value.label.label, identifier: $0.value.label.identifier,
                       share: Double($0.value.n) / total, meanConfidence: $0.value.sum / Double($0.value.n))
        }
        let table = SoundCategory.table(for: speechDetector.model)
        var counts: [String: Int] = [:]
        for w in windows {
            guard let category = SoundCategory.of(w, table: table) else { continue }
            counts[category.rawValue, default: 0] += 1
        }
        categoryShares = counts.mapValues { Double($0) / total }
        speech = speechDetector.ranges(windows)
        self.duration = duration
        speechShare = duration > 0 ? min(1, speech.reduce(0) { $0 + $1.duration } / duration) : 0
    }
}

/// Speech activity from the classifier's speech labels: a window is speech when the best of those
/// labels' scores reaches `onset`, and stays speech until it falls below `offset` (hysteresis).
/// Ranges closer than `bridge` seconds are joined and ranges shorter than `minimumDuration` dropped.
public struct SpeechActivity: Sendable {
    /// AudioSet ids of YAMNet's speech classes: speech, child speech, conversation, narration, babbling, speech synthesizer.
    public static let speechIdentifiers = ["/m/09x0r", "/m/0ytgt", "/m/01h8n0", "/m/02qldy", "/m/0261r1", "/m/0brhx"]

    public var onset = 0.5
    public var offset = 0.35
    public var bridge = 0.3
    public var minimumDuration = 0.5
    let speechIndices: [Int]
    let model: SoundModel

    /// Speech labels of `model`: the YAMNet ids, or any label named "speech" (a custom model's).
    public init(model: SoundModel) {
        self.model = model
        var index: [String: Int] = [:]
        for (i, l) in model.labels.enumerated() where index[l.mid] == nil { index[l.mid] = i }
        var speech = SpeechActivity.speechIdentifiers.compactMap { index[$0] }
        if speech.isEmpty {
            speech = model.labels.indices.filter { model.labels[$0].name.lowercased() == "speech" }
        }
        speechIndices = speech
    }

    /// Whether the model has any speech label at all.
    public var isAvailable: Bool { !speechIndices.isEmpty }

    /// The speech score of one window: the best of the speech labels.
    public func score(_ window: SoundWindow) -> Double {
        Double(speechIndices.map { window.scores.indices.contains($0) ? window.scores[$0] : 0 }.max() ?? 0)
    }

    /// Speech ranges over a sequence of windows (in time order).
    public func ranges(_ windows: [SoundWindow]) -> [TimeRange] {
        hysteresisRanges(windows.map { ($0.start, $0.start + $0.duration, score($0)) }, onset: onset, offset: offset,
                         bridge: bridge, minimumDuration: minimumDuration)
    }
}

/// Ranges where `values` (time-ordered spans with a level) rise to `onset` and stay at or above `offset`;
/// ranges closer than `bridge` seconds are joined, those shorter than `minimumDuration` dropped.
func hysteresisRanges(_ values: [(start: Double, end: Double, value: Double)], onset: Double, offset: Double,
                      bridge: Double, minimumDuration: Double) -> [TimeRange] {
    var raw: [TimeRange] = []
    var open: TimeRange?
    for v in values {
        if var r = open {
            if v.value >= offset {
                r.end = v.end
                open = r
            } else {
                raw.append(r)
                open = nil
            }
        } else if v.value >= onset {
            open = TimeRange(start: v.start, end: v.end)
        }
    }
    if let r = open { raw.append(r) }
    var merged: [TimeRange] = []
    for r in raw {
        if var last = merged.last, r.start - last.end <= bridge {
            last.end = max(last.end, r.end)
            merged[merged.count - 1] = last
        } else {
            merged.append(r)
        }
    }
    return merged.filter { $0.duration >= minimumDuration }
}

extension SoundModel {
    /// File name of the default model.
    public static let defaultFileName = "yamnet.emodel"

    /// Where the default model is looked for, in order: `$EARMARK_MODEL`; `models/yamnet.emodel` in the
    /// folder of the executable or any of its parents (a build inside the source tree finds the tree's
    /// `models/`, where tools/fetch-model.sh puts it); the same in the working directory;
    /// `$XDG_DATA_HOME/earmark/models/` (else `~/.local/share/earmark/models/`).
    public static func defaultPathCandidates() -> [String] {
        ModelFiles.candidates(fileName: defaultFileName, environmentVariable: "EARMARK_MODEL")
    }

    /// The first existing default model path (see ``defaultPathCandidates()``), or nil.
    public static func defaultPath() -> String? {
        defaultPathCandidates().first { FileManager.default.fileExists(atPath: $0) }
    }

    /// Loads `path`, or the default model when nil; a missing default names every place it looked.
    public static func load(path: String?) throws -> SoundModel {
        if let path { return try SoundModel(path: path) }
        guard let found = defaultPath() else {
            let places = defaultPathCandidates()
            throw SoundModelError(.notFound, "no sound model found (looked in \(places.joined(separator: ", "))); "
                                  + "run tools/fetch-model.sh to fetch and convert YAMNet, or pass --model")
        }
        return try SoundModel(path: found)
    }
}

/// A stretch where one label leads the windows.
public struct LabelRun: Codable, Sendable, Equatable {
    public var start: Double
    public var end: Double
    public var label: String
    public var identifier: String
    /// Mean confidence of the label over the run.
    public var confidence: Double
}

/// The sound classification stored with a catalog track and attached to matches (kind `sound`).
public struct SoundAnalysis: Codable, Sendable, Equatable {
    public static let kind = "sound"
    public static let version = 1

    /// Name of the model that classified.
    public var model: String
    public var windowDuration: Double
    public var overlapFactor: Double
    public var dominant: [LabelShare]
    public var categoryShares: [String: Double]
    public var speech: [TimeRange]
    public var speechShare: Double
    public var duration: Double
    /// Runs of the same leading label, in time order.
    public var timeline: [LabelRun]

    public init(windows: [SoundWindow], duration: Double, model: SoundModel, options: ClassificationOptions) {
        let summary = SoundSummary(windows: windows, duration: duration, speechDetector: SpeechActivity(model: model))
        self.model = model.name
        windowDuration = options.windowDuration
        overlapFactor = options.overlapFactor
        dominant = summary.dominant
        categoryShares = summary.categoryShares
        speech = summary.speech
        speechShare = summary.speechShare
        self.duration = duration
        var runs: [LabelRun] = []
        var count = 0
        for w in windows {
            guard let top = w.labels.first else { continue }
            let end = min(duration, w.start + w.duration)
            if var last = runs.last, last.identifier == top.identifier {
                last.confidence = (last.confidence * Double(count) + top.confidence) / Double(count + 1)
                last.end = max(last.end, end)
                runs[runs.count - 1] = last
                count += 1
            } else {
                runs.append(LabelRun(start: w.start, end: end, label: top.label, identifier: top.identifier, confidence: top.confidence))
                count = 1
            }
        }
        timeline = runs
    }

    /// One line for people: "Music 92 %, Speech 5 %; speech 0:03–0:12".
    public var summaryText: String {
        let leading = dominant.prefix(3).map { "\($0.label) \(Int(($0.share * 100).rounded())) %" }.joined(separator: ", ")
        return leading.isEmpty ? "—" : leading
    }
}
