import CHalfGEMM
import CZlib
import EarmarkClassification
import EarmarkDSP
import Foundation

/// How to transcribe.
public struct TranscriptionOptions: Sendable, Equatable {
    /// Whisper's language code ("en", "fr", …), or nil to detect it on the first window.
    public var language: String?
    /// Most tokens sampled per 30-s window (224, CTranslate2's and Whisper's half of the text context).
    public var maximumTokensPerWindow = 224
    /// Latest time the first timestamp of a window may name, in 0.02-s steps (50 = 1 s, Whisper's default).
    public var maximumInitialTimestampIndex = 50
    /// A window whose no-speech probability is above this, and whose mean token log-probability is below
    /// ``logProbabilityThreshold``, is taken as silence (Whisper's defaults 0.6 and −1).
    public var noSpeechThreshold: Double? = 0.6
    /// A decoding whose mean token log-probability is below this is re-decoded at the next of ``temperatures``
    /// (unless it is silence, see ``noSpeechThreshold``). Whisper's −1.
    public var logProbabilityThreshold = -1.0
    /// Also time every word (cross-attention alignment; costs about one more decoder pass per window). Default false.
    public var wordTimestamps = false
    /// Sequences kept by beam search at temperature 0 (5, faster-whisper's default for files); 1 decodes greedily.
    /// Beams are ranked by their summed token log-probabilities divided by their length, as Whisper does without
    /// a length penalty.
    public var beamSize = 5
    /// Temperatures tried in turn until a window's decoding passes the guards below (Whisper's 0, 0.2, … 1.0);
    /// above 0, ``bestOf`` sequences are sampled and the best kept. `[0]` turns the fallback off.
    public var temperatures: [Double] = [0, 0.2, 0.4, 0.6, 0.8, 1.0]
    /// Sequences sampled at each temperature above 0 (Whisper's and faster-whisper's default 5).
    public var bestOf = 5
    /// A decoding whose text compresses better than this is taken as repetitive and re-decoded at the next temperature
    /// (Whisper's 2.4; see ``WhisperRecognizer/compressionRatio(_:)``). nil: never.
    public var compressionRatioThreshold: Double? = 2.4
    /// Seed of the sampling at temperatures above 0: the same seed, audio and options give the same transcript.
    public var seed: UInt64 = 0
    /// Give the decoder the text of the windows before (in the same stretch of speech) as a prompt,
    /// `<|startofprev|>` and at most the last 223 of their tokens, as Whisper's and faster-whisper's `transcribe`
    /// do by default (it keeps names and numbers spelled alike from window to window). Default true.
    public var conditionOnPreviousText = true
    /// The prompt of earlier text is dropped after a window whose decoding needed a temperature above this
    /// (faster-whisper's 0.5): text that only sampling could produce is a poor guide.
    public var promptResetOnTemperature = 0.5
    /// For a window shorter than 30 s (a short recording, or the end of a long one), encode only its audio and this
    /// many seconds of the zero padding after it (default 8), instead of the whole 30-s window (nil, as Whisper and
    /// CTranslate2 do). The encoder's cost falls with the frames left out (its attention with their square); the
    /// network then reads a shorter context than it was trained on, so this is not exactly Whisper's computation: on
    /// one-word prompts it can make the decoder repeat the word, so a window whose short decoding fails the fallback's
    /// guards or repeats a token three times in a row is read again whole (see docs/speech.md for the word error rates).
    public var shortWindowPadding: Double? = 8

    /// Options with Whisper's usual guards; `beamSize` 1 decodes greedily.
    public init(language: String? = nil, wordTimestamps: Bool = false, beamSize: Int = 5) {
        self.language = language
        self.wordTimestamps = wordTimestamps
        self.beamSize = beamSize
    }
}

/// A stretch of a transcript with its times in the recording.
public struct TranscriptSegment: Codable, Sendable, Equatable {
    /// Seconds from the start of the recording.
    public var start: Double
    public var end: Double
    /// The segment's text as decoded (Whisper's text usually starts with a space).
    public var text: String
    /// Text and time tokens as sampled (time tokens relative to the segment's window).
    public var tokens: [Int]
    /// The segment's words with their times, when they were asked for (``TranscriptionOptions/wordTimestamps``).
    public var words: [TranscriptWord] = []
}

/// What a recording says.
public struct Transcription: Codable, Sendable, Equatable {
    /// Whisper's code of the language transcribed.
    public var language: String
    /// Probability of that language from detection (1 when it was given).
    public var languageProbability: Double
    /// The transcript in time order.
    public var segments: [TranscriptSegment]
    /// Seconds of audio transcribed.
    public var duration: Double
    /// The ranges that were read when speech was detected first (nil: the whole recording was read).
    public var speech: [TimeRange]?

    /// The segments' text joined (Whisper's segments carry their own leading spaces), trimmed.
    public var text: String {
        segments.map(\.text).joined().trimmingCharacters(in: .whitespacesAndNewlines)
    }
}

