@testable import EarmarkSpeech
import EarmarkTestSupport
import EarmarkDSP
import Foundation
import Testing

@Suite("Whisper's fallback rules and repetition measure (no model)")
struct WhisperFallbackRuleTests {
    static func decoding(logProbability: Double, compression: Double, noSpeech: Double = 0.01) -> WindowDecoding {
        var d = WindowDecoding(language: "en", languageProbability: 1, noSpeechProbability: noSpeech, tokens: [1, 2, 3],
                               averageLogProbability: logProbability)
        d.compressionRatio = compression
        return d
    }

    @Test("a repetitive or unlikely decoding is tried again at the next temperature; a likely one is kept; silence is not retried")
    func decision() {
        let options = TranscriptionOptions()
        #expect(!WhisperRecognizer.needsFallback(Self.decoding(logProbability: -0.3, compression: 1.4), options: options))
        #expect(WhisperRecognizer.needsFallback(Self.decoding(logProbability: -0.3, compression: 2.5), options: options))
        #expect(WhisperRecognizer.needsFallback(Self.decoding(logProbability: -1.2, compression: 1.4), options: options))
        // Unlikely but probably silence: skipped by transcribe, not decoded again.
        #expect(!WhisperRecognizer.needsFallback(Self.decoding(logProbability: -1.2, compression: 1.4, noSpeech: 0.7), options: options))
        // Likely text with a high no-speech probability is text.
        #expect(!WhisperRecognizer.needsFallback(Self.decoding(logProbability: -0.5, compression: 1.4, noSpeech: 0.9), options: options))
        // Thresholds turned off.
        var off = options
        off.compressionRatioThreshold = nil
        #expect(!WhisperRecognizer.needsFallback(Self.decoding(logProbability: -0.3, compression: 9), options: off))
        off.noSpeechThreshold = nil
        #expect(WhisperRecognizer.needsFallback(Self.decoding(logProbability: -1.2, compression: 1.4, noSpeech: 0.99), options: off))
    }

    @Test("when every temperature fails, the likeliest decoding that is not repetitive is kept, with the last temperature")
    func bestAttemptWhenAllFail() {
        let options = TranscriptionOptions()
        func attempt(_ logProbability: Double, _ compression: Double, _ temperature: Double) -> WindowDecoding {
            var d = Self.decoding(logProbability: logProbability, compression: compression)
            d.temperature = temperature
            return d
        }
        #expect(WhisperRecognizer.bestAttempt([], options: options) == nil)
        // The likeliest is repetitive: the likeliest of the others wins (faster-whisper's rule; Whisper keeps the last).
        let attempts = [attempt(-1.5, 1.3, 0), attempt(-0.2, 3.1, 0.2), attempt(-1.1, 1.6, 0.4), attempt(-1.4, 1.2, 0.6)]
        let best = WhisperRecognizer.bestAttempt(attempts, options: options)
        #expect(best?.averageLogProbability == -1.1 && best?.compressionRatio == 1.6)
        #expect(best?.temperature == 0.6, "the last temperature is reported, so the prompt of earlier text is dropped")
        // All repetitive: the likeliest of all.
        let looping = [attempt(-1.5, 2.6, 0), attempt(-1.2, 2.9, 0.2), attempt(-1.3, 3.5, 0.4)]
        #expect(WhisperRecognizer.bestAttempt(looping, options: options)?.averageLogProbability == -1.2)
        // Ties keep the earliest.
        let tied = [attempt(-1.2, 1.0, 0), attempt(-1.2, 1.1, 0.2)]
        #expect(WhisperRecognizer.bestAttempt(tied, options: options)?.compressionRatio == 1.0)
    }

