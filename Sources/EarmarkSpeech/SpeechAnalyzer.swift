import EarmarkAudio
import EarmarkClassification
import Foundation

/// How a stream is transcribed (``SpeechAnalyzer``).
public struct SpeechStreamOptions: Sendable, Equatable {
    /// Language, word times and the decoding guards, as for files, except that a stream decodes greedily by
    /// default (`beamSize` 1): its unfinished speech is decoded again every few seconds, and beam search costs
    /// 1.2–1.6 times as much for about the same words (docs/benchmarks.md).
    public var transcription: TranscriptionOptions
    /// Seconds of new audio inside speech after which the unfinished stretch is decoded again (a volatile result). Default 2.5.
    public var volatileInterval = 2.5
    /// Longest stretch left unfinished, seconds: longer speech without a pause is made final in parts. Default 25.
    public var maximumStretch = 25.0
    /// Whether volatile results are reported at all (false: only final ones, and no re-decoding). Default true.
    public var reportsVolatile = true

    public init(transcription: TranscriptionOptions = TranscriptionOptions(beamSize: 1), volatileInterval: Double = 2.5,
                maximumStretch: Double = 25, reportsVolatile: Bool = true) {
        self.transcription = transcription
        self.volatileInterval = volatileInterval
        self.maximumStretch = maximumStretch
        self.reportsVolatile = reportsVolatile
    }
}

/// What a stream said over a stretch of it: volatile while the stretch is still being heard, final once it settled.
///
/// A final result replaces every volatile result reported since the previous final one.
public struct SpeechResult: Codable, Sendable, Equatable {
    /// False while more audio may still change the text; true when it will not change again.
    public var isFinal: Bool
    /// The audio that was read, in seconds of the stream (the detected speech, padded; see ``SpeechDetector``).
    public var audio: TimeRange
    /// Seconds of the stream heard when the result was made (a final result comes a little after its audio ends).
    public var time: Double
    /// Whisper's code of the language transcribed.
    public var language: String
    /// The transcript of the stretch, times in seconds of the stream; words when they were asked for.
    public var segments: [TranscriptSegment]

    /// Where the text is: from the first segment's start to the last one's end (the audio read when there is no text).
    public var start: Double { segments.first?.start ?? audio.start }
    public var end: Double { segments.last?.end ?? audio.end }
    /// The segments' text joined, trimmed.
    public var text: String { segments.map(\.text).joined().trimmingCharacters(in: .whitespacesAndNewlines) }
    /// Every segment's words, in order (empty unless word times were asked for).
    public var words: [TranscriptWord] { segments.flatMap(\.words) }
}

/// Transcribes a live stream as it arrives, in the spirit of Apple's `SpeechAnalyzer` with a `SpeechDetector` and a
/// `SpeechTranscriber`: audio of any rate is resampled once to 16 kHz; the sound classifier's speech activity
/// (``SpeechDetector``) says where speech is, and Whisper reads only there.
///
/// While speech goes on, the audio since the last final result is decoded again (greedily) every
/// ``SpeechStreamOptions/volatileInterval`` seconds and reported as a volatile result. When speech has paused
/// long enough that no later speech can join it (the detector's padding on both sides: about 1 s after the
/// speech heard, at most about 2 s) the stretch is decoded once more and reported as final; the stretches are
/// then exactly those a file transcription with the same detector reads, so the final text is the file's.
/// Speech that runs on past ``SpeechStreamOptions/maximumStretch`` is made final up to its last segment.
/// No decode ever reads more than the current unfinished stretch, so the cost per second stays bounded.
///
/// Synchronous and not thread-safe: push buffers with ``append(_:)`` and ``finish()``; ``SpeechAnalysisSession``
/// runs one on a thread of its own and offers the results as an `AsyncSequence`.
///
/// ```swift
/// let analyzer = try SpeechAnalyzer(recognizer: WhisperRecognizer(model: speechModel),
///                                   detector: SpeechDetector(soundModel: soundModel))
/// for buffer in buffers { for r in try analyzer.append(buffer) { print(r.isFinal, r.text) } }
/// for r in try analyzer.finish() { print(r.text) }
/// ```
public final class SpeechAnalyzer {
    public let recognizer: WhisperRecognizer
    public let detector: SpeechDetector
    public let options: SpeechStreamOptions
    private let rate: Int
    private let activity: SoundClassificationStream
    private var resampler: Resampler?
    private var inputRate: Double?
    /// 16-kHz samples from absolute sample `audioStart` on.
    private var audio: [Float] = []
    private var audioStart = 0
    /// Classifier windows (scores only) from the end of the last final speech range on.
    private var windows: [SoundWindow] = []
    private var nextWindowStart = 0.0
    /// Seconds between the classifier's windows.
    private let hop: Double
    /// Stream seconds up to which results are final.
    private var finalUpTo = 0.0
    /// Audio end (seconds) of the last decode of the unfinished stretch, and that result's text.
    private var lastDecodeEnd: Double?
    private var lastVolatile: SpeechResult?
    private var language: String?
    /// End of the last word of the final results (word timing after a pause depends on it, as in a file).
    private var lastWordEnd = 0.0
    private var finished = false