/// The decoding of one 30-s window.
public struct WindowDecoding: Sendable, Equatable {
    /// Whisper's code of the language decoded (detected or given).
    public var language: String
    /// Its probability among the model's languages (1 when it was given).
    public var languageProbability: Double
    /// Probability of `<|nocaptions|>` right after `<|startoftranscript|>`.
    public var noSpeechProbability: Double
    /// Sampled tokens after the prompt, without the final `<|endoftext|>`.
    public var tokens: [Int]
    /// Mean log-probability of the sampled tokens (the final end of text included).
    public var averageLogProbability: Double
    /// Temperature of the decoding kept (0: beam search or greedy; above 0 after a fallback).
    public var temperature = 0.0
    /// Compression ratio of the text (``WhisperRecognizer/compressionRatio(_:)``).
    public var compressionRatio = 0.0
}

/// Speech to text with Whisper: the log-mel front end, the network and decoding with timestamps.
///
/// Decoding follows what CTranslate2 (and OpenAI's Whisper) do: the prompt
/// `<|startoftranscript|><|language|><|transcribe|>`; the model's suppressed tokens at every step, a
/// blank and end of text at the first; timestamps first, at most 1 s into the window, in pairs and
/// never going back; a timestamp whenever the timestamps together are likelier than any text token
/// (the rules apply to each beam or sample on its own). Beam search (``TranscriptionOptions/beamSize``) or
/// greedy decoding at temperature 0, then sampling at higher temperatures while the result looks
/// repetitive or unlikely (``TranscriptionOptions/temperatures``).
/// Long recordings are read in 30-s windows that follow the last complete timestamp pair, as Whisper's
/// `transcribe` does. An instance is not thread-safe; give each thread its own.
///
/// ```swift
/// let recognizer = WhisperRecognizer(model: try SpeechModel(path: path))
/// let transcript = recognizer.transcribe(samples: samples16k)
/// print(transcript.text)
/// ```
public final class WhisperRecognizer {
    public let model: SpeechModel
    /// The network (its buffers belong to this recogniser).
    public let network: WhisperNetwork
    /// The log-mel front end.
    public let frontEnd: WhisperFrontEnd
    private var disabled: [Bool]
    /// Logits after the prompt, kept for every attempt at a window (`vocabularySize` values).
    private let promptLogits: UnsafeMutablePointer<Float>
    /// Reused per step of beam search and sampling.
    private var rowTokens: [Int] = []
    private var rowSlots: [Int] = []
    /// End of the last timed word of the recording being transcribed (seconds).
    private var lastSpeechTime = 0.0
    /// Called after every 30-s window is decoded, with the window's start in the recording (seconds), its decoding
    /// and whether it was skipped as silence (for benchmarks and diagnosis; nil by default).
    public var windowObserver: ((_ start: Double, _ decoding: WindowDecoding, _ skipped: Bool) -> Void)?

    public init(model: SpeechModel) {
        self.model = model
        network = WhisperNetwork(model: model)
        frontEnd = WhisperFrontEnd(spec: model.frontEnd)
        promptLogits = .allocate(capacity: model.architecture.vocabularySize)
        promptLogits.initialize(repeating: 0, count: model.architecture.vocabularySize)
        disabled = [Bool](repeating: false, count: model.architecture.vocabularySize)
    }

    deinit { promptLogits.deallocate() }

    /// Sample rate the recogniser reads, Hz (16,000).
    public var sampleRate: Int { model.frontEnd.sampleRate }

    /// Transcribes mono samples at ``sampleRate``. With `speech`, only those time ranges (seconds, in time
    /// order, e.g. from ``SpeechDetector``) are read, each on its own, and times stay those of the whole
    /// recording; no ranges give an empty transcript. `progress` gets the fraction done after each window.
    public func transcribe(samples: [Float], options: TranscriptionOptions = TranscriptionOptions(), speech: [TimeRange]? = nil,
                           progress: ((Double) -> Void)? = nil) throws -> Transcription {
        if let code = options.language, model.language(code: code) == nil {
            throw SpeechModelError(.inconsistent, "the model does not know the language '\(code)'")
        }
        let rate = Double(model.frontEnd.sampleRate)
        let duration = Double(samples.count) / rate
        let pieces: [Range<Int>] = speech.map { ranges in
            ranges.compactMap { r in
                let from = max(0, min(samples.count, Int((r.start * rate).rounded())))
                let to = max(from, min(samples.count, Int((r.end * rate).rounded())))
                return to > from ? from..<to : nil
            }
        } ?? [0..<samples.count]
        let total = Double(max(1, pieces.reduce(0) { $0 + $1.count }))
        var done = 0
        var segments: [TranscriptSegment] = []
        var language = options.language, languageProbability = 1.0
        lastSpeechTime = 0
        for piece in pieces {
            let slice = piece == samples.indices ? samples : Array(samples[piece])
            let base = done
            let found = transcribePiece(slice, offset: Double(piece.lowerBound) / rate, language: &language,
                                        languageProbability: &languageProbability, options: options) { fraction in
                progress?((Double(base) + fraction * Double(piece.count)) / total)
            }
            segments += found
            done += piece.count
        }
        // Nothing read and no language given: "en" with probability 0.
        return Transcription(language: language ?? "en", languageProbability: language == nil ? 0 : languageProbability, segments: segments,
                             duration: duration, speech: speech)
    }

