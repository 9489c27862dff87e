import EarmarkKit
import Foundation

/// CTranslate2's results for one recording (tools/whisper_reference.py).
public struct SpeechReference: Sendable {
    /// The first 30-s window of the numpy log-mel, frame-major (3000 × 80).
    public var mel: [Float]
    /// CTranslate2's encoder output for `mel` (1500 × 512).
    public var encoder: [Float]
    /// CTranslate2's greedy tokens after the prompt (no final end of text).
    public var tokens: [Int]
    public var language: String
    public var languageProbability: Double
    public var noSpeechProbability: Double
}

/// The speech model made by `tools/fetch-speech-model.sh` and the Python with CTranslate2 that
/// `tools/whisper_reference.py` runs on.
public struct TestSpeechModelSet: Sendable {
    public var model: URL
    public var python: String
    public var referenceScript: String

    /// CTranslate2's references for several recordings of 16-kHz mono samples at once (one model load).
    public func references(_ recordings: [[Float]], language: String = "auto") throws -> [SpeechReference] {
        let tmp = try TemporaryDirectory("speech-reference")
        let inputs = try writeFloat32Files(recordings, in: tmp)
        let out = try Run.process(python, [referenceScript, "--language", language] + inputs + [tmp.path("out")], timeout: 900)
        guard out.status == 0 else { throw TestSupportError("whisper_reference.py failed: \(out)") }
        func floats(_ url: URL) throws -> [Float] {
            let data = try Data(contentsOf: url)
            return data.withUnsafeBytes { Array($0.bindMemory(to: Float.self)) }
        }
        return try (0..<recordings.count).map { i in
            let dir = tmp.file("out/r\(i)")
            let json = try JSONSerialization.jsonObject(with: Data(contentsOf: dir.appendingPathComponent("result.json"))) as? [String: Any] ?? [:]
            return SpeechReference(mel: try floats(dir.appendingPathComponent("mel.f32")),
                                   encoder: try floats(dir.appendingPathComponent("encoder.f32")),
                                   tokens: (json["tokens"] as? [Int]) ?? [],
                                   language: json["language"] as? String ?? "",
                                   languageProbability: json["languageProbability"] as? Double ?? 0,
                                   noSpeechProbability: json["noSpeechProbability"] as? Double ?? 0)
        }
    }
}

public enum TestSpeechModel {
    private static let cached: Result<TestSpeechModelSet, any Error> = Result { try prepare() }
    /// float16 decoder weights whatever the library's default: the references are CTranslate2's float32 results.
    private static let loaded: Result<SpeechModel, any Error> = Result { try SpeechModel(path: set().model.path, decoderWeights: .float16) }

    /// The model file where `tools/fetch-speech-model.sh` puts it by default.
    public static var defaultPath: String {
        ProcessInfo.processInfo.environment["EARMARK_MODEL_DIR"].map { $0 + "/whisper-base.emodel" }
            ?? TestPaths.repositoryRoot.appendingPathComponent(SpeechModel.defaultRelativePath).path
    }

    /// Tests that need the real model run in CI (which fetches it) and wherever it has been fetched; elsewhere
    /// they are skipped with ``skipReason`` rather than downloading 133 MB unasked.
    public static var available: Bool {
        ProcessInfo.processInfo.environment["CI"].map { !$0.isEmpty && $0 != "false" } == true
            || FileManager.default.fileExists(atPath: defaultPath)
    }

    public static let skipReason =
        "no speech model at models/whisper-base.emodel: run tools/fetch-speech-model.sh (CI fetches it)"

    /// Fetches and converts the model and installs CTranslate2 on first use (cached by the script itself).
    public static func set() throws -> TestSpeechModelSet { try cached.get() }

    /// The model, loaded once per test process.
    public static func model() throws -> SpeechModel { try loaded.get() }

    private static let loadedInt8: Result<SpeechModel, any Error> = Result {
        try SpeechModel(path: set().model.path, decoderWeights: .int8)
    }

    /// The model with int8 decoder weights (``DecoderWeights/int8``), loaded once per test process.
    public static func int8Model() throws -> SpeechModel { try loadedInt8.get() }

    private static let loadedInt8Encoder: Result<SpeechModel, any Error> = Result {
        try SpeechModel(path: set().model.path, decoderWeights: .float16, encoderWeights: .int8)
    }

