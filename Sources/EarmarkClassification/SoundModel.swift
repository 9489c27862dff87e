import Foundation

/// An error loading or running a sound model.
public struct SoundModelError: Error, CustomStringConvertible, Sendable, Equatable {
    public enum Code: String, Sendable {
        /// No model file where one was looked for.
        case notFound
        /// Not a model file, a damaged one, or a truncated one.
        case invalidFile
        /// A format version this build cannot read.
        case unsupportedVersion
        /// The layers do not fit together or do not fit the front end's patch size.
        case inconsistent
    }
    public var code: Code
    public var message: String
    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }
    public var description: String { message }
}

/// The log-mel front end a model expects (header field `frontEnd`).
public struct FrontEndSpec: Codable, Sendable, Equatable {
    /// Sample rate of the audio the front end reads, Hz.
    public var sampleRate: Double
    /// Hann window length in samples, centred in the FFT frame.
    public var windowLength: Int
    /// Frame hop in samples.
    public var hopLength: Int
    public var fftLength: Int
    public var melBands: Int
    public var minFrequency: Double
    public var maxFrequency: Double
    /// Added to the mel magnitudes before the natural logarithm.
    public var logOffset: Double
    /// Frames per patch (one network input).
    public var patchFrames: Int

    /// Seconds between frames.
    public var frameDuration: Double { Double(hopLength) / sampleRate }
    /// Seconds of audio one patch spans (its frames' hops).
    public var patchDuration: Double { Double(patchFrames) * frameDuration }
}

/// A tensor's place in the blob.
struct TensorRef: Codable, Sendable {
    var offset: Int
    var count: Int
    var type: String

    var bytesPerElement: Int? {
        switch type {
        case "int8", "uint8": 1
        case "int32", "float32": 4
        default: nil
        }
    }
}

/// One layer as the header describes it.
struct LayerSpec: Codable, Sendable {
    /// `denseFloat` is a float32 layer (a trained head) on the dequantised output of the layer before it.
    enum Op: String, Codable, Sendable { case conv, depthwise, globalAveragePool, dense, denseFloat }
    var op: Op
    var inputChannels: Int
    var outputChannels: Int
    var kernel: [Int]?
    var stride: [Int]?
    var pads: [Int]?
    var weights: TensorRef?
    var bias: TensorRef?
    /// Quantised layers only.
    var multiplier: TensorRef?
    var outputScale: Double?
    var outputZeroPoint: Int?
    /// `denseFloat` only: "relu" or "none".
    var activation: String?
}

/// A label of a model's output.
public struct SoundLabel: Codable, Sendable, Equatable, Hashable {
    /// A stable identifier (AudioSet machine id for YAMNet, e.g. "/m/09x0r").
    public var mid: String
    /// Display name, e.g. "Speech".
    public var name: String

    public init(mid: String, name: String) {
        self.mid = mid
        self.name = name
    }
}

struct ModelHeader: Codable, Sendable {
    struct Quantization: Codable, Sendable {
        var scale: Double
        var zeroPoint: Int
    }
    struct Output: Codable, Sendable {
        var activation: String
    }
    var name: String
    var description: String?
    var source: String?
    var licence: String?
    var frontEnd: FrontEndSpec
    var input: Quantization
    var layers: [LayerSpec]
    var embeddingLayer: Int?
    var output: Output
    var labels: [SoundLabel]
    var blobBytes: Int
    var blobFNV1a64: String
}

/// A sound classifier network in Earmark's own file format (`.emodel`, see the README), loaded and checked.
///
/// The file holds a JSON header (front end, input quantisation, layers, labels) and a blob of
/// int8 weights, int32 biases and float32 requantisation multipliers. Loading verifies the magic,
/// version, length and checksum, and walks the layer shapes from the front end's patch size, so a
/// damaged file or a model for another input size is refused with a clear error.
public struct SoundModel: Sendable {
    static let magic = Array("EARMODEL".utf8)
    /// The format version this build reads and writes.
    public static let formatVersion: UInt32 = 1