    /// Windows over one stretch of audio starting `offset` seconds into the recording; detects the language
    /// on its first window when `language` is nil.
    private func transcribePiece(_ samples: [Float], offset: Double, language: inout String?, languageProbability: inout Double,
                                 options: TranscriptionOptions, progress: (Double) -> Void) -> [TranscriptSegment] {
        let spec = model.frontEnd
        let mel = frontEnd.spectrogram(samples)
        let secondsPerFrame = Double(spec.hopLength) / Double(spec.sampleRate)
        var segments: [TranscriptSegment] = []
        var seek = 0
        // Tokens of the segments kept so far and where the prompt of earlier text starts in them.
        var history: [Int] = []
        var promptStart = 0
        let promptLimit = model.architecture.textContext / 2 - 1
        while seek < mel.frames {
            let size = min(spec.chunkFrames, mel.frames - seek)
            let window = mel.window(start: seek, length: spec.chunkFrames)
            let previous = options.conditionOnPreviousText ? Array(history[promptStart...].suffix(promptLimit)) : []
            let encoded = options.shortWindowPadding.map { pad in
                min(spec.chunkFrames, size + Int((max(0, pad) / secondsPerFrame).rounded(.up)))
            }
            var result: WindowDecoding
            if let encoded, encoded < spec.chunkFrames {
                // Only the first temperature on the short encoding: when that fails the guards, or repeats a text
                // token three times in a row (on one-word prompts the short context can make the decoder repeat the
                // word, up to the token limit or a few times, too few for the compression ratio), the window is read
                // again whole, with the usual fallback.
                var first = options
                first.temperatures = Array(options.temperatures.prefix(1))
                result = decode(window: window, language: language, options: first, previous: previous, frames: encoded)
                let endOfText = model.special.endOfText
                let text: [Int] = result.tokens.filter { $0 < endOfText }
                var repeats = false
                for i in text.indices.dropFirst(2) where text[i] == text[i - 1] && text[i] == text[i - 2] { repeats = true }
                if repeats || WhisperRecognizer.needsFallback(result, options: options) {
                    result = decode(window: window, language: language, options: options, previous: previous)
                }
            } else {
                result = decode(window: window, language: language, options: options, previous: previous, frames: encoded)
            }
            if language == nil {
                language = result.language
                languageProbability = result.languageProbability
            }
            let windowOffset = offset + Double(seek) * secondsPerFrame
            if let threshold = options.noSpeechThreshold, result.noSpeechProbability > threshold,
               result.averageLogProbability < options.logProbabilityThreshold {
                windowObserver?(windowOffset, result, true)
                seek += size
                progress(Double(seek) / Double(mel.frames))
                continue
            }
            windowObserver?(windowOffset, result, false)
            var (found, advance) = WhisperRecognizer.segments(result.tokens, tokenizer: model.tokenizer, offset: windowOffset,
                                                              windowFrames: size, secondsPerFrame: secondsPerFrame)
            if options.wordTimestamps {
                addWords(to: &found, language: result.language, windowFrames: size, offset: windowOffset)
            }
            let kept = found.filter { !$0.text.trimmingCharacters(in: .whitespaces).isEmpty }
            segments += kept
            history += kept.flatMap(\.tokens)
            if result.temperature > options.promptResetOnTemperature { promptStart = history.count }
            seek += max(1, advance)
            progress(Double(min(seek, mel.frames)) / Double(max(1, mel.frames)))
        }
        return segments
    }

    /// Times the words of a window's segments from the cross-attention of the window the network encoded last
    /// (see ``WordAlignment``), then sets each segment's range to its words'.
    private func addWords(to segments: inout [TranscriptSegment], language: String, windowFrames: Int, offset: Double) {
        let tokenizer = model.tokenizer, special = model.special
        let text = segments.map { $0.tokens.filter { $0 < special.endOfText } }
        let allText = text.flatMap { $0 }
        guard !allText.isEmpty, let languageToken = model.language(code: language)?.token else { return }
        let prompt = [special.startOfTranscript, languageToken, special.transcribe, special.noTimestamps]
        let sequence = prompt + allText + [special.endOfText]
        guard sequence.count <= model.architecture.textContext else { return }
        let frames = max(1, windowFrames / 2)
        let heads = model.alignmentHeads
        let logits = network.crossAttentionLogits(tokens: sequence, heads: heads, frames: frames)
        let full = WordAlignment.matrix(logits: logits, heads: heads.count, tokens: sequence.count, frames: frames)
        // Rows of the positions that predict the text tokens and the end of text: from <|notimestamps|> on.
        let rows = allText.count + 1
        let matrix = Array(full[((prompt.count - 1) * frames)..<((prompt.count - 1 + rows) * frames)])
        let words = WordAlignment.words(allText, tokenizer: tokenizer, language: language)
        let times = WordAlignment.times(matrix: matrix, rows: rows, frames: frames, wordTokenCounts: words.map(\.tokens.count))
        var timed = zip(words, times).map {
            TranscriptWord(start: offset + $1.start, end: offset + $1.end, text: $0.text, tokens: $0.tokens)
        }
        let median = WhisperRecognizer.limitLongWords(&timed)
        timed = WhisperRecognizer.mergePunctuation(timed)
        // Hand the words to the segments their first tokens belong to.
        var next = 0
        var lastSpeech = lastSpeechTime
        let longest = median * 2
        for (s, tokens) in text.enumerated() {
            var count = 0
            var mine: [TranscriptWord] = []
            while next < timed.count, count < tokens.count {
                mine.append(timed[next])
                count += timed[next].tokens.count
                next += 1
            }
            // As Whisper: keep the segment's own start (end) when the first (last) word runs more than 0.5 s past it.
            if !mine.isEmpty {
                let n = mine.count - 1
                // After a pause, attention smears the first word back into it (Whisper's rule: cut it to twice the median).
                if mine[0].end - lastSpeech > median * 4,
                   mine[0].end - mine[0].start > longest || (n > 0 && mine[1].end - mine[0].start > longest * 2) {
                    if n > 0, mine[1].end - mine[1].start > longest {
                        let boundary = max(mine[1].end / 2, mine[1].end - longest)
                        mine[0].end = boundary
                        mine[1].start = boundary
                    }
                    mine[0].start = max(0, mine[0].end - longest)
                }
                if segments[s].start < mine[0].end && segments[s].start - 0.5 > mine[0].start {
                    mine[0].start = max(0, min(mine[0].end - median, segments[s].start))
                } else {
                    segments[s].start = mine[0].start
                }
                if segments[s].end > mine[n].start && segments[s].end + 0.5 < mine[n].end {
                    mine[n].end = max(mine[n].start + median, segments[s].end)
                } else {
                    segments[s].end = mine[n].end
                }
            }
            segments[s].words = mine
            lastSpeech = mine.last?.end ?? lastSpeech
            lastSpeechTime = lastSpeech
        }
    }

