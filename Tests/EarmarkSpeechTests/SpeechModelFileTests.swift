@testable import EarmarkSpeech
import EarmarkTestSupport
import Foundation
import Testing

/// A tiny Whisper-shaped model written by the test itself (format of docs/speech.md): 8 wide, 2 heads, one
/// layer each side, 1-s windows, 300 tokens (256 single bytes, 10 special, 34 times), pseudo-random weights.
enum TinyModel {
    static let vocabulary: [String] = {
        var table = [String](repeating: "", count: 256)
        var next = 256
        for byte in 0..<256 {
            let printable = (33...126).contains(byte) || (161...172).contains(byte) || (174...255).contains(byte)
            table[byte] = String(UnicodeScalar(UInt32(printable ? byte : next))!)
            if !printable { next += 1 }
        }
        let special = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|fr|>", "<|translate|>", "<|transcribe|>",
                       "<|startoflm|>", "<|startofprev|>", "<|nocaptions|>", "<|notimestamps|>"]
        return table + special + (0..<34).map { String(format: "<|%.2f|>", Double($0) * 0.02) }
    }()

    static func header(tensors: [String: Any], blobBytes: Int, checksum: String) -> [String: Any] {
        [
            "name": "tiny", "licence": "test data",
            "architecture": ["melBands": 80, "audioContext": 50, "audioState": 8, "audioHeads": 2, "audioLayers": 1,
                             "vocabularySize": 300, "textContext": 16, "textState": 8, "textHeads": 2, "textLayers": 1],
            "frontEnd": ["sampleRate": 16000, "fftLength": 400, "hopLength": 160, "melBands": 80, "chunkSeconds": 1],
            "special": ["endOfText": 256, "startOfTranscript": 257, "translate": 260, "transcribe": 261, "startOfPrevious": 263,
                        "noSpeech": 264, "noTimestamps": 265, "timestampBegin": 266],
            "languages": [["code": "en", "token": 258], ["code": "fr", "token": 259]],
            "suppressTokens": [260, 261, 262, 263, 264], "suppressAtBegin": [32, 256],
            "tensors": tensors, "blobBytes": blobBytes, "blobChecksum": checksum,
        ]
    }

    static func shapes() -> [String: [Int]] {
        let d = 8
        var s: [String: [Int]] = [
            "encoder/conv1/weight": [d, 80, 3], "encoder/conv1/bias": [d], "encoder/conv2/weight": [d, d, 3], "encoder/conv2/bias": [d],
            "encoder/position_encodings/encodings": [50, d], "encoder/layer_norm/gamma": [d], "encoder/layer_norm/beta": [d],
            "decoder/embeddings/weight": [300, d], "decoder/position_encodings/encodings": [16, d],
            "decoder/layer_norm/gamma": [d], "decoder/layer_norm/beta": [d],
        ]
        func norm(_ p: String) { s[p + "/layer_norm/gamma"] = [d]; s[p + "/layer_norm/beta"] = [d] }
        func linear(_ p: String, _ r: Int, _ c: Int) { s[p + "/weight"] = [r, c]; s[p + "/bias"] = [r] }
        norm("encoder/layer_0/self_attention"); linear("encoder/layer_0/self_attention/linear_0", 3 * d, d)
        linear("encoder/layer_0/self_attention/linear_1", d, d)
        norm("encoder/layer_0/ffn"); linear("encoder/layer_0/ffn/linear_0", 4 * d, d); linear("encoder/layer_0/ffn/linear_1", d, 4 * d)
        norm("decoder/layer_0/self_attention"); linear("decoder/layer_0/self_attention/linear_0", 3 * d, d)
        linear("decoder/layer_0/self_attention/linear_1", d, d)
        norm("decoder/layer_0/attention"); linear("decoder/layer_0/attention/linear_0", d, d)
        linear("decoder/layer_0/attention/linear_1", 2 * d, d); linear("decoder/layer_0/attention/linear_2", d, d)
        norm("decoder/layer_0/ffn"); linear("decoder/layer_0/ffn/linear_0", 4 * d, d); linear("decoder/layer_0/ffn/linear_1", d, 4 * d)
        return s
    }

    static func checksum(_ blob: [UInt8]) -> String {
        var s1: UInt64 = 0, s2: UInt64 = 0
        for i in 0..<(blob.count / 8) {
            var w: UInt64 = 0
            for b in 0..<8 { w |= UInt64(blob[8 * i + b]) << (8 * b) }
            s1 &+= w
            s2 &+= UInt64(i + 1) &* w
        }
        return String(format: "%016llx:%016llx", s1, s2)
    }

    /// The file's bytes; `edit` may change the header before it is written.
    static func data(edit: (inout [String: Any]) -> Void = { _ in }) throws -> Data {
        var blob: [UInt8] = []
        var tensors: [String: Any] = [:]
        var seed: UInt64 = 0x9E37_79B9_7F4A_7C15
        for (name, shape) in shapes().sorted(by: { $0.key < $1.key }) {
            while blob.count % 64 != 0 { blob.append(0) }
            let count = shape.reduce(1, *)
            tensors[name] = ["offset": blob.count, "bytes": 2 * count, "shape": shape, "type": "float16"]
            for _ in 0..<count {
                seed = seed &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
                var value = Float(Int64(seed >> 40) - (1 << 23)) / Float(1 << 23) * 0.5
                if name.hasSuffix("gamma") { value += 1 }
                let bits = Float16(value).bitPattern
                blob += [UInt8(bits & 0xFF), UInt8(bits >> 8)]
            }
        }
        while blob.count % 64 != 0 { blob.append(0) }
        let vocabulary = Array(vocabulary.joined(separator: "\n").utf8)
        tensors["vocabulary"] = ["offset": blob.count, "bytes": vocabulary.count, "shape": [vocabulary.count], "type": "uint8"]
        blob += vocabulary
        while blob.count % 8 != 0 { blob.append(0) }
        var header = header(tensors: tensors, blobBytes: blob.count, checksum: checksum(blob))
        edit(&header)
        let text = try JSONSerialization.data(withJSONObject: header, options: [.sortedKeys])
        var out = Array("EARWHSPR".utf8)
        for v in [UInt32(1), UInt32(text.count)] { out += (0..<4).map { UInt8((v >> (8 * $0)) & 0xFF) } }
        out += text
        while out.count % 64 != 0 { out.append(0) }
        return Data(out + blob)
    }
}