    public let name: String
    public let description: String?
    public let source: String?
    public let licence: String?
    public let frontEnd: FrontEndSpec
    public let labels: [SoundLabel]
    /// Output activation: "sigmoid", "softmax" or "none".
    public let activation: String
    let header: ModelHeader
    let blob: [UInt8]
    /// Output shape of every layer (height, width, channels), from the front end's patch.
    let shapes: [(h: Int, w: Int, c: Int)]

    /// Reads and checks a model file.
    public init(path: String) throws {
        guard FileManager.default.fileExists(atPath: path) else {
            throw SoundModelError(.notFound, "no sound model at \(path) (run tools/fetch-model.sh to fetch and convert YAMNet)")
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw SoundModelError(.invalidFile, "cannot read the sound model \(path)")
        }
        try self.init(data: data, name: path)
    }

    /// Parses a model from its bytes; `name` is used in error messages.
    public init(data: Data, name fileName: String = "model") throws {
        let bytes = [UInt8](data)
        func bad(_ why: String) -> SoundModelError { SoundModelError(.invalidFile, "\(fileName) is not a usable sound model: \(why)") }
        guard bytes.count >= 16, Array(bytes[0..<8]) == SoundModel.magic else { throw bad("no EARMODEL signature") }
        func u32(_ at: Int) -> UInt32 { (0..<4).reduce(UInt32(0)) { $0 | UInt32(bytes[at + $1]) << (8 * $1) } }
        let version = u32(8)
        guard version == SoundModel.formatVersion else {
            throw SoundModelError(.unsupportedVersion, "\(fileName) has model format version \(version); this build reads version \(SoundModel.formatVersion)")
        }
        let headerLength = Int(u32(12))
        guard headerLength > 0, 16 + headerLength <= bytes.count else { throw bad("truncated header") }
        let header: ModelHeader
        do {
            header = try JSONDecoder().decode(ModelHeader.self, from: Data(bytes[16..<(16 + headerLength)]))
        } catch {
            throw bad("damaged header (\(error))")
        }
        let blobStart = (16 + headerLength + 15) & ~15
        // Compared by subtraction: a damaged header may state any Int, and the sum could overflow.
        guard header.blobBytes >= 0, header.blobBytes == bytes.count - blobStart else {
            throw bad("expected \(blobStart) + \(header.blobBytes) bytes, found \(bytes.count) (truncated or extended)")
        }
        let blob = Array(bytes[blobStart...])
        guard String(format: "%016llx", SoundModel.fnv1a64(blob)) == header.blobFNV1a64.lowercased() else {
            throw bad("checksum mismatch (damaged weights)")
        }
        self.header = header
        self.blob = blob
        name = header.name
        description = header.description
        source = header.source
        licence = header.licence
        frontEnd = header.frontEnd
        labels = header.labels
        activation = header.output.activation
        shapes = try SoundModel.checkShapes(header, blobBytes: blob.count, fileName: fileName)
        // Inference sums in Float, which is exact for integers below 2²⁴ only.
        for (i, layer) in header.layers.enumerated() {
            // A pool's multiplier holds the number of positions it averages (sIn / (sOut · n)): a network
            // made for another patch size has a different n than the front end gives here.
            if layer.op == .globalAveragePool, i > 0, let mt = layer.multiplier, let m = float32s(mt).first, m > 0,
               let sIn = header.layers[i - 1].outputScale, let sOut = layer.outputScale {
                let implied = sIn / (sOut * Double(m))
                let actual = Double(shapes[i - 1].h * shapes[i - 1].w)
                if abs(implied - actual) > 0.02 * actual {
                    throw SoundModelError(.inconsistent, String(format: "%@: the network was made for another input size (its pooling averages %.0f positions, a %d × %d patch gives %.0f)",
                                                                fileName, implied, header.frontEnd.patchFrames, header.frontEnd.melBands, actual))
                }
            }
            if let b = layer.bias, b.type == "int32", int32s(b).contains(where: { abs(Int64($0)) >= 1 << 22 }) {
                throw SoundModelError(.inconsistent, "\(fileName): layer \(i) has a bias beyond ±2²² (not an int8 network this runtime can run exactly)")
            }
        }
    }

