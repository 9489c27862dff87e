import EarmarkClassification
import Foundation

/// Sound model files: loaded and checked (the network is not run).
enum ModelFuzzing {
    static func run(_ bytes: UnsafeRawBufferPointer) {
        guard let model = try? SoundModel(data: Data(bytes), name: "fuzz.emodel") else { return }
        _ = model.embeddingSize
        _ = model.frontEnd.patchDuration
    }
}
