import EarmarkKit
import EarmarkTestSupport
import Foundation
import Testing

/// The SVG timeline, read back with XMLParser: which lanes it claims, where the highlight falls, and that text
/// from outside cannot break out of the document.
@Suite struct AnalysisTimelineTests {
    static func parse(_ timeline: AnalysisTimeline, width: Double = 1000) throws -> SVGDocument {
        try SVGDocument(Data(timeline.svg(width: width).utf8))
    }

    /// Seconds → x, from the numbers the root element publishes.
    static func x(_ time: Double, in doc: SVGDocument) throws -> Double {
        let root = try #require(doc.root)
        let plotX = try #require(root.number("data-plot-x")), plotWidth = try #require(root.number("data-plot-width"))
        let duration = try #require(root.number("data-duration"))
        return plotX + time / duration * plotWidth
    }

    @Test func aRealTrackAnalysedWithTheModelHasEveryLane() throws {
        let audio = try TestAudio.set()
        let model = try SoundModel.load(path: try TestModel.set().model.path)
        let file = try Fingerprinter.analyze(path: try audio.reference("pingus-4").path, analyses: .all(sound: model))
        let doc = try Self.parse(AnalysisTimeline(title: "pingus-4", file: file))
        #expect(doc.lanes == ["loudness", "beats", "sections", "key", "instruments", "sounds", "speech"])
        // The curves and marks are there, not just the lanes' titles.
        #expect(doc.all("path", ["class": "short-term"]).count == 1)
        #expect(doc.all("path", ["class": "momentary"]).count == 1)
        let bars = try #require(file.rhythm?.bars.count)
        #expect(doc.all("path", ["class": "bar"]).map { $0.attributes["d", default: ""].filter { $0 == "M" }.count }.reduce(0, +) == bars)
        #expect(doc.all("rect", ["class": "section"]).count == file.structure?.sections.count)
        #expect(doc.all("rect", ["class": "key"]).count == file.key?.ranges.count)
        #expect(doc.all("g", ["class": "family"]).count == InstrumentFamily.allCases.count)
        #expect(doc.all("rect", ["class": "sound"]).count == file.sound?.timeline.count)
        #expect(doc.all("rect", ["id": "highlight"]).isEmpty)
        // Without the model: no sound lanes, nothing claimed about speech or instruments.
        let musicOnly = try Fingerprinter.analyze(path: try audio.reference("pingus-4").path, analyses: .all(sound: nil))
        #expect(try Self.parse(AnalysisTimeline(title: "pingus-4", file: musicOnly)).lanes == ["loudness", "beats", "sections", "key"])
    }

    @Test func theHighlightCoversTheGivenStretch() throws {
        var timeline = AnalysisTimeline(title: "t", duration: 200)
        timeline.loudness = .init(momentary: [], shortTerm: (0..<200).map { .init(time: Double($0), value: -20) }, integrated: -20)
        timeline.highlight = TimeRange(start: 40, end: 50)
        let doc = try Self.parse(timeline)
        let rect = try #require(doc.all("rect", ["id": "highlight"]).first)
        #expect(abs(try #require(rect.number("x")) - (try Self.x(40, in: doc))) < 0.01)
        #expect(abs(try #require(rect.number("width")) - (try Self.x(50, in: doc) - Self.x(40, in: doc))) < 0.01)
        // 40 s of 200 at width 1000: 150 px of labels, 826 px of plot.
        #expect(abs(try #require(rect.number("x")) - (150 + 0.2 * 826)) < 0.01)
        #expect(doc.all("text").contains { $0.text == "matched 0:40–0:50" })

        // Clipped to the track; a stretch past its end is not drawn.
        timeline.highlight = TimeRange(start: -5, end: 500)
        let clipped = try #require(try Self.parse(timeline).all("rect", ["id": "highlight"]).first)
        #expect(clipped.number("x") == 150 && clipped.number("width") == 826)
        timeline.highlight = TimeRange(start: 300, end: 310)
        #expect(try Self.parse(timeline).all("rect", ["id": "highlight"]).isEmpty)
    }

    @Test func textFromOutsideIsEscaped() throws {
        let title = "Rock <&\"> 'n' </svg><script>alert(1)</script>\u{1}\u{8}"
        var timeline = AnalysisTimeline(title: title, subtitle: "A & B <live>", duration: 30)
        timeline.structure = .init(sections: [.init(start: 0, end: 30, label: "<b>&</b>")], segments: [])
        timeline.sounds = .init(classes: [.init(start: 0, end: 30, label: "Speech\" onload=\"x")], speech: [])
        let doc = try Self.parse(timeline)
        #expect(doc.all("script").isEmpty)
        #expect(doc.all("b").isEmpty)
        #expect(doc.all("text", ["class": "title"]).first?.text == "Rock <&\"> 'n' </svg><script>alert(1)</script>")
        #expect(doc.all("text", ["class": "subtitle"]).first?.text == "A & B <live>")
        #expect(doc.elements.allSatisfy { $0.attributes["onload"] == nil })
        #expect(doc.all("text").contains { $0.text == "<b>&</b>" })
    }