    @Test("compression ratio is zlib's, as faster-whisper computes it: trimmed UTF-8 bytes over zlib.compress's size")
    func compressionRatio() {
        #expect(WhisperRecognizer.compressionRatio("") == 0)
        #expect(WhisperRecognizer.compressionRatio("  ") == 0)
        // Sizes from Python's zlib.compress (Debian's zlib 1.2.13, default level) on the same bytes.
        #expect(WhisperRecognizer.compressionRatio(" Please enter your agent number followed by the pound key.") == 57.0 / 62.0)
        #expect(WhisperRecognizer.compressionRatio(String(repeating: "Thank you. ", count: 20)) == 219.0 / 22.0)
        #expect(WhisperRecognizer.compressionRatio(String(repeating: "a", count: 300)) == 300.0 / 13.0)
        #expect(WhisperRecognizer.compressionRatio("é") == 2.0 / 10.0)
        // A window of the joined English prompts (faster-whisper's text for it): zlib gives 2.156; the fixed-Huffman
        // estimate used before gave 1.83, far enough below that a window zlib finds repetitive (over 2.4) could pass.
        let window = "4 to record this conference or 8 to exit this menu and return to the conference. You are entering conference "
            + "number. Is now in the conference. That is not a valid conference number. Please try again. This conference is locked. "
            + "The conference is now locked. You are now muted. The conference is now being recorded. The conference is now unlocked."
        #expect(WhisperRecognizer.compressionRatio(" " + window) == 345.0 / 160.0)
    }

    @Test("beam selection as CTranslate2's: an end of text ranked below the first beams is dropped, not finished")
    func beamSelection() {
        typealias C = WhisperRecognizer.Candidate
        let end = 50257
        // Two beams; proposals in no particular order. Ranked: a(−1.0), end(−1.1), b(−1.2), end(−1.3), c(−1.4), d(−1.5).
        let proposals = [C(score: -1.4, parent: 1, token: 30), C(score: -1.0, parent: 0, token: 10), C(score: -1.3, parent: 1, token: end),
                         C(score: -1.1, parent: 0, token: end), C(score: -1.2, parent: 0, token: 20), C(score: -1.5, parent: 1, token: 40)]
        let (next, ended) = WhisperRecognizer.selectBeams(proposals, beams: 2, endOfText: end)
        #expect(ended == [C(score: -1.1, parent: 0, token: end)], "only the end of text among the first two is finished")
        #expect(next == [C(score: -1.0, parent: 0, token: 10), C(score: -1.2, parent: 0, token: 20)])
        // Three beams all ending on top: all three finish, the next three candidates continue, the seventh does not.
        let ends = [C(score: -0.1, parent: 0, token: end), C(score: -0.2, parent: 1, token: end), C(score: -0.3, parent: 2, token: end),
                    C(score: -0.4, parent: 0, token: 5), C(score: -0.5, parent: 0, token: 6), C(score: -0.6, parent: 0, token: 7),
                    C(score: -0.7, parent: 0, token: 8)]
        let (few, three) = WhisperRecognizer.selectBeams(ends, beams: 3, endOfText: end)
        #expect(three.count == 3 && few.map(\.token) == [5, 6, 7])
        // Ties: beam order, then token order.
        let tied = [C(score: -1, parent: 1, token: 3), C(score: -1, parent: 0, token: 9), C(score: -1, parent: 0, token: 4)]
        #expect(WhisperRecognizer.selectBeams(tied, beams: 2, endOfText: end).next.map(\.token) == [4, 9])
    }

    @Test("ranking divides the summed log-probability by the length; top-k keeps the largest in order")
    func rankingAndTopK() {
        #expect(WhisperRecognizer.rank(logProbability: -6, length: 12) > WhisperRecognizer.rank(logProbability: -4, length: 4))
        let values: [Float] = [0.5, 3, -1, 3, 7, 2]
        var top: [(index: Int, value: Float)] = []
        values.withUnsafeBufferPointer { WhisperRecognizer.largest($0.baseAddress!, count: values.count, k: 3, into: &top) }
        #expect(top.map(\.index) == [4, 1, 3])
    }

    @Test("sampling is reproducible from its seed")
    func seededDraws() {
        let logits: [Float] = [1, 2, 0.5, -.infinity, 1.5]
        func draws(_ seed: UInt64) -> [Int] {
            var g = SplitMix64(state: seed)
            return (0..<50).map { _ in logits.withUnsafeBufferPointer { WhisperRecognizer.draw($0.baseAddress!, count: 5, temperature: 1, generator: &g) } }
        }
        #expect(draws(7) == draws(7))
        #expect(draws(7) != draws(8))
        #expect(!draws(7).contains(3), "a suppressed token was drawn")
        #expect(Set(draws(7)).count > 1)
    }
}

@Suite("Beam search and temperature fallback on real speech", .enabled(if: TestSpeechModel.available, Comment(rawValue: TestSpeechModel.skipReason)))
struct WhisperBeamSearchTests {
    static func words(_ text: String) -> [String] {
        text.lowercased().split { !$0.isLetter && !$0.isNumber && $0 != "'" }.map(String.init)
    }