    /// - Parameters:
    ///   - recognizer: the Whisper recogniser (owned by the analyzer from now on).
    ///   - detector: speech activity; its padding and thresholds decide the stretches, as for files.
    public init(recognizer: WhisperRecognizer, detector: SpeechDetector, options: SpeechStreamOptions = SpeechStreamOptions()) throws {
        guard detector.activity.isAvailable else {
            throw SoundModelError(.inconsistent, "the sound model \(detector.soundModel.name) has no speech label")
        }
        if let code = options.transcription.language, recognizer.model.language(code: code) == nil {
            throw SpeechModelError(.inconsistent, "the model does not know the language '\(code)'")
        }
        self.recognizer = recognizer
        self.detector = detector
        self.options = options
        rate = recognizer.sampleRate
        activity = try SoundClassificationStream(model: detector.soundModel, options: ClassificationOptions(topK: 1))
        let frame = detector.soundModel.frontEnd.frameDuration
        let windowFrames = max(detector.soundModel.frontEnd.patchFrames, Int((activity.options.windowDuration / frame).rounded()))
        hop = Double(max(1, Int((Double(windowFrames) * (1 - activity.options.overlapFactor)).rounded()))) * frame
        language = options.transcription.language
    }

    /// Seconds of audio appended so far.
    public var duration: Double { Double(audioStart + audio.count) / Double(rate) }

    /// Appends audio (any rate and channel count; buffers are taken as following each other, their `time` is
    /// not read) and returns the results it completes, in order.
    /// - Parameter volatile: false skips a volatile re-decode that is due (it happens at the next append that
    ///   allows it): a caller behind real time passes false for all but its newest buffer, so that re-decoding
    ///   gets rarer instead of the backlog longer.
    public func append(_ buffer: PCMBuffer, volatile: Bool = true) throws -> [SpeechResult] {
        guard !finished else { return [] }
        guard buffer.sampleRate > 0, buffer.sampleRate.isFinite, buffer.channels >= 1 else {
            throw AudioError(.unsupportedFormat, "bad PCM buffer (\(buffer.sampleRate) Hz, \(buffer.channels) channels)")
        }
        var results: [SpeechResult] = []
        if inputRate != buffer.sampleRate {
            if let r = resampler { results += try take(r.flush(), volatile: false) }
            inputRate = buffer.sampleRate
            resampler = buffer.sampleRate == Double(rate) ? nil : try Resampler(inputRate: buffer.sampleRate, outputRate: Double(rate))
        }
        let mono = buffer.mono
        results += try take(resampler?.process(mono) ?? mono, volatile: volatile)
        return results
    }

    /// Appends `seconds` of silence (a gap in the input that the stream's times should keep).
    public func appendSilence(seconds: Double, volatile: Bool = true) throws -> [SpeechResult] {
        guard !finished, seconds > 0, seconds.isFinite else { return [] }
        return try take([Float](repeating: 0, count: Int((seconds * Double(rate)).rounded())), volatile: volatile)
    }

    /// Ends the stream: everything still unfinished is decoded and reported as final.
    public func finish() throws -> [SpeechResult] {
        guard !finished else { return [] }
        var results: [SpeechResult] = []
        if let r = resampler { results += try take(r.flush(), volatile: false) }
        finished = true
        windows += activity.finish().map(Self.scoresOnly)
        results += settle(horizon: .infinity)
        audio = []
        windows = []
        return results
    }

    // MARK: - Work

    private static func scoresOnly(_ w: SoundWindow) -> SoundWindow {
        var w = w
        w.embedding = []
        w.labels = []
        return w
    }

    private func take(_ samples: [Float], volatile: Bool) throws -> [SpeechResult] {
        guard !samples.isEmpty else { return [] }
        audio += samples
        let fresh = try activity.append(PCMBuffer(samples: samples, sampleRate: Double(rate)))
        guard let last = fresh.last else { return volatileIfDue(volatile) }
        windows += fresh.map(Self.scoresOnly)
        nextWindowStart = last.start + hop
        let results = settle(horizon: nextWindowStart)
        // No speech among the windows: the activity is off after them, and none of them can matter any more
        // (unless ranges as short as one window are dropped, which the defaults never do).
        if detector.activity.minimumDuration <= activity.options.windowDuration, detector.activity.ranges(windows).isEmpty {
            windows.removeAll()
        }
        return results + volatileIfDue(volatile)
    }

