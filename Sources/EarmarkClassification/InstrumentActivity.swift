import Foundation

/// A family of instruments (as Music Understanding groups them).
public enum InstrumentFamily: String, Codable, Sendable, CaseIterable {
    case drums, bass, guitar, keys, strings, brass, woodwinds, voice, synth

    /// YAMNet (AudioSet) label indices of the family.
    static let yamnetLabels: [InstrumentFamily: [Int]] = [
        .drums: Array(156...171),            // percussion, drum kit/machine, snare, bass drum, cymbals, hi-hat, …
        .bass: [137, 189],                  // bass guitar, double bass
        .guitar: Array(134...146).filter { $0 != 137 },  // plucked strings, guitars, banjo, sitar, mandolin, …
        .keys: [147, 148, 149, 150, 151, 152, 155],     // keyboard, piano, electric piano, organs, harpsichord
        .strings: [184, 185, 186, 187, 188, 194],       // bowed strings, string section, violin, pizzicato, cello, harp
        .brass: [180, 181, 182, 183],       // brass, French horn, trumpet, trombone
        .woodwinds: [190, 191, 192, 193],   // wind instruments, flute, saxophone, clarinet
        .voice: Array(24...32),             // singing, choir, chant, rapping, humming, …
        .synth: [153, 154],                 // synthesizer, sampler
    ]
}

/// One family's activity over time.
public struct FamilyActivity: Codable, Sendable, Equatable {
    public struct Value: Codable, Sendable, Equatable {
        public var start: Double
        public var end: Double
        /// 0…1: the instrument head's probability for the family around that window (with the label fallback, the
        /// classifier's best score among the family's labels).
        public var value: Double
    }
    public var family: String
    /// Where the family plays (hysteresis on the activity, see ``InstrumentActivity``).
    public var activeRanges: [TimeRange]
    /// The activity curve, one value per classification window.
    public var activity: [Value]
}

/// Instrument activity (Music Understanding's dimension) from sound-classifier windows: for each family,
/// a 0…1 curve per window and active ranges where the curve rises to an onset threshold and stays above an
/// offset threshold; ranges closer than `bridge` s are joined, shorter than `minimumDuration` s dropped.
///
/// With the shipped ``InstrumentHead`` (a logistic output per family on the model's embeddings, trained on
/// rendered multi-part pieces), the curve is the head's probability, scaled down where YAMNet does not hear
/// music (its best music label under ``musicScore``) and averaged over a few seconds, and the thresholds are
/// the head's, per family. Without it (no head file, or a model whose embeddings it does not read) the curve
/// is the best score among the family's YAMNet labels, with `onset` / `offset`; ``method`` says which.
/// Needs a YAMNet-ordered (AudioSet) model.
public struct InstrumentActivity: Codable, Sendable, Equatable {
    public static let kind = "instruments"
    /// 2: the instrument head (1: YAMNet label scores).
    public static let version = 2

    public var model: String
    /// How the curves were made: `head NAME`, or `labels (why no head)`; nil in results made before version 2.
    public var method: String?
    public var families: [FamilyActivity]
    public var duration: Double

    /// Thresholds of the label fallback.
    public static let onset = 0.1, offset = 0.05, bridge = 1.0, minimumDuration = 1.0

    /// Whether `model` has the AudioSet labels this needs.
    public static func supports(_ model: SoundModel) -> Bool {
        model.labels.count == 521 && model.labels[132].mid == "/m/04rlf" && model.labels[148].name == "Piano"
    }

    /// The shipped head (nil when it is missing or unreadable; ``InstrumentHead/shipped`` says why).
    public static var defaultHead: InstrumentHead? { try? InstrumentHead.shipped.get() }

    /// `head`: the instrument head to use; by default the shipped one; nil for the label mapping.
    public init(windows: [SoundWindow], duration: Double, model: SoundModel,
                head: InstrumentHead? = InstrumentActivity.defaultHead) throws {
        guard InstrumentActivity.supports(model) else {
            throw SoundModelError(.inconsistent, "instrument activity needs a model with YAMNet's AudioSet labels (\(model.name) has \(model.labels.count) labels)")
        }
        self.model = model.name
        self.duration = duration
        let why: String
        if let head {
            if !head.fits(model) {
                why = "instrument head \(head.name) reads the embeddings of \(head.model), not \(model.name)"
            } else if !windows.allSatisfy({ $0.embedding.count == head.embeddingSize }) {
                why = "the windows have no embeddings"
            } else {
                method = "head \(head.name)"
                // The head only saw music: each window's probabilities are scaled by how much YAMNet hears music
                // there (speech and noise go to 0), then smoothed.
                let gate = windows.map { InstrumentActivity.musicGate($0.scores) }
                let p = InstrumentHead.smooth(head.probabilities(windows.map(\.embedding)).map { zip($0, gate).map { $0 * $1 } },
                                              middles: windows.map { $0.start + $0.duration / 2 }, radius: head.smoothing)
                families = InstrumentFamily.allCases.map { family in
                    guard let f = head.families.firstIndex(of: family) else {
                        return FamilyActivity(family: family.rawValue, activeRanges: [], activity: [])
                    }
                    let curve = zip(windows, p[f]).map { w, v in
                        FamilyActivity.Value(start: w.start, end: min(duration, w.start + w.duration), value: (Double(v) * 1000).rounded() / 1000)
                    }
                    return FamilyActivity(family: family.rawValue, activeRanges: InstrumentActivity.ranges(curve, onset: head.onset[f], offset: head.offset[f]),
                                          activity: curve)
                }
                return
            }
        } else {
            switch InstrumentHead.shipped {
            case .failure(let e): why = e.message
            case .success: why = "no instrument head asked for"
            }
        }
        method = "labels (\(why))"
        families = InstrumentFamily.allCases.map { family in
            let labels = InstrumentFamily.yamnetLabels[family]!
            let curve = windows.map { w in
                FamilyActivity.Value(start: w.start, end: min(duration, w.start + w.duration),
                                     value: Double(labels.map { w.scores.indices.contains($0) ? w.scores[$0] : 0 }.max() ?? 0))
            }
            return FamilyActivity(family: family.rawValue, activeRanges: InstrumentActivity.ranges(curve), activity: curve)
        }
    }