    static func wordErrors(_ a: [String], _ b: [String]) -> Int {
        var previous = Array(0...b.count)
        for (i, x) in a.enumerated() {
            var current = [i + 1] + [Int](repeating: 0, count: b.count)
            for (j, y) in b.enumerated() { current[j + 1] = min(previous[j + 1] + 1, current[j] + 1, previous[j] + (x == y ? 0 : 1)) }
            previous = current
        }
        return previous[b.count]
    }

    @Test("beam search (5 beams) is at least as close to the shipped transcripts as greedy decoding, with timestamps in order")
    func beamAtLeastAsGoodAsGreedy() throws {
        let recognizer = WhisperRecognizer(model: try TestSpeechModel.model())
        // The first three are read right by greedy decoding; in the last, greedy decoding (CTranslate2's too) hears
        // "please and your password".
        for stem in ["conf-onlyperson", "agent-alreadyon", "all-circuits-busy-now", "auth-incorrect"] {
            let samples = try SpeechAudio.load(path: try SpeechPrompts.path(stem))
            let expected = Self.words(try SpeechPrompts.transcript(stem))
            var beam = TranscriptionOptions(language: "en", beamSize: 5)
            beam.temperatures = [0]
            var greedyOptions = beam
            greedyOptions.beamSize = 1
            let result = try recognizer.transcribe(samples: samples, options: beam)
            let greedy = try recognizer.transcribe(samples: samples, options: greedyOptions)
            let beamErrors = Self.wordErrors(expected, Self.words(result.text))
            let greedyErrors = Self.wordErrors(expected, Self.words(greedy.text))
            print("\(stem): beam 5 \(beamErrors) word errors (\(result.text)); greedy \(greedyErrors) (\(greedy.text))")
            #expect(beamErrors <= greedyErrors, "\(stem): beam \(result.text) / greedy \(greedy.text)")
            if stem != "auth-incorrect" { #expect(beamErrors == 0, "\(stem): \(result.text)") }
            var last = 0.0
            for s in result.segments {
                #expect(s.start >= last - 1e-9 && s.end >= s.start, "\(stem): \(s)")
                last = s.end
                let times = s.tokens.filter { recognizer.model.tokenizer.isTimestamp($0) }
                #expect(times == times.sorted(), "\(stem): timestamps go back in \(s.tokens)")
            }
            #expect((result.segments.last?.end ?? 0) <= result.duration + 1e-9)
        }
    }

    @Test("int8 decoder weights: the same words on four prompts (beam 5), the same greedy text tokens, logits near the float16 ones")
    func int8Weights() throws {
        let float16 = WhisperRecognizer(model: try TestSpeechModel.model())
        let int8 = WhisperRecognizer(model: try TestSpeechModel.int8Model())
        #expect(float16.model.decoderWeights == .float16 && int8.model.decoderWeights == .int8)
        let vocabularySize = float16.model.architecture.vocabularySize, special = float16.model.special
        let english = float16.model.language(code: "en")!.token
        var worst: Float = 0
        for stem in ["conf-onlyperson", "agent-alreadyon", "all-circuits-busy-now", "auth-incorrect"] {
            let samples = try SpeechAudio.load(path: try SpeechPrompts.path(stem))
            var options = TranscriptionOptions(language: "en", beamSize: 5)
            options.temperatures = [0]
            let a = try float16.transcribe(samples: samples, options: options), b = try int8.transcribe(samples: samples, options: options)
            #expect(Self.words(a.text) == Self.words(b.text), "\(stem): float16 \(a.text) / int8 \(b.text)")
            // Logits along the float16 decoding's own tokens (same encoder output in both: the encoder is Float32 in both).
            let window = float16.frontEnd.spectrogram(samples).window(start: 0, length: float16.model.frontEnd.chunkFrames)
            let tokens = float16.decode(window: window, language: "en", options: Self.greedy).tokens
            let quantised = int8.decode(window: window, language: "en", options: Self.greedy).tokens
            // Greedy decoding: the same text tokens; the timestamps (near-ties 20 ms apart) within 0.1 s.
            let timestampBegin = special.timestampBegin
            #expect(tokens.filter { $0 < timestampBegin } == quantised.filter { $0 < timestampBegin }, "\(stem): \(tokens) / \(quantised)")
            let times = tokens.filter { $0 >= timestampBegin }, quantisedTimes = quantised.filter { $0 >= timestampBegin }
            #expect(times.count == quantisedTimes.count && zip(times, quantisedTimes).allSatisfy { abs($0 - $1) <= 5 },
                    "\(stem): timestamps \(times) / \(quantisedTimes)")
            float16.network.prepareDecoder()
            int8.network.prepareDecoder()
            for t in [special.startOfTranscript, english, special.transcribe] + tokens.prefix(40) {
                let x = Array(UnsafeBufferPointer(start: float16.network.step(t), count: vocabularySize))
                let y = Array(UnsafeBufferPointer(start: int8.network.step(t), count: vocabularySize))
                let scale = x.map { abs($0) }.max()!
                let error = zip(x, y).map { abs($0 - $1) }.max()!
                worst = max(worst, error / scale)
                // 0.041 of the largest logit measured (2026-11-27); a wrong scale or a misread row would be far off.
                #expect(error < 0.08 * scale, "\(stem): int8 logits differ by \(error) of \(scale)")
            }
        }
        print("int8 decoder weights: largest logit difference \(worst) of the largest logit")
    }