    /// Joins opening punctuation to the next word and closing punctuation to the previous one (Whisper's rule);
    /// the word keeps its own times.
    static func mergePunctuation(_ words: [TranscriptWord]) -> [TranscriptWord] {
        var w = words
        var i = w.count - 2
        while i >= 0 {
            if WordAlignment.prepended.contains(w[i].text.trimmingCharacters(in: .whitespaces)), w[i].text.hasPrefix(" ") || i == 0 {
                w[i + 1].text = w[i].text + w[i + 1].text.drop { $0 == " " && w[i].text.hasSuffix(" ") }
                w[i + 1].tokens = w[i].tokens + w[i + 1].tokens
                w[i + 1].start = min(w[i + 1].start, w[i + 1].end)
                w.remove(at: i)
            }
            i -= 1
        }
        var out: [TranscriptWord] = []
        for word in w {
            if var last = out.last, !last.text.hasSuffix(" "), WordAlignment.appended.contains(word.text) {
                last.text += word.text
                last.tokens += word.tokens
                out[out.count - 1] = last
            } else {
                out.append(word)
            }
        }
        return out
    }

    /// Whisper's guard against attention that lingers in pauses: a word longer than twice the median word
    /// (the median at most 0.7 s) is cut to that length when it is a sentence's final mark (its end moves) or
    /// follows one (its start moves). Runs before punctuation is merged.
    static func limitLongWords(_ words: inout [TranscriptWord]) -> Double {
        let durations = words.map { $0.end - $0.start }.filter { $0 > 0 }.sorted()
        guard !durations.isEmpty else { return 0 }
        let median = min(0.7, durations[durations.count / 2])
        let longest = median * 2
        func isMark(_ w: TranscriptWord) -> Bool {
            let t = w.text.trimmingCharacters(in: .whitespaces)
            return t.count == 1 && ".。!！?？".contains(t)
        }
        for i in words.indices.dropFirst() where words[i].end - words[i].start > longest {
            if isMark(words[i]) {
                words[i].end = words[i].start + longest
            } else if isMark(words[i - 1]) {
                words[i].start = words[i].end - longest
            }
        }
        return median
    }

    /// Splits a window's tokens at its timestamp pairs (Whisper's rule) and says how many mel frames to move on.
    /// A segment that starts and ends at the same timestamp is left out, as Whisper and faster-whisper leave it out of
    /// the transcript and of the earlier text given as a prompt. Times past the window's audio (a short last window is
    /// padded to 30 s) are then set to its end.
    static func segments(_ tokens: [Int], tokenizer: WhisperTokenizer, offset: Double, windowFrames: Int,
                         secondsPerFrame: Double) -> ([TranscriptSegment], Int) {
        let audioEnd = offset + Double(windowFrames) * secondsPerFrame
        let (found, advance) = unclampedSegments(tokens, tokenizer: tokenizer, offset: offset, windowFrames: windowFrames,
                                                 secondsPerFrame: secondsPerFrame)
        return (found.filter { $0.start != $0.end }.map { s in
            var s = s
            s.start = min(s.start, audioEnd)
            s.end = min(s.end, audioEnd)
            return s
        }, advance)
    }

    private static func unclampedSegments(_ tokens: [Int], tokenizer: WhisperTokenizer, offset: Double, windowFrames: Int,
                                          secondsPerFrame: Double) -> ([TranscriptSegment], Int) {
        let isTime = tokens.map { tokenizer.isTimestamp($0) }
        let framesPerStep = Int((0.02 / secondsPerFrame).rounded())
        let singleEnding = isTime.count >= 2 && !isTime[isTime.count - 2] && isTime[isTime.count - 1]
        var cuts = (1..<max(1, tokens.count)).filter { isTime[$0 - 1] && isTime[$0] }
        var found: [TranscriptSegment] = []
        if !cuts.isEmpty {
            if singleEnding { cuts.append(tokens.count) }
            var last = 0
            for cut in cuts {
                let piece = Array(tokens[last..<cut])
                let start = offset + tokenizer.time(of: piece.first!), end = offset + tokenizer.time(of: piece.last!)
                found.append(TranscriptSegment(start: start, end: end, text: tokenizer.decode(piece), tokens: piece))
                last = cut
            }
            if singleEnding { return (found, windowFrames) }
            return (found, (tokens[last - 1] - tokenizer.special.timestampBegin) * framesPerStep)
        }
        var duration = Double(windowFrames) * secondsPerFrame
        if let lastTime = tokens.last(where: { tokenizer.isTimestamp($0) }), lastTime != tokenizer.special.timestampBegin {
            duration = tokenizer.time(of: lastTime)
        }
        if !tokens.isEmpty {
            found.append(TranscriptSegment(start: offset, end: offset + duration, text: tokenizer.decode(tokens), tokens: tokens))
        }
        return (found, windowFrames)
    }

