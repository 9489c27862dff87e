import Foundation

// What `earmark listen --json` prints, one JSON object per line, shared by the command and by `earmark serve`'s
// `GET /v1/listen` WebSocket, which sends the same objects as text messages. ``SessionEvent`` encodes the
// streaming session's own events (match, noMatch, discontinuity, dropped, error); this file adds the two that
// listening adds around them (sound, end) and the encoder that writes them all.

/// Encodes listen events as `listen --json` prints them: sorted keys, slashes unescaped, one line.
public enum ListenJSON {
    /// One event as the bytes of one JSON line (without the newline).
    public static func encode(_ value: some Encodable) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return try encoder.encode(value)
    }
}

/// `{"event": "sound", …}`: one classified window of the sound heard (with `--classify`).
public struct ListenSoundEvent: Encodable, Sendable {
    public var event = "sound"
    /// Seconds of input classified so far.
    public var time: Double
    /// Where the window starts and how long it is, in seconds of input.
    public var start: Double
    public var duration: Double
    /// The top labels, most confident first.
    public var labels: [LabelConfidence]

    /// The event for a classified window, `time` seconds into the input.
    public init(_ window: SoundWindow, time: Double) {
        self.time = time
        start = window.start
        duration = window.duration
        labels = window.labels
    }
}

/// `{"event": "end", …}`: always the last event of a listen.
public struct ListenEndEvent: Encodable, Sendable, Equatable {
    public var event = "end"
    /// Seconds of input heard.
    public var time: Double
    /// Why listening ended: `input ended`, `duration`, `interrupted`, `matched` or `error`.
    public var reason: String
    /// Tracks identified (a relocation of the current track is not counted again).
    public var matches: Int
    /// Seconds of audio dropped because matching fell behind.
    public var dropped: Double
}

/// The running totals of a listen that its `end` event reports.
public struct ListenSummary: Sendable {
    /// Seconds of input heard (the newest event's time).
    public private(set) var heard = 0.0
    /// Every track identified, in order (relocations left out).
    public private(set) var matches: [StreamMatch] = []
    /// Seconds of audio dropped.
    public private(set) var dropped = 0.0

    public init() {}

    /// Counts one session event.
    public mutating func record(_ event: SessionEvent) {
        heard = max(heard, event.time)
        switch event {
        case .match(let m) where !m.relocated: matches.append(m)
        case .dropped(_, let s): dropped += s
        default: break
        }
    }

    /// The `end` event for these totals.
    public func end(reason: String) -> ListenEndEvent {
        ListenEndEvent(time: heard, reason: reason, matches: matches.count, dropped: dropped)
    }
}

/// Passes a source's buffers on while classifying their sounds; reports each window as it completes
/// (and the last ones when the source ends), on the thread that reads the source.
public final class SoundTap: AudioSource {
    private let source: any AudioSource
    private let stream: SoundClassificationStream
    private let report: (SoundWindow, Double) -> Void

    /// - Parameter report: called with each window and the seconds of input classified so far.
    public init(_ source: any AudioSource, model: SoundModel, report: @escaping (SoundWindow, Double) -> Void) throws {
        self.source = source
        stream = try SoundClassificationStream(model: model, options: ClassificationOptions(topK: 3))
        self.report = report
    }

    public func next() throws -> PCMBuffer? {
        guard let buffer = try source.next() else {
            for w in stream.finish() { report(w, stream.duration) }
            return nil
        }
        for w in try stream.append(buffer) { report(w, stream.duration) }
        return buffer
    }
}

/// `{"event": "transcript", …}`: what is being said (with `--transcribe`). Volatile results (`final` false) may
/// still change; a final one replaces every volatile one since the previous final one.
public struct ListenTranscriptEvent: Encodable, Sendable, Equatable {
    public var event = "transcript"
    /// Seconds of input heard when the result was made.
    public var time: Double
    /// Whether the text is settled.
    public var final: Bool
    /// Where the text is said, in seconds of input (to the millisecond, as the words' times).
    public var start: Double
    public var end: Double
    public var text: String
    /// Whisper's code of the language.
    public var language: String
    /// The words with their times (empty unless word times were asked for).
    public var words: [SpeechAnalysis.Word]

    /// The event for one result of a ``SpeechAnalyzer``.
    public init(_ result: SpeechResult) {
        // Times to the millisecond (Whisper's own steps are 20 ms; the stream offsets only add float noise).
        func ms(_ t: Double) -> Double { (t * 1000).rounded() / 1000 }
        time = result.time
        final = result.isFinal
        start = ms(result.start)
        end = ms(result.end)
        text = result.text
        language = result.language
        words = result.words.map { SpeechAnalysis.Word(start: ms($0.start), end: ms($0.end), word: $0.text.trimmingCharacters(in: .whitespaces)) }
    }
}

/// Passes a source's buffers on while a ``SpeechAnalysisSession`` transcribes them on its own thread (the reading
/// thread never waits for the recogniser); the session's results arrive in ``results``.
public final class TranscriptTap: AudioSource {
    private let source: any AudioSource
    private let session: SpeechAnalysisSession
    /// The transcript results in stream order; ends once the source has ended (or ``finish()`` was called) and all is transcribed.
    public var results: AsyncThrowingStream<SpeechResult, any Error> { session.results }

    /// - Parameter live: a microphone or a real-time stream (see ``SpeechAnalysisSession/live``); false for a file read
    ///   as fast as it decodes.
    public init(_ source: any AudioSource, analyzer: sending SpeechAnalyzer, live: Bool = true) {
        self.source = source
        session = SpeechAnalysisSession(analyzer: analyzer, live: live)
    }

    /// Feeds a session made elsewhere.
    public init(_ source: any AudioSource, session: SpeechAnalysisSession) {
        self.source = source
        self.session = session
    }

    /// The session itself (to finish it from another thread when reading stops early).
    public var analysis: SpeechAnalysisSession { session }

    public func next() throws -> PCMBuffer? {
        guard let buffer = try source.next() else {
            session.finish()
            return nil
        }
        session.append(buffer)
        return buffer
    }
}