    /// Greedy decoding, English, temperature 0 only.
    static var greedy: TranscriptionOptions {
        var options = TranscriptionOptions(language: "en", beamSize: 1)
        options.temperatures = [0]
        return options
    }

    /// A recogniser and its greedy decoding of the whole 30-s window of prompt `stem`.
    static func greedyWindow(_ stem: String) throws -> (WhisperRecognizer, WindowDecoding) {
        let recognizer = WhisperRecognizer(model: try TestSpeechModel.model())
        let samples = try SpeechAudio.load(path: try SpeechPrompts.path(stem))
        let window = recognizer.frontEnd.spectrogram(samples).window(start: 0, length: recognizer.model.frontEnd.chunkFrames)
        return (recognizer, recognizer.decode(window: window, language: "en", options: greedy))
    }

    @Test("earlier text read in groups (prefill) gives the logits of reading it token by token, and decoding after it still works")
    func prefillMatchesSteps() throws {
        let (recognizer, decoded) = try Self.greedyWindow("conf-onlyperson")
        let network = recognizer.network, special = recognizer.model.special
        let vocabularySize = recognizer.model.architecture.vocabularySize
        #expect(Self.words(recognizer.model.tokenizer.decode(decoded.tokens)) == Self.words(try SpeechPrompts.transcript("conf-onlyperson")))
        // More than two groups of earlier text (text and time tokens), then the prompt.
        var previous: [Int] = []
        while previous.count < 2 * WhisperNetwork.prefillRows + 5 { previous += decoded.tokens }
        let sequence = [special.startOfPrevious] + previous + [special.startOfTranscript]
        let english = recognizer.model.language(code: "en")!.token
        network.prepareDecoder()
        var stepped: [Float] = []
        for t in sequence { stepped = Array(UnsafeBufferPointer(start: network.step(t), count: vocabularySize)) }
        let steppedNext = Array(UnsafeBufferPointer(start: network.step(english), count: vocabularySize))
        network.prepareDecoder()
        let filled = Array(UnsafeBufferPointer(start: network.prefill(sequence), count: vocabularySize))
        #expect(network.position == sequence.count)
        let filledNext = Array(UnsafeBufferPointer(start: network.step(english), count: vocabularySize))
        for (a, b) in [(stepped, filled), (steppedNext, filledNext)] {
            let scale = a.map { abs($0) }.max()!
            let error = zip(a, b).map { abs($0 - $1) }.max()!
            #expect(error < 1e-3 * scale, "prefill differs from steps by \(error) of \(scale)")
            #expect(a.indices.max { a[$0] < a[$1] } == b.indices.max { b[$0] < b[$1] })
        }
        // The window decoded after its own text as earlier text still says the same.
        let again = recognizer.decodeEncodedWindow(language: "en", options: Self.greedy, previous: decoded.tokens)
        #expect(Self.words(recognizer.model.tokenizer.decode(again.tokens)) == Self.words(try SpeechPrompts.transcript("conf-onlyperson")))
        #expect(again.noSpeechProbability >= 0 && again.noSpeechProbability < 0.5)
    }

