import Foundation

/// A track's analyses on one time axis: what ``AnalysisTimeline/svg(_:)`` draws, one lane per dimension.
///
/// Build it from what `earmark analyze` measured (``init(title:subtitle:file:)``) or from what a catalog stores
/// for a track (``init(track:analyses:)``); a dimension that was not measured, or whose stored form cannot be
/// read, is nil and gets no lane.
///
/// ```swift
/// var timeline = AnalysisTimeline(track: track, analyses: try catalog.analyses(trackID: track.id))
/// timeline.highlight = TimeRange(start: 40, end: 50)   // a match's matched stretch
/// let svg = timeline.svg()
/// ```
public struct AnalysisTimeline: Sendable, Equatable {
    /// A loudness curve (LUFS) sampled at points in time; nil values are silence and break the curve.
    public struct Loudness: Sendable, Equatable {
        /// Momentary (400 ms) loudness at the middle of each window; empty when only short-term is known.
        public var momentary: [Point]
        /// Short-term (3 s) loudness at the middle of each window.
        public var shortTerm: [Point]
        /// Integrated loudness of the whole track (LUFS), drawn as a dashed line.
        public var integrated: Double?
        public init(momentary: [Point], shortTerm: [Point], integrated: Double?) {
            self.momentary = momentary
            self.shortTerm = shortTerm
            self.integrated = integrated
        }
    }

    /// A value at a time (seconds); nil where there is none (silence).
    public struct Point: Sendable, Equatable {
        public var time: Double
        public var value: Double?
        public init(time: Double, value: Double?) {
            self.time = time
            self.value = value
        }
    }

    /// Beat and bar (downbeat) times in seconds.
    public struct Beats: Sendable, Equatable {
        public var beats: [Double]
        /// The first beat of each bar.
        public var bars: [Double]
        public var beatsPerBar: Int
        /// Tempo, shown beside the lane's title; nil without a steady pulse.
        public var bpm: Double?
        public init(beats: [Double], bars: [Double], beatsPerBar: Int, bpm: Double?) {
            self.beats = beats
            self.bars = bars
            self.beatsPerBar = beatsPerBar
            self.bpm = bpm
        }
    }

    /// A labelled stretch: a section (label A, B, …), a key range ("F major"), a sound class.
    public struct Span: Sendable, Equatable {
        /// Seconds.
        public var start: Double
        public var end: Double
        /// Shown inside the span's box when it fits, and as its tooltip.
        public var label: String
        public init(start: Double, end: Double, label: String) {
            self.start = start
            self.end = end
            self.label = label
        }
    }

    /// Sections (labelled) and the finer segments between them.
    public struct Structure: Sendable, Equatable {
        public var sections: [Span]
        public var segments: [TimeRange]
        public init(sections: [Span], segments: [TimeRange]) {
            self.sections = sections
            self.segments = segments
        }
    }

    /// One instrument family: its 0…1 activity curve and the ranges where it plays.
    public struct Family: Sendable, Equatable {
        /// "drums", "bass", … (``InstrumentFamily``'s raw values).
        public var name: String
        /// 0…1 over time, drawn as an area.
        public var activity: [TimedValue]
        /// Where the family plays, drawn as a bar.
        public var active: [TimeRange]
        public init(name: String, activity: [TimedValue], active: [TimeRange]) {
            self.name = name
            self.activity = activity
            self.active = active
        }
    }

    /// Runs of the leading sound class (YAMNet labels), the speech ranges and what is said in them.
    public struct Sounds: Sendable, Equatable {
        /// Runs of the leading label, labelled with its name.
        public var classes: [Span]
        public var speech: [TimeRange]
        /// The transcript's segments, labelled with their text (empty: not transcribed, or nothing said).
        public var transcript: [Span]
        public init(classes: [Span], speech: [TimeRange], transcript: [Span] = []) {
            self.classes = classes
            self.speech = speech
            self.transcript = transcript
        }
    }

    /// The heading: a track's title, else the file's name.
    public var title: String
    /// The line under the heading (artist, album, …); nil for none.
    public var subtitle: String?
    /// Length of the time axis, seconds.
    public var duration: Double
    /// The loudness lane; nil: not measured.
    public var loudness: Loudness?
    /// The beats-and-bars lane; nil: rhythm not measured.
    public var beats: Beats?
    /// The sections lane (sections and segments); nil: structure not measured.
    public var structure: Structure?
    /// Key ranges (modulations), labelled "F major"; nil: key not measured or none found.
    public var keys: [Span]?
    /// One row per instrument family; nil: instrument activity not measured.
    public var instruments: [Family]?
    /// The sound-class and speech lanes; nil: not classified (no sound model).
    public var sounds: Sounds?
    /// A stretch drawn over every lane (a match's matched range), clipped to the axis.
    public var highlight: TimeRange?

    public init(title: String, subtitle: String? = nil, duration: Double) {
        self.title = title
        self.subtitle = subtitle
        self.duration = duration
    }