    /// Encodes one window (`chunkFrames × melBands`, frame-major) and returns the encoder's output
    /// (`audioContext × audioState`).
    public func encode(window: [Float]) -> [Float] {
        precondition(window.count == model.frontEnd.chunkFrames * model.frontEnd.melBands)
        window.withUnsafeBufferPointer { network.encode(window: $0.baseAddress!) }
        return Array(network.encoderOutput)
    }

    /// Encodes one window and decodes it: language detection (when `language` is nil), then tokens; `previous` as in
    /// ``decodeEncodedWindow(language:options:previous:)``, `frames` (the window's first frames only) as in
    /// ``WhisperNetwork/encode(window:frames:)``.
    public func decode(window: [Float], language: String?, options: TranscriptionOptions = TranscriptionOptions(),
                       previous: [Int] = [], frames: Int? = nil) -> WindowDecoding {
        precondition(window.count == model.frontEnd.chunkFrames * model.frontEnd.melBands)
        window.withUnsafeBufferPointer { network.encode(window: $0.baseAddress!, frames: frames) }
        return decodeEncodedWindow(language: language, options: options, previous: previous)
    }

    /// Decodes the window the network encoded last (``encode(window:)`` or ``decode(window:language:options:)``) again:
    /// the prompt once, then each of the options' temperatures until a decoding passes the guards (the last one is
    /// kept when none does, faster-whisper's choice: the likeliest of those that are not repetitive, else of all).
    /// `previous`: tokens of the text before (``TranscriptionOptions/conditionOnPreviousText``), read after
    /// `<|startofprev|>` ahead of the prompt; the no-speech probability is then read where `<|startoftranscript|>`
    /// follows them, and the language (when `language` is nil) without them.
    public func decodeEncodedWindow(language: String?, options: TranscriptionOptions = TranscriptionOptions(),
                                    previous: [Int] = []) -> WindowDecoding {
        network.prepareDecoder()
        let special = model.special, vocabularySize = model.architecture.vocabularySize
        // <|startoftranscript|> alone: its logits give the language (and the no-speech probability without earlier text).
        var chosen = model.languages[0]
        var languageProbability = 1.0, noSpeech = 0.0
        let known = language.flatMap { model.language(code: $0) }
        if known == nil || previous.isEmpty {
            let first = network.step(special.startOfTranscript)
            noSpeech = Double(WhisperRecognizer.probability(of: special.noSpeech, logits: first, count: vocabularySize))
            if known == nil { (chosen, languageProbability) = detectLanguage(first) }
        }
        if let known { chosen = known }
        if !previous.isEmpty {
            network.rewind(to: 0)
            let afterPrevious = network.prefill([special.startOfPrevious] + previous + [special.startOfTranscript])
            noSpeech = Double(WhisperRecognizer.probability(of: special.noSpeech, logits: afterPrevious, count: vocabularySize))
        }
        network.step(chosen.token)
        let logits = network.step(special.transcribe)
        let promptLength = network.position
        // Every temperature's sequences continue from the prompt: they share its keys and values.
        network.sharePrefix()
        promptLogits.update(from: logits, count: vocabularySize)
        let temperatures = options.temperatures.isEmpty ? [0] : options.temperatures
        var result = WindowDecoding(language: chosen.code, languageProbability: languageProbability, noSpeechProbability: noSpeech,
                                    tokens: [], averageLogProbability: 0)
        var attempts: [WindowDecoding] = []
        for (attempt, temperature) in temperatures.enumerated() {
            network.rewind(to: promptLength)
            let found: (tokens: [Int], logProbability: Double)
            if temperature <= 0 {
                found = options.beamSize > 1 ? beamSearch(beams: options.beamSize, options: options) : sample(temperature: 0, count: 1, options: options)
            } else {
                var generator = SplitMix64(state: options.seed &+ UInt64(attempt) &* 0x9E37_79B9_7F4A_7C15)
                found = sample(temperature: temperature, count: max(1, options.bestOf), options: options, generator: &generator)
            }
            result.tokens = found.tokens
            result.averageLogProbability = found.logProbability / Double(found.tokens.count + 1)
            result.temperature = temperature
            result.compressionRatio = WhisperRecognizer.compressionRatio(model.tokenizer.decode(found.tokens))
            if !WhisperRecognizer.needsFallback(result, options: options) { return result }
            attempts.append(result)
        }
        return WhisperRecognizer.bestAttempt(attempts, options: options) ?? result
    }