    /// The model with int8 encoder weights (``EncoderWeights/int8``) and float16 decoder weights, loaded once per test process.
    public static func int8EncoderModel() throws -> SpeechModel { try loadedInt8Encoder.get() }

    private static func prepare() throws -> TestSpeechModelSet {
        let root = TestPaths.repositoryRoot
        let script = root.appendingPathComponent("tools/fetch-speech-model.sh").path
        let model = try Run.process("/bin/bash", [script, "--with-ctranslate2"], timeout: 1800)
        guard model.status == 0 else { throw TestSupportError("tools/fetch-speech-model.sh failed: \(model)") }
        let python = try Run.process("/bin/bash", [script, "--with-ctranslate2", "--print-python"], timeout: 600)
        guard python.status == 0 else { throw TestSupportError("tools/fetch-speech-model.sh --print-python failed: \(python)") }
        func lastLine(_ text: String) -> String {
            text.split(separator: "\n").last.map { String($0).trimmingCharacters(in: .whitespaces) } ?? ""
        }
        return TestSpeechModelSet(model: URL(fileURLWithPath: lastLine(model.stdoutText)), python: lastLine(python.stdoutText),
                                  referenceScript: root.appendingPathComponent("tools/whisper_reference.py").path)
    }
}

/// Telephone prompts recorded by Allison Smith for Asterisk (Debian's asterisk-core-sounds-en-wav, 8 kHz
/// WAV, CC-BY-SA 3.0), with the transcripts asterisk-core-sounds-en ships; tools/setup.sh installs both.
public enum SpeechPrompts {
    public static let folder = "/usr/share/asterisk/sounds/en_US_f_Allison"
    public static let transcripts = "/usr/share/doc/asterisk-core-sounds-en/core-sounds-en.txt.gz"

    /// The WAV file of a prompt ("agent-alreadyon" …).
    public static func path(_ stem: String) throws -> String {
        let path = "\(folder)/\(stem).wav"
        guard FileManager.default.fileExists(atPath: path) else {
            throw TestSupportError("\(path) is missing: install asterisk-core-sounds-en-wav (tools/setup.sh)")
        }
        return path
    }

    /// The shipped transcript of a prompt.
    public static func transcript(_ stem: String) throws -> String {
        let out = try Run.process("/bin/zcat", [transcripts], timeout: 60)
        guard out.status == 0 else { throw TestSupportError("cannot read \(transcripts): \(out)") }
        for line in out.stdoutText.split(separator: "\n") where line.hasPrefix(stem + ": ") {
            return String(line.dropFirst(stem.count + 2))
        }
        throw TestSupportError("no transcript of \(stem) in \(transcripts)")
    }
}

/// One word as faster-whisper times it.
public struct ReferenceWord: Sendable {
    public var word: String
    public var start: Double
    public var end: Double
}

/// Word times from faster-whisper 1.1.1 (CTranslate2 float32, greedy, `word_timestamps=True`), run by
/// tools/whisper-word-reference.sh (which installs it into its own venv on first use).
public enum WordTimeReference {
    /// The reference's words for each recording of 16-kHz mono samples (one model load for all).
    public static func words(_ recordings: [[Float]]) throws -> [[ReferenceWord]] {
        let tmp = try TemporaryDirectory("word-reference")
        let inputs = try writeFloat32Files(recordings, in: tmp)
        let script = TestPaths.repositoryRoot.appendingPathComponent("tools/whisper-word-reference.sh").path
        let out = try Run.process("/bin/bash", [script, tmp.path("out.json")] + inputs, timeout: 1800)
        guard out.status == 0 else { throw TestSupportError("whisper-word-reference.sh failed: \(out)") }
        let json = try JSONSerialization.jsonObject(with: Data(contentsOf: tmp.file("out.json"))) as? [[[String: Any]]] ?? []
        return json.map { list in
            list.map { ReferenceWord(word: $0["word"] as? String ?? "", start: $0["start"] as? Double ?? 0, end: $0["end"] as? Double ?? 0) }
        }
    }
}

/// Writes each recording as raw float32 `r<i>.f32` in `folder`; returns the paths.
func writeFloat32Files(_ recordings: [[Float]], in folder: TemporaryDirectory) throws -> [String] {
    try recordings.enumerated().map { i, samples in
        let url = folder.file("r\(i).f32")
        try samples.withUnsafeBufferPointer { try Data(buffer: $0).write(to: url) }
        return url.path
    }
}