    /// The padded speech stretches among the windows kept, each with the end of its last raw range.
    private func stretches() -> [(range: TimeRange, speechEnd: Double)] {
        let raw = detector.activity.ranges(windows)
        let padded = SpeechDetector.widen(raw, by: detector.padding, within: finished ? duration : .infinity)
        return padded.compactMap { piece in
            let speechEnd = raw.filter { $0.start < piece.end && $0.end > piece.start }.map(\.end).max() ?? piece.end
            var r = piece
            r.start = max(r.start, finalUpTo)
            r.end = min(r.end, duration)
            return r.end > r.start ? (r, speechEnd) : nil
        }
    }

    /// Makes final every stretch that no speech starting at `horizon` or later could join; then frees what is behind.
    private func settle(horizon: Double) -> [SpeechResult] {
        var results: [SpeechResult] = []
        let needed = max(detector.activity.bridge, 2 * detector.padding)
        for (range, speechEnd) in stretches() where horizon - speechEnd > needed + 1e-9 {
            let result = decode(range, isFinal: true)
            if !result.segments.isEmpty || lastVolatile != nil { results.append(result) }
            finalUpTo = max(finalUpTo, range.end)
            lastVolatile = nil
            lastDecodeEnd = nil
            windows.removeAll { $0.start < speechEnd }
        }
        // Audio before the earliest start any stretch can still have is no longer needed.
        let open = stretches().first?.range.start ?? max(finalUpTo, horizon - detector.padding)
        dropAudio(before: min(open, duration))
        return results
    }

    /// Decodes the unfinished stretch again when enough new audio has come in; makes it final in parts when it is too long.
    private func volatileIfDue(_ allowed: Bool) -> [SpeechResult] {
        guard let open = stretches().last, horizonIsOpen(open.speechEnd) else { return [] }
        let range = TimeRange(start: open.range.start, end: duration)
        if range.duration >= options.maximumStretch {
            return finalizePart(of: range)
        }
        guard options.reportsVolatile, allowed else { return [] }
        let since = lastDecodeEnd ?? range.start
        guard range.end - since >= options.volatileInterval else { return [] }
        lastDecodeEnd = range.end
        let result = decode(range, isFinal: false)
        if result.segments.isEmpty && lastVolatile == nil { return [] }
        if let previous = lastVolatile, previous.segments.map(\.text) == result.segments.map(\.text) { return [] }
        lastVolatile = result
        return [result]
    }

    /// Whether the stretch whose speech heard so far ends at `speechEnd` may still grow.
    private func horizonIsOpen(_ speechEnd: Double) -> Bool {
        nextWindowStart - speechEnd <= max(detector.activity.bridge, 2 * detector.padding) + 1e-9
    }

    /// A stretch that reached the longest allowed: everything but its last segment (which may be cut off) is final.
    private func finalizePart(of range: TimeRange) -> [SpeechResult] {
        let wordEndBefore = lastWordEnd
        var result = decode(range, isFinal: true)
        var cut = range.end
        if result.segments.count >= 2, let last = result.segments.last, last.start > range.start {
            cut = last.start
            result.segments.removeLast()
            result.audio.end = cut
            lastWordEnd = result.segments.last { !$0.words.isEmpty }?.words.last?.end ?? wordEndBefore
        }
        finalUpTo = cut
        // Speech that never pauses must not keep every window: the run of speech may restart at its last onset
        // before the cut (every window after it is at or above the offset, so the range stays open just the same).
        let activity = detector.activity
        if let keep = windows.lastIndex(where: { $0.start < cut && activity.score($0) >= activity.onset }), keep > 0 {
            windows.removeFirst(keep)
        }
        lastDecodeEnd = nil
        let hadVolatile = lastVolatile != nil
        lastVolatile = nil
        dropAudio(before: cut)
        return result.segments.isEmpty && !hadVolatile ? [] : [result]
    }

    private func decode(_ range: TimeRange, isFinal: Bool) -> SpeechResult {
        let from = max(audioStart, Int((range.start * Double(rate)).rounded()))
        let to = max(from, min(audioStart + audio.count, Int((range.end * Double(rate)).rounded())))
        let offset = Double(from) / Double(rate)
        var segments: [TranscriptSegment] = []
        // A final stretch fixes the language when none was given, as the first speech range does for a file.
        var code = language
        if to > from {
            segments = recognizer.transcribe(stretch: Array(audio[(from - audioStart)..<(to - audioStart)]), offset: offset,
                                             previousSpeechEnd: lastWordEnd, language: &code, options: options.transcription)
        }
        if isFinal {
            language = code
            lastWordEnd = segments.last { !$0.words.isEmpty }?.words.last?.end ?? lastWordEnd
        }
        let found = code ?? "en"
        return SpeechResult(isFinal: isFinal, audio: TimeRange(start: offset, end: Double(to) / Double(rate)), time: duration,
                            language: found, segments: segments)
    }

    private func dropAudio(before seconds: Double) {
        let sample = Int((seconds * Double(rate)).rounded(.down))
        let count = min(audio.count, sample - audioStart)
        guard count > 0 else { return }
        audio.removeFirst(count)
        audioStart += count
    }
}