    /// Dimension of the embedding vector (0 when the model names no embedding layer).
    public var embeddingSize: Int {
        guard let e = header.embeddingLayer, shapes.indices.contains(e) else { return 0 }
        return shapes[e].h * shapes[e].w * shapes[e].c
    }

    static func fnv1a64(_ bytes: [UInt8]) -> UInt64 {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for b in bytes {
            h ^= UInt64(b)
            h = h &* 0x100_0000_01b3
        }
        return h
    }

    /// Walks the layer shapes from the patch (frames × mel bands × 1) and checks every tensor fits the blob.
    private static func checkShapes(_ header: ModelHeader, blobBytes: Int, fileName: String) throws -> [(h: Int, w: Int, c: Int)] {
        func inconsistent(_ why: String) -> SoundModelError {
            SoundModelError(.inconsistent, "\(fileName): \(why)")
        }
        let fe = header.frontEnd
        // Upper bounds far above any real model's (YAMNet: FFT 512, hop 160, 96 × 64 patches) keep every size
        // below well within Int and the front end's buffers small.
        guard fe.sampleRate >= 4000, fe.sampleRate <= 192_000, fe.fftLength >= 16, fe.fftLength <= 1 << 16,
              fe.fftLength & (fe.fftLength - 1) == 0,
              fe.windowLength >= 16, fe.windowLength <= fe.fftLength, fe.hopLength >= 1, fe.hopLength <= 1 << 16,
              fe.melBands >= 1, fe.melBands <= fe.fftLength / 2, fe.minFrequency >= 0, fe.maxFrequency > fe.minFrequency,
              fe.maxFrequency <= fe.sampleRate / 2, fe.patchFrames >= 1, fe.patchFrames <= 10_000, fe.logOffset > 0
        else { throw inconsistent("front end parameters out of range") }
        guard (0...255).contains(header.input.zeroPoint), header.input.scale > 0 else {
            throw inconsistent("bad input quantisation")
        }
        guard !header.layers.isEmpty else { throw inconsistent("no layers") }
        var h = fe.patchFrames, w = fe.melBands, c = 1
        var shapes: [(h: Int, w: Int, c: Int)] = []
        var floatSeen = false
        /// The product, or nil when it overflows Int.
        func product(_ factors: Int...) -> Int? {
            var p = 1
            for f in factors {
                let (r, overflow) = p.multipliedReportingOverflow(by: f)
                if overflow { return nil }
                p = r
            }
            return p
        }
        for (i, layer) in header.layers.enumerated() {
            let name = "layer \(i) (\(layer.op.rawValue))"
            guard let elements = product(h, w, c) else { throw inconsistent("\(name): its input is too large") }
            guard layer.inputChannels == (layer.op == .dense ? elements : c) else {
                throw inconsistent("\(name) expects \(layer.inputChannels) input channels but gets \(layer.op == .dense ? h * w * c : c): the model was made for another input size")
            }
            guard layer.outputChannels >= 1 else { throw inconsistent("\(name) has no outputs") }
            if floatSeen, layer.op != .denseFloat { throw inconsistent("\(name): quantised layers cannot follow float ones") }
            func check(_ t: TensorRef?, _ type: String, _ count: Int, _ what: String) throws {
                guard let t else { throw inconsistent("\(name) has no \(what)") }
                // t.count ≤ (blobBytes − t.offset) / size: the tensor fits, without an overflowing sum or product.
                guard t.type == type, t.count == count, let size = t.bytesPerElement, t.offset >= 0, t.offset <= blobBytes,
                      t.offset % 4 == 0, t.count <= (blobBytes - t.offset) / size
                else { throw inconsistent("\(name): \(what) tensor does not fit (\(t.type) × \(t.count) at \(t.offset))") }
            }
            if layer.op != .denseFloat {
                guard let scale = layer.outputScale, scale > 0, let zp = layer.outputZeroPoint, (0...255).contains(zp),
                      let multiplier = layer.multiplier
                else { throw inconsistent("\(name) has a bad output quantisation") }
                try check(multiplier, "float32", multiplier.count == 1 ? 1 : layer.outputChannels, "multiplier")
            }
            switch layer.op {
            case .conv, .depthwise:
                guard let k = layer.kernel, let s = layer.stride, let p = layer.pads, k.count == 2, s.count == 2, p.count == 4,
                      k.allSatisfy({ (1...1 << 16).contains($0) }), s.allSatisfy({ (1...1 << 16).contains($0) }),
                      p.allSatisfy({ (0...1 << 16).contains($0) })
                else { throw inconsistent("\(name) needs kernel, stride and pads (each at most 65536)") }
                if layer.op == .depthwise, layer.outputChannels != c { throw inconsistent("\(name) must keep its \(c) channels") }
                let oh = (h + p[0] + p[2] - k[0]) / s[0] + 1, ow = (w + p[1] + p[3] - k[1]) / s[1] + 1
                guard oh >= 1, ow >= 1 else { throw inconsistent("\(name): input \(h)×\(w) is smaller than its kernel") }
                guard let weights = product(layer.outputChannels, layer.op == .conv ? c : 1, k[0], k[1]),
                      product(oh, ow, layer.outputChannels) != nil
                else { throw inconsistent("\(name) is too large") }
                try check(layer.weights, "int8", weights, "weights")
                try check(layer.bias, "int32", layer.outputChannels, "bias")
                (h, w, c) = (oh, ow, layer.outputChannels)
            case .globalAveragePool:
                guard layer.outputChannels == c else { throw inconsistent("\(name) must keep its \(c) channels") }
                (h, w) = (1, 1)
            case .dense:
                guard let weights = product(layer.outputChannels, layer.inputChannels) else { throw inconsistent("\(name) is too large") }
                try check(layer.weights, "int8", weights, "weights")
                try check(layer.bias, "int32", layer.outputChannels, "bias")
                (h, w, c) = (1, 1, layer.outputChannels)
            case .denseFloat:
                guard i > 0 else { throw inconsistent("\(name) cannot be the first layer") }
                guard let weights = product(layer.outputChannels, layer.inputChannels) else { throw inconsistent("\(name) is too large") }
                try check(layer.weights, "float32", weights, "weights")
                try check(layer.bias, "float32", layer.outputChannels, "bias")
                guard ["relu", "none"].contains(layer.activation ?? "none") else { throw inconsistent("\(name): unknown activation") }
                floatSeen = true
                (h, w, c) = (1, 1, layer.outputChannels)
            }
            shapes.append((h, w, c))
        }
        guard h == 1, w == 1, c == header.labels.count else {
            throw inconsistent("the network gives \(h)×\(w)×\(c) outputs for \(header.labels.count) labels")
        }
        if let e = header.embeddingLayer, !shapes.indices.contains(e) { throw inconsistent("embedding layer \(e) does not exist") }
        guard ["sigmoid", "softmax", "none"].contains(header.output.activation) else {
            throw inconsistent("unknown output activation \(header.output.activation)")
        }
        return shapes
    }

    // MARK: blob access

    func int8s(_ t: TensorRef) -> [Int8] {
        blob.withUnsafeBytes { raw in (0..<t.count).map { Int8(bitPattern: raw[t.offset + $0]) } }
    }

    func int32s(_ t: TensorRef) -> [Int32] {
        blob.withUnsafeBytes { raw in (0..<t.count).map { Int32(littleEndian: raw.loadUnaligned(fromByteOffset: t.offset + 4 * $0, as: Int32.self)) } }
    }

    func float32s(_ t: TensorRef) -> [Float] {
        blob.withUnsafeBytes { raw in
            (0..<t.count).map { Float(bitPattern: UInt32(littleEndian: raw.loadUnaligned(fromByteOffset: t.offset + 4 * $0, as: UInt32.self))) }
        }
    }
}