@Suite("Speech model files: the loader, the tokenizer, and damaged or foreign files")
struct SpeechModelFileTests {
    @Test("a tiny model written from the format description loads and runs on noise without trouble")
    func tinyModelRuns() throws {
        let model = try SpeechModel(data: TinyModel.data(), name: "tiny")
        #expect(model.architecture.audioState == 8)
        #expect(model.languages.map(\.code) == ["en", "fr"])
        #expect(model.tokenizer.tokens.count == 300)
        let recognizer = WhisperRecognizer(model: model)
        var noise = SeededRandom(seed: 7)
        let samples = (0..<40_000).map { _ in Float(Double.random(in: -0.1..<0.1, using: &noise)) }
        let result = try recognizer.transcribe(samples: samples, options: TranscriptionOptions(language: "fr"))
        #expect(result.language == "fr")
        #expect(abs(result.duration - 2.5) < 1e-9)
        for segment in result.segments {
            #expect(segment.start >= 0 && segment.end >= segment.start && segment.start <= 2.5)
            #expect(segment.tokens.count <= 13)
        }
        let auto = recognizer.decode(window: [Float](repeating: 0, count: 100 * 80), language: nil)
        #expect(["en", "fr"].contains(auto.language))
        #expect(auto.languageProbability >= 0.5 && auto.languageProbability <= 1)
        #expect(throws: SpeechModelError.self) { try recognizer.transcribe(samples: samples, options: TranscriptionOptions(language: "xx")) }
        // Empty and very short recordings.
        #expect(try recognizer.transcribe(samples: []).segments.isEmpty)
        _ = try recognizer.transcribe(samples: [0.5, -0.5, 0.25])
    }

    @Test("byte-level BPE decoding: bytes joined across tokens, special and time tokens left out")
    func tokenizerDecodes() throws {
        let tokenizer = try SpeechModel(data: TinyModel.data(), name: "tiny").tokenizer
        // "é" is 0xC3 0xA9, split over two tokens; 0x20 (space) and 0x0A are stored as U+0120 and U+010A.
        #expect(tokenizer.decode([0xC3, 0xA9, 266, 0x20, 0x61, 256]) == "é a")
        #expect(tokenizer.decode([0x0A]) == "\n")
        #expect(tokenizer.tokens[0x20] == "\u{0120}")
        #expect(tokenizer.bytes(of: 0x41) == [0x41])
        #expect(tokenizer.isTimestamp(266) && !tokenizer.isTimestamp(265))
        #expect(abs(tokenizer.time(of: 291) - 0.5) < 1e-12)
        // A lone continuation byte is not valid UTF-8.
        #expect(tokenizer.decode([0xA9]) == "\u{FFFD}")
    }