    /// The decoding kept when every temperature failed the guards (faster-whisper's choice): the highest mean
    /// log-probability among those whose text is not repetitive, or among all when every one is; it keeps the
    /// last temperature tried, so the prompt of earlier text is dropped after it.
    static func bestAttempt(_ attempts: [WindowDecoding], options: TranscriptionOptions) -> WindowDecoding? {
        guard let last = attempts.last else { return nil }
        let plain = attempts.filter { a in options.compressionRatioThreshold.map { a.compressionRatio <= $0 } ?? true }
        let pool = plain.isEmpty ? attempts : plain
        var best = pool[0]
        for a in pool.dropFirst() where a.averageLogProbability > best.averageLogProbability { best = a }
        best.temperature = last.temperature
        return best
    }

    /// The likeliest language token after `<|startoftranscript|>` and its probability among the model's languages.
    private func detectLanguage(_ logits: UnsafePointer<Float>) -> (WhisperLanguage, Double) {
        var top = -Float.infinity
        for l in model.languages { top = max(top, logits[l.token]) }
        var sum: Double = 0
        for l in model.languages { sum += exp(Double(logits[l.token] - top)) }
        var chosen = model.languages[0]
        var best = -Float.infinity
        for l in model.languages where logits[l.token] > best {
            best = logits[l.token]
            chosen = l
        }
        return (chosen, 1 / sum)
    }

    /// Whisper's rule for trying the next temperature: the text is too repetitive (compression ratio above the
    /// threshold) or too unlikely (mean log-probability below the threshold), unless the window is silence
    /// (no-speech probability above its threshold and the log-probability low), which is skipped instead.
    static func needsFallback(_ d: WindowDecoding, options: TranscriptionOptions) -> Bool {
        let unlikely = d.averageLogProbability < options.logProbabilityThreshold
        if let threshold = options.noSpeechThreshold, d.noSpeechProbability > threshold, unlikely { return false }
        if let threshold = options.compressionRatioThreshold, d.compressionRatio > threshold { return true }
        return unlikely
    }

    /// Greedy decoding (temperature 0, one sequence, exactly CTranslate2's greedy search) or sampling of `count`
    /// sequences at `temperature` side by side; returns the best by ``rank(logProbability:length:)`` with its
    /// summed log-probability (unscaled logits, the end of text included).
    private func sample(temperature: Double, count: Int, options: TranscriptionOptions) -> (tokens: [Int], logProbability: Double) {
        var none = SplitMix64(state: 0)
        return sample(temperature: temperature, count: count, options: options, generator: &none)
    }

    private func sample(temperature: Double, count: Int, options: TranscriptionOptions,
                        generator: inout SplitMix64) -> (tokens: [Int], logProbability: Double) {
        let special = model.special, vocabularySize = model.architecture.vocabularySize
        let limit = min(options.maximumTokensPerWindow, model.architecture.textContext - network.position)
        network.reserveSlots(count)
        for slot in 1..<max(1, count) { network.copySlot(0, to: slot) }
        var tokens = [[Int]](repeating: [], count: count)
        var sums = [Double](repeating: 0, count: count)
        var running = Array(0..<count)
        var logits = promptLogits
        var first = true
        while !running.isEmpty, tokens[running[0]].count < limit {
            var stillRunning: [Int] = []
            for (row, r) in running.enumerated() {
                // The prompt's logits serve every sequence at the first step.
                let rowLogits = first ? logits : logits + row * vocabularySize
                applyRules(rowLogits, sampled: tokens[r], options: options)
                let token = temperature <= 0
                    ? WhisperRecognizer.argmax(rowLogits, count: vocabularySize)
                    : WhisperRecognizer.draw(rowLogits, count: vocabularySize, temperature: temperature, generator: &generator)
                sums[r] += Double(rowLogits[token]) - WhisperRecognizer.logSumExp(rowLogits, count: vocabularySize)
                if token == special.endOfText || network.position >= model.architecture.textContext { continue }
                tokens[r].append(token)
                stillRunning.append(r)
            }
            running = stillRunning
            if running.isEmpty || tokens[running[0]].count >= limit { break }
            first = false
            rowTokens.removeAll(keepingCapacity: true)
            rowSlots.removeAll(keepingCapacity: true)
            for r in running {
                rowTokens.append(tokens[r].last!)
                rowSlots.append(r)
            }
            logits = rowTokens.withUnsafeBufferPointer { t in rowSlots.withUnsafeBufferPointer { network.step(tokens: t, slots: $0) } }
        }
        var best = 0
        for r in 1..<max(1, count)
            where WhisperRecognizer.rank(logProbability: sums[r], length: tokens[r].count)
                > WhisperRecognizer.rank(logProbability: sums[best], length: tokens[best].count) {
            best = r
        }
        return (tokens[best], sums[best])
    }

    /// One candidate continuation of a beam.
    struct Candidate: Equatable {
        var score: Double
        var parent: Int
        var token: Int
    }