    @Test("sequences stepped side by side after a shared prompt (read once for all rows) give the logits of each stepped alone")
    func sharedPrefix() throws {
        let (recognizer, decoding) = try Self.greedyWindow("agent-alreadyon")
        let network = recognizer.network, special = recognizer.model.special
        let vocabularySize = recognizer.model.architecture.vocabularySize
        let decoded = decoding.tokens
        try #require(decoded.count >= 8)
        let english = recognizer.model.language(code: "en")!.token
        let prompt = [special.startOfPrevious] + decoded + decoded + [special.startOfTranscript, english, special.transcribe]
        // Three continuations: the decoding itself, the same from its third token on, and one a token off from the start.
        let continuations = [Array(decoded.prefix(6)), Array(decoded[2..<8]), [decoded[1]] + Array(decoded.prefix(5))]
        func logits(_ p: UnsafeMutablePointer<Float>, row: Int) -> [Float] {
            Array(UnsafeBufferPointer(start: p + row * vocabularySize, count: vocabularySize))
        }
        // Each alone in slot 0, nothing shared (and the prompt's own logits).
        var alone: [[[Float]]] = []
        var promptLogits: [Float] = []
        for c in continuations {
            network.prepareDecoder()
            promptLogits = logits(network.prefill(prompt), row: 0)
            #expect(network.sharedPrefix == 0)
            alone.append(c.map { logits(network.step($0), row: 0) })
        }
        func near(_ a: [Float], _ b: [Float], _ what: String) {
            let scale = a.map { abs($0) }.max()!, error = zip(a, b).map { abs($0 - $1) }.max()!
            #expect(error < 1e-3 * scale, "\(what): differs by \(error) of \(scale)")
            #expect(a.indices.max { a[$0] < a[$1] } == b.indices.max { b[$0] < b[$1] }, "\(what)")
        }
        // Side by side in slots 2, 0 and 1 after the prompt is shared; after three steps slot 1 becomes a copy of slot 2
        // and goes on with the first continuation.
        network.prepareDecoder()
        network.prefill(prompt)
        network.sharePrefix()
        #expect(network.sharedPrefix == prompt.count)
        network.reserveSlots(3)
        let slots = [2, 0, 1]
        for i in continuations[0].indices {
            if i == 3 { network.copySlot(2, to: 1) }
            let source = [0, 1, i < 3 ? 2 : 0]
            let tokens = source.map { continuations[$0][i] }
            let out = tokens.withUnsafeBufferPointer { t in slots.withUnsafeBufferPointer { network.step(tokens: t, slots: $0) } }
            for r in 0..<3 { near(alone[source[r]][i], logits(out, row: r), "step \(i), slot \(slots[r])") }
        }
        // Rewinding into the prompt stops the sharing; slot 0 still holds all of the prompt.
        network.rewind(to: prompt.count - 1)
        #expect(network.sharedPrefix == 0)
        near(promptLogits, logits(network.step(prompt.last!), row: 0), "the prompt's last token again")
    }

    @Test("a forced fallback runs every temperature, samples reproducibly and keeps the likeliest decoding")
    func forcedFallback() throws {
        let recognizer = WhisperRecognizer(model: try TestSpeechModel.model())
        let samples = try SpeechAudio.load(path: try SpeechPrompts.path("conf-onlyperson"))
        let window = recognizer.frontEnd.spectrogram(samples).window(start: 0, length: recognizer.model.frontEnd.chunkFrames)
        var options = TranscriptionOptions(language: "en", beamSize: 2)
        options.temperatures = [0, 0.5, 1]
        options.bestOf = 2
        options.maximumTokensPerWindow = 40
        options.noSpeechThreshold = nil
        options.logProbabilityThreshold = 0  // every decoding is "unlikely"
        options.seed = 42
        let first = recognizer.decode(window: window, language: "en", options: options)
        #expect(first.temperature == 1)
        #expect(!first.tokens.isEmpty && first.tokens.count <= 40)
        #expect(first.averageLogProbability < 0)
        let again = recognizer.decode(window: window, language: "en", options: options)
        #expect(again == first, "same seed, same window: same sample")
        // Without the forced condition the decoding at temperature 0 is kept.
        var normal = options
        normal.logProbabilityThreshold = -1
        let kept = recognizer.decode(window: window, language: "en", options: normal)
        #expect(kept.temperature == 0)
        #expect(kept.compressionRatio > 0 && kept.compressionRatio < 2.4)
        #expect(Self.words(recognizer.model.tokenizer.decode(kept.tokens)) == Self.words(try SpeechPrompts.transcript("conf-onlyperson")))
    }
}