    /// Whether any dimension has a lane (false: a track stored without `--analyze`).
    public var hasLanes: Bool {
        loudness != nil || beats != nil || structure != nil || keys != nil || instruments != nil || sounds != nil
    }
}

extension AnalysisTimeline {
    /// The timeline of what `earmark analyze` measured for one file (`sound` and `instruments` need the model).
    public init(title: String, subtitle: String? = nil, file: FingerprintedFile) {
        let duration = file.loudness?.duration ?? file.instruments?.duration ?? file.sound?.duration ?? file.signature.duration
        self.init(title: title, subtitle: subtitle, duration: duration)
        if let l = file.loudness {
            func points(_ values: [TimedValue]) -> [Point] { values.map { Point(time: ($0.start + $0.end) / 2, value: $0.value) } }
            loudness = Loudness(momentary: points(l.momentary), shortTerm: points(l.shortTerm), integrated: l.integrated)
        }
        beats = file.rhythm.map(Beats.init)
        structure = file.structure.map(Structure.init)
        keys = file.key.map(AnalysisTimeline.spans)
        instruments = file.instruments.map { a in
            a.families.map { f in
                Family(name: f.family, activity: f.activity.map { TimedValue(start: $0.start, end: $0.end, value: $0.value) },
                       active: f.activeRanges)
            }
        }
        sounds = file.sound.map(Sounds.init)
        sounds?.transcript = file.speech.map(AnalysisTimeline.spans) ?? []
    }

    /// The timeline of what the catalog stores for `track` (`catalog add --analyze`); kinds it cannot read are left out.
    public init(track: Track, analyses: [TrackAnalysis]) {
        let subtitle = [track.artist, track.album].compactMap { $0?.isEmpty == false ? $0 : nil }.joined(separator: " — ")
        self.init(title: track.title.flatMap { $0.isEmpty ? nil : $0 } ?? "Track \(track.id)",
                  subtitle: subtitle.isEmpty ? nil : subtitle, duration: track.duration)
        let decoder = JSONDecoder()
        func stored<T: Decodable>(_ type: T.Type, _ kind: String) -> T? {
            analyses.first { $0.kind == kind }.flatMap { try? decoder.decode(type, from: $0.json) }
        }
        if let l = stored(LoudnessSummary.self, LoudnessSummary.kind) {
            // Value i is the 3 s ending at i + 3 s: drawn at the window's middle.
            let shortTerm = l.shortTermPerSecond.enumerated().map { Point(time: Double($0.offset) + 1.5, value: $0.element) }
            loudness = Loudness(momentary: [], shortTerm: shortTerm, integrated: l.integrated)
        }
        beats = stored(RhythmResult.self, RhythmResult.kind).map(Beats.init)
        structure = stored(StructureResult.self, StructureResult.kind).map(Structure.init)
        keys = stored(KeyResult.self, KeyResult.kind).map(AnalysisTimeline.spans)
        instruments = stored(InstrumentSummary.self, InstrumentActivity.kind).map { s in
            s.families.map { f in
                Family(name: f.family,
                       activity: f.activityPerSecond.enumerated().map {
                           TimedValue(start: Double($0.offset), end: min(s.duration, Double($0.offset + 1)), value: $0.element)
                       },
                       active: f.activeRanges)
            }
        }
        sounds = stored(SoundAnalysis.self, SoundAnalysis.kind).map(Sounds.init)
        sounds?.transcript = stored(SpeechAnalysis.self, SpeechAnalysis.kind).map(AnalysisTimeline.spans) ?? []
    }

    static func spans(_ speech: SpeechAnalysis) -> [Span] {
        speech.segments.filter { !$0.text.isEmpty }.map { Span(start: $0.start, end: $0.end, label: $0.text) }
    }

    static func spans(_ key: KeyResult) -> [Span] {
        key.ranges.map { Span(start: $0.start, end: $0.end, label: "\($0.tonic) \($0.mode.rawValue)") }
    }
}

extension AnalysisTimeline.Beats {
    init(_ r: RhythmResult) {
        self.init(beats: r.beats, bars: r.bars, beatsPerBar: r.beatsPerBar, bpm: r.bpm)
    }
}

extension AnalysisTimeline.Structure {
    init(_ s: StructureResult) {
        self.init(sections: s.sections.map { AnalysisTimeline.Span(start: $0.start, end: $0.end, label: $0.label ?? "") },
                  segments: s.segments.map { TimeRange(start: $0.start, end: $0.end) })
    }
}

extension AnalysisTimeline.Sounds {
    init(_ s: SoundAnalysis) {
        self.init(classes: s.timeline.map { AnalysisTimeline.Span(start: $0.start, end: $0.end, label: $0.label) }, speech: s.speech)
    }
}

extension AnalysisTimeline {
    /// What a timeline of a catalog track without stored analysis says in place of lanes.
    public static let noStoredAnalysis = "No analysis stored for this track (add it with: earmark catalog add --analyze)."
}