    /// Beam search at temperature 0 with `beams` sequences, as CTranslate2's: the `2 · beams` likeliest continuations of
    /// all beams are candidates, those among the first `beams` that end the text are finished and the first `beams` that
    /// do not are the new beams (``selectBeams(_:beams:endOfText:)``); it stops when `beams` sequences are finished (or at
    /// the length limit, where the open beams count as finished). Each beam has its own key/value cache slot: a beam's
    /// first continuation keeps its parent's slot and the others get copies in slots no continuation kept.
    private func beamSearch(beams: Int, options: TranscriptionOptions) -> (tokens: [Int], logProbability: Double) {
        let special = model.special, vocabularySize = model.architecture.vocabularySize
        let limit = min(options.maximumTokensPerWindow, model.architecture.textContext - network.position)
        network.reserveSlots(beams)
        var active: [(tokens: [Int], logProbability: Double, slot: Int)] = [([], 0, 0)]
        var finished: [(tokens: [Int], logProbability: Double)] = []
        var candidates: [Candidate] = []
        var top: [(index: Int, value: Float)] = []
        var logits = promptLogits
        var length = 0
        while true {
            candidates.removeAll(keepingCapacity: true)
            for (row, beam) in active.enumerated() {
                let rowLogits = logits + row * vocabularySize
                applyRules(rowLogits, sampled: beam.tokens, options: options)
                let normaliser = WhisperRecognizer.logSumExp(rowLogits, count: vocabularySize)
                WhisperRecognizer.largest(rowLogits, count: vocabularySize, k: 2 * beams, into: &top)
                for t in top where t.value > -.infinity {
                    candidates.append(Candidate(score: beam.logProbability + Double(t.value) - normaliser, parent: row, token: t.index))
                }
            }
            let (next, ended) = WhisperRecognizer.selectBeams(candidates, beams: beams, endOfText: special.endOfText)
            finished += ended.map { (active[$0.parent].tokens, $0.score) }
            length += 1
            if finished.count >= beams || next.isEmpty || length >= limit || network.position >= model.architecture.textContext {
                if finished.count < beams {
                    for c in next where finished.count < beams { finished.append((active[c.parent].tokens + [c.token], c.score)) }
                }
                break
            }
            // Slots: the first continuation of a beam keeps its slot; the others take slots nobody kept, copied.
            var kept = [Bool](repeating: false, count: network.slots)
            var parentKept = [Bool](repeating: false, count: active.count)
            var slotOf = [Int](repeating: -1, count: next.count)
            for (i, c) in next.enumerated() where !parentKept[c.parent] {
                parentKept[c.parent] = true
                slotOf[i] = active[c.parent].slot
                kept[slotOf[i]] = true
            }
            var free = (0..<beams).filter { !kept[$0] }.makeIterator()
            for i in next.indices where slotOf[i] < 0 {
                slotOf[i] = free.next()!
                network.copySlot(active[next[i].parent].slot, to: slotOf[i])
            }
            active = next.enumerated().map { i, c in (active[c.parent].tokens + [c.token], c.score, slotOf[i]) }
            rowTokens.removeAll(keepingCapacity: true)
            rowSlots.removeAll(keepingCapacity: true)
            for beam in active {
                rowTokens.append(beam.tokens.last!)
                rowSlots.append(beam.slot)
            }
            logits = rowTokens.withUnsafeBufferPointer { t in rowSlots.withUnsafeBufferPointer { network.step(tokens: t, slots: $0) } }
        }
        var best = 0
        for i in finished.indices.dropFirst()
            where WhisperRecognizer.rank(logProbability: finished[i].logProbability, length: finished[i].tokens.count)
                > WhisperRecognizer.rank(logProbability: finished[best].logProbability, length: finished[best].tokens.count) {
            best = i
        }
        return finished.isEmpty ? ([], 0) : finished[best]
    }

    /// One step of beam search's choice, as CTranslate2's: of all proposals (each open beam's `2 · beams` likeliest next
    /// tokens), the `2 · beams` likeliest overall are candidates; those among the first `beams` that end the text are
    /// finished, and the open beams are the first `beams` candidates that do not end it (so an end of text ranked below
    /// the first `beams` is dropped, not finished). Ties: beam, then token order.
    static func selectBeams(_ proposals: [Candidate], beams: Int, endOfText: Int) -> (next: [Candidate], ended: [Candidate]) {
        let ranked = proposals.sorted {
            $0.score != $1.score ? $0.score > $1.score : ($0.parent != $1.parent ? $0.parent < $1.parent : $0.token < $1.token)
        }.prefix(2 * beams)
        var next: [Candidate] = [], ended: [Candidate] = []
        for (rank, c) in ranked.enumerated() {
            if c.token == endOfText {
                if rank < beams { ended.append(c) }
            } else if next.count < beams {
                next.append(c)
            }
        }
        return (next, ended)
    }

    /// Whisper's ranking of finished sequences without a length penalty: summed log-probability over the number of tokens.
    static func rank(logProbability: Double, length: Int) -> Double { logProbability / Double(max(1, length)) }

    static func argmax(_ x: UnsafePointer<Float>, count: Int) -> Int {
        var best = 0
        var bestValue = -Float.infinity
        for i in 0..<count where x[i] > bestValue {
            bestValue = x[i]
            best = i
        }
        return best
    }

    /// The `k` largest values with their indices, largest first (the lower index first among equals).
    static func largest(_ x: UnsafePointer<Float>, count: Int, k: Int, into top: inout [(index: Int, value: Float)]) {
        top.removeAll(keepingCapacity: true)
        for i in 0..<count {
            let v = x[i]
            if top.count == k, v <= top[k - 1].value { continue }
            var j = top.count
            while j > 0, top[j - 1].value < v { j -= 1 }
            top.insert((i, v), at: j)
            if top.count > k { top.removeLast() }
        }
    }

