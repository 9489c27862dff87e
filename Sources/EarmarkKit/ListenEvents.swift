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
