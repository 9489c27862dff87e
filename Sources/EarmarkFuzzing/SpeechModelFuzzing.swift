import EarmarkSpeech
import Foundation

/// Speech model files: loaded and checked as they are, and again with the header's `blobChecksum` made
/// right (so mutated weights and tensor tables reach the checks behind the checksum). A file that loads has
/// its vocabulary decoded and, when its architecture is tiny (the seeds'), its network run on 0.1 s of sound.
enum SpeechModelFuzzing {
    static func run(_ bytes: UnsafeRawBufferPointer) {
        let data = Data(bytes)
        load(data)
        if let fixed = withChecksumMadeRight(data) { load(fixed) }
    }

    private static func load(_ data: Data) {
        guard let model = try? SpeechModel(data: data, name: "fuzz.emodel") else { return }
        _ = model.tokenizer.decode(Array(0..<model.tokenizer.tokens.count))
        let a = model.architecture
        guard a.audioState <= 64, a.audioContext <= 100, a.vocabularySize <= 1000, a.audioLayers <= 4, a.textLayers <= 4 else { return }
        let recognizer = WhisperRecognizer(model: model)
        let samples = (0..<1600).map { Float(sin(Double($0) * 0.05)) * 0.3 }
        _ = try? recognizer.transcribe(samples: samples)
    }

    /// The same file with `blobChecksum` recomputed over what follows the header (nil when there is no JSON header).
    private static func withChecksumMadeRight(_ data: Data) -> Data? {
        let b = [UInt8](data)
        guard b.count >= 16 else { return nil }
        let length = Int(b[12]) | Int(b[13]) << 8 | Int(b[14]) << 16 | Int(b[15]) << 24
        guard length > 0, length <= b.count - 16,
              var header = try? JSONSerialization.jsonObject(with: Data(b[16..<(16 + length)])) as? [String: Any]
        else { return nil }
        let start = min(b.count, (16 + length + 63) / 64 * 64)
        let blob = Array(b[start...])
        var s1: UInt64 = 0, s2: UInt64 = 0
        for i in 0..<(blob.count / 8) {
            var w: UInt64 = 0
            for k in 0..<8 { w |= UInt64(blob[8 * i + k]) << (8 * k) }
            s1 &+= w
            s2 &+= UInt64(i + 1) &* w
        }
        header["blobChecksum"] = String(format: "%016llx:%016llx", s1, s2)
        guard let text = try? JSONSerialization.data(withJSONObject: header) else { return nil }
        var out = Array(b[0..<12])
        out += (0..<4).map { UInt8((text.count >> (8 * $0)) & 0xFF) }
        out += text
        while out.count % 64 != 0 { out.append(0) }
        return Data(out + blob)
    }
}