    /// Which 1-s frames [i, i + 1) of `count` `ranges` cover for at least half a second: how activity is scored
    /// against per-second truth (training the head, the benchmark).
    public static func coveredFrames(_ ranges: [TimeRange], count: Int) -> [Bool] {
        (0..<count).map { i in
            let a = Double(i), b = Double(i + 1)
            return ranges.reduce(0) { $0 + max(0, min(b, $1.end) - max(a, $1.start)) } >= 0.5
        }
    }

    /// YAMNet labels that say music is playing: Music, Musical instrument, and every family's labels.
    static let musicLabels: [Int] = Array(Set([132, 133] + InstrumentFamily.yamnetLabels.values.flatMap { $0 })).sorted()
    /// Music score (best of ``musicLabels``) from which a window counts fully; below, the head's probabilities
    /// are scaled down in proportion.
    public static let musicScore = 0.3

    static func musicGate(_ scores: [Float]) -> Float {
        let m = musicLabels.map { scores.indices.contains($0) ? scores[$0] : 0 }.max() ?? 0
        return min(1, m / Float(musicScore))
    }

    /// Where `curve` rises to `onset` and stays at `offset` or more; ranges closer than ``bridge`` s are joined,
    /// shorter than ``minimumDuration`` s dropped.
    public static func ranges(_ curve: [FamilyActivity.Value], onset: Double = InstrumentActivity.onset,
                              offset: Double = InstrumentActivity.offset) -> [TimeRange] {
        hysteresisRanges(curve.map { ($0.start, $0.end, $0.value) }, onset: onset, offset: offset, bridge: bridge,
                         minimumDuration: minimumDuration)
    }

    /// Families active at all, most active time first: "drums 80 %, keys 45 %".
    public var summaryText: String { InstrumentActivity.describe(families.map { ($0.family, $0.activeRanges) }, duration: duration) }

    static func describe(_ families: [(String, [TimeRange])], duration: Double) -> String {
        let shares = families.map { f in (f.0, f.1.reduce(0) { $0 + $1.duration } / max(duration, 1e-9)) }
            .filter { $0.1 > 0 }.sorted { $0.1 > $1.1 }
        return shares.isEmpty ? "none detected" : shares.map { "\($0.0) \(Int(($0.1 * 100).rounded())) %" }.joined(separator: ", ")
    }
}

/// The compact form stored with catalog tracks (kind `instruments`): active ranges and the activity
/// curve averaged per second (rounded to 0.01).
public struct InstrumentSummary: Codable, Sendable, Equatable {
    public struct Family: Codable, Sendable, Equatable {
        public var family: String
        public var activeRanges: [TimeRange]
        /// Mean activity over each second [i, i+1) of the audio.
        public var activityPerSecond: [Double]
    }
    public var model: String
    /// As ``InstrumentActivity/method``.
    public var method: String?
    public var duration: Double
    public var families: [Family]

    /// As ``InstrumentActivity/summaryText``.
    public var summaryText: String { InstrumentActivity.describe(families.map { ($0.family, $0.activeRanges) }, duration: duration) }

    public init(_ a: InstrumentActivity) {
        model = a.model
        method = a.method
        duration = a.duration
        let seconds = max(1, Int(a.duration.rounded(.up)))
        families = a.families.map { f in
            var sum = [Double](repeating: 0, count: seconds), weight = [Double](repeating: 0, count: seconds)
            for v in f.activity {
                let mid = (v.start + v.end) / 2
                let i = min(seconds - 1, max(0, Int(mid)))
                sum[i] += v.value
                weight[i] += 1
            }
            var last = 0.0
            let perSecond = (0..<seconds).map { i -> Double in
                if weight[i] > 0 { last = (sum[i] / weight[i] * 100).rounded() / 100 }
                return last
            }
            return Family(family: f.family, activeRanges: f.activeRanges, activityPerSecond: perSecond)
        }
    }
}