    /// The transcript is written under the speech ranges: each segment's text cut to its stretch, the whole text
    /// (escaped) in its tooltip; a lane without one says no words and draws no text.
    @Test func theSpeechLaneShowsTheTranscript() throws {
        var timeline = AnalysisTimeline(title: "prompts", duration: 60)
        let long = "Please enter your agent number followed by the pound key, then <hold> & wait."
        timeline.sounds = .init(classes: [.init(start: 0, end: 60, label: "Speech")],
                                speech: [TimeRange(start: 2, end: 20), TimeRange(start: 40, end: 43)],
                                transcript: [.init(start: 2, end: 20, label: "That agent is already logged on."),
                                             .init(start: 40, end: 43, label: long)])
        let doc = try Self.parse(timeline)
        let texts = doc.all("text", ["class": "transcript"])
        #expect(texts.count == 2)
        #expect(texts.first?.text == "That agent is already logged on.")
        #expect(abs(try #require(texts.first?.number("x")) - (try Self.x(2, in: doc))) < 0.1)
        // Three seconds of a 60-s axis hold a few characters of the long segment, and the tooltip all of it.
        let cut = try #require(texts.last?.text)
        #expect(cut.hasSuffix("…") && cut.count < 10 && long.hasPrefix(String(cut.dropLast())), "\(cut)")
        let tips = doc.all("title").map(\.text)
        #expect(tips.contains { $0.hasPrefix(long) }, "\(tips)")
        #expect(doc.all("text").contains { $0.text == "20 words transcribed" })

        timeline.sounds?.transcript = []
        let plain = try Self.parse(timeline)
        #expect(plain.all("text", ["class": "transcript"]).isEmpty)
        #expect(!plain.all("text").contains { $0.text.hasSuffix("words transcribed") })
        #expect(try #require(plain.root?.number("height")) < (try #require(doc.root?.number("height"))))
    }

    @Test func missingDataGetsNoLanes() throws {
        let empty = try Self.parse(AnalysisTimeline(title: "bare", duration: 60), width: 700)
        #expect(empty.lanes.isEmpty)
        #expect(empty.all("text", ["class": "empty"]).first?.text == "No analysis for this audio.")
        #expect(empty.root?.attributes["width"] == "700")

        // A track stored with only loudness, plus a kind whose JSON cannot be read: one lane, no crash.
        let track = try JSONDecoder().decode(Track.self, from: Data(
            #"{"id":7,"title":"Loud","metadata":{},"duration":10,"contentHash":"","landmarkCount":0,"addedAt":""}"#.utf8))
        let loudness = #"{"integrated":-9.5,"range":1,"truePeak":-0.5,"samplePeak":-0.6,"maximumMomentary":-8,"#
            + #""maximumShortTerm":-9,"shortTermPerSecond":[-9.6,null,-9.4,-9.5,-9.5,-9.6,-9.7,-9.5],"duration":10}"#
        let stored = AnalysisTimeline(track: track, analyses: [
            TrackAnalysis(kind: "loudness", version: 1, json: Data(loudness.utf8)),
            TrackAnalysis(kind: "key", version: 1, json: Data("{\"nonsense\": true}".utf8)),
        ])
        let doc = try Self.parse(stored)
        #expect(doc.lanes == ["loudness"])
        // The null second breaks the curve into two pieces.
        let d = try #require(doc.all("path", ["class": "short-term"]).first?.attributes["d"])
        #expect(d.filter { $0 == "M" }.count == 2)
        #expect(try Self.parse(AnalysisTimeline(track: track, analyses: [])).lanes.isEmpty)
    }

    /// A 10-minute track and a 5-s clip both get a handful of readable ticks.
    @Test func ticksSuitLongAndShortTracks() throws {
        for (duration, first, last) in [(600.0, "0:00", "10:00"), (5.0, "0:00.0", "0:05.0"), (3725.0, "0:00", "1:00:00")] {
            let doc = try Self.parse(AnalysisTimeline(title: "t", duration: duration))
            let ticks = doc.all("text", ["class": "tick"]).map(\.text)
            #expect((5...16).contains(ticks.count), "\(duration) s: \(ticks)")
            #expect(ticks.first == first && ticks.last == last, "\(duration) s: \(ticks)")
        }
    }
}