    @Test("a window's tokens split at timestamp pairs; a segment that starts and ends at one time is left out, as Whisper does")
    func instantaneousSegmentsDropped() throws {
        let tokenizer = try SpeechModel(data: TinyModel.data(), name: "tiny").tokenizer
        // Time tokens from 266 (0.00 s), 0.02 s apart: <0.00> a <0.20><0.20> b <0.20><0.40> c <0.60><0.60>.
        let tokens = [266, 0x61, 276, 276, 0x62, 276, 286, 0x63, 296, 296]
        let (found, advance) = WhisperRecognizer.segments(tokens, tokenizer: tokenizer, offset: 10, windowFrames: 3000, secondsPerFrame: 0.01)
        #expect(found.map(\.text) == ["a", "c"])
        #expect(zip(found.map(\.start), [10, 10.4]).allSatisfy { abs($0 - $1) < 1e-9 })
        #expect(zip(found.map(\.end), [10.2, 10.6]).allSatisfy { abs($0 - $1) < 1e-9 })
        #expect(advance == 60, "the window still moves on to the last complete pair's end, <0.60>")
    }

    @Test("truncated, damaged, foreign and missing files give clear errors, never a crash")
    func damagedFilesAreRefused() throws {
        let good = try TinyModel.data()
        func code(_ data: Data) -> SpeechModelError.Code? {
            do {
                _ = try SpeechModel(data: data, name: "test")
                return nil
            } catch let e as SpeechModelError {
                #expect(!e.message.isEmpty)
                return e.code
            } catch {
                Issue.record("unexpected error \(error)")
                return nil
            }
        }
        #expect(code(good) == nil)
        for cut in [0, 7, 15, 16, 100, good.count / 2, good.count - 8, good.count - 1] {
            #expect(code(good.prefix(cut)) == .invalidFile, "cut at \(cut)")
        }
        #expect(code(good + Data([0, 0, 0, 0, 0, 0, 0, 0])) == .invalidFile)
        var flipped = good
        flipped[good.count - 3000] ^= 0x10
        #expect(code(flipped) == .invalidFile)
        var magic = good
        magic[0] = UInt8(ascii: "X")
        #expect(code(magic) == .invalidFile)
        var version = good
        version[8] = 2
        #expect(code(version) == .unsupportedVersion)
        var length = good
        length[15] = 0x7F
        #expect(code(length) == .invalidFile)
        #expect(code(Data("EARMODEL".utf8) + good.dropFirst(8)) == .invalidFile)
        // A consistent file whose header states another architecture or impossible numbers.
        let wrongWidth = try TinyModel.data { h in
            var a = h["architecture"] as! [String: Any]
            a["audioState"] = 16; a["textState"] = 16
            h["architecture"] = a
        }
        #expect(code(wrongWidth) == .inconsistent)
        let hugeNumbers = try TinyModel.data { h in
            var a = h["architecture"] as! [String: Any]
            a["vocabularySize"] = Int.max; a["audioLayers"] = Int.max
            h["architecture"] = a
        }
        #expect(code(hugeNumbers) == .inconsistent)
        let outside = try TinyModel.data { h in
            var t = h["tensors"] as! [String: Any]
            var e = t["decoder/embeddings/weight"] as! [String: Any]
            e["offset"] = Int.max - 3
            t["decoder/embeddings/weight"] = e
            h["tensors"] = t
        }
        #expect(code(outside) == .inconsistent)
        let badToken = try TinyModel.data { h in h["suppressTokens"] = [1_000_000] }
        #expect(code(badToken) == .inconsistent)
        let tmp = try TemporaryDirectory("speech-model")
        #expect(throws: SpeechModelError(.notFound, "no speech model at \(tmp.path("none.emodel")) (run tools/fetch-speech-model.sh to fetch and convert Whisper base)")) {
            try SpeechModel(path: tmp.path("none.emodel"))
        }
    }

    @Test("the converted Whisper base: 51,865 tokens, 99 languages, its licence, and known tokens decode",
          .enabled(if: TestSpeechModel.available, Comment(rawValue: TestSpeechModel.skipReason)))
    func realModelHeader() throws {
        let model = try TestSpeechModel.model()
        let a = model.architecture
        #expect([a.melBands, a.audioContext, a.audioState, a.audioHeads, a.audioLayers] == [Int]([80, 1500, 512, 8, 6]))
        #expect([a.vocabularySize, a.textContext, a.textState, a.textHeads, a.textLayers] == [Int]([51865, 448, 512, 8, 6]))
        #expect(model.languages.count == 99)
        #expect(model.language(code: "fr")?.token == 50265)
        #expect(model.special.timestampBegin == 50364)
        #expect(model.licence?.contains("MIT") == true && model.licence?.contains("OpenAI") == true)
        #expect(model.tokenizer.decode([50364, 1044, 291, 337, 5141, 13, 50516]) == " Thank you for calling.")
        #expect(model.tokenizer.tokens[50363] == "<|notimestamps|>")
    }
}