    /// A token drawn from the softmax of the logits divided by the temperature.
    static func draw(_ x: UnsafePointer<Float>, count: Int, temperature: Double, generator: inout SplitMix64) -> Int {
        var top = -Float.infinity
        for i in 0..<count { top = max(top, x[i]) }
        var sum = 0.0
        for i in 0..<count where x[i] > -.infinity { sum += exp(Double(x[i] - top) / temperature) }
        var u = Double.random(in: 0..<1, using: &generator) * sum
        var last = 0
        for i in 0..<count where x[i] > -.infinity {
            u -= exp(Double(x[i] - top) / temperature)
            last = i
            if u < 0 { return i }
        }
        return last
    }

    /// How well `text` compresses, Whisper's repetition measure, computed as faster-whisper and OpenAI's Whisper compute
    /// it: the text with surrounding white space trimmed, its UTF-8 bytes over their size after zlib's `compress` at the
    /// default level (Debian's zlib, the library Python's `zlib.compress` calls). Ordinary speech gives about 1–2, a
    /// phrase looping more than 2.4; 0 for empty text.
    public static func compressionRatio(_ text: String) -> Double {
        let bytes = Array(text.trimmingCharacters(in: .whitespacesAndNewlines).utf8)
        guard !bytes.isEmpty else { return 0 }
        var size = compressBound(uLong(bytes.count))
        var out = [UInt8](repeating: 0, count: Int(size))
        let status = out.withUnsafeMutableBufferPointer { o in
            bytes.withUnsafeBufferPointer { compress2(o.baseAddress, &size, $0.baseAddress, uLong(bytes.count), Z_DEFAULT_COMPRESSION) }
        }
        // compress2 only fails without memory or with a buffer smaller than compressBound's; count the text as stored then.
        let compressed = status == Z_OK ? Int(size) : bytes.count + 11
        return Double(bytes.count) / Double(compressed)
    }

    /// Sets the logits of every token that may not come next to −∞ (CTranslate2's order: suppressed tokens,
    /// tokens suppressed at the start, then the timestamp rules).
    private func applyRules(_ logits: UnsafeMutablePointer<Float>, sampled: [Int], options: TranscriptionOptions) {
        let special = model.special, n = model.architecture.vocabularySize
        let tsBegin = special.timestampBegin
        for i in 0..<n { disabled[i] = false }
        for id in model.suppressTokens { disabled[id] = true }
        disabled[special.noTimestamps] = true
        var checkTimestamps = false
        if sampled.isEmpty {
            for id in model.suppressAtBegin { disabled[id] = true }
            for i in 0..<tsBegin { disabled[i] = true }
            let lastAllowed = tsBegin + options.maximumInitialTimestampIndex
            if lastAllowed + 1 < n { for i in (lastAllowed + 1)..<n { disabled[i] = true } }
        } else {
            let last = sampled[sampled.count - 1]
            if last >= tsBegin {
                let penultimate = sampled.count >= 2 ? sampled[sampled.count - 2] : last
                if penultimate >= tsBegin {
                    for i in tsBegin..<n { disabled[i] = true }
                } else {
                    for i in 0..<special.endOfText { disabled[i] = true }
                    checkTimestamps = true
                }
            } else {
                checkTimestamps = true
            }
            if let lastTime = sampled.last(where: { $0 >= tsBegin }) {
                for i in tsBegin..<lastTime { disabled[i] = true }
            }
        }
        for i in 0..<n where disabled[i] { logits[i] = -.infinity }
        if checkTimestamps {
            var topText = -Float.infinity
            for i in 0..<tsBegin { topText = max(topText, logits[i]) }
            // −∞ when every timestamp is disabled, and then never above the text's best.
            let timeLogSum = WhisperRecognizer.logSumExp(logits + tsBegin, count: n - tsBegin)
            if timeLogSum > Double(topText) {
                for i in 0..<tsBegin { logits[i] = -.infinity }
            }
        }
    }

    /// log Σ exp(x[i]) (−∞ when every value is −∞): vectorised, see earmark_log_sum_exp.
    static func logSumExp(_ x: UnsafePointer<Float>, count: Int) -> Double { earmark_log_sum_exp(x, count) }

    static func probability(of id: Int, logits: UnsafePointer<Float>, count: Int) -> Float {
        Float(exp(Double(logits[id]) - logSumExp(logits, count: count)))
    }
}

extension WhisperRecognizer {
    /// Transcribes one stretch of a longer stream, as ``transcribe(samples:options:speech:progress:)`` reads each
    /// speech range of a recording: `samples` (at ``sampleRate``) start `offset` seconds into the stream, times
    /// come out in the stream's seconds, and `previousSpeechEnd` (the end of the last word before the stretch)
    /// steers word timing as the words before it would in a whole recording. When `language` is nil it is
    /// detected on the stretch's first window and set.
    public func transcribe(stretch samples: [Float], offset: Double, previousSpeechEnd: Double, language: inout String?,
                           options: TranscriptionOptions = TranscriptionOptions()) -> [TranscriptSegment] {
        lastSpeechTime = previousSpeechEnd
        var probability = 1.0
        return transcribePiece(samples, offset: offset, language: &language, languageProbability: &probability, options: options) { _ in }
    }
}
