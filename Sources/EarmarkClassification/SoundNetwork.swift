import COpenBLAS
import Foundation

/// Runs a ``SoundModel``'s quantised network on one patch at a time, reproducing onnxruntime's
/// integer kernels exactly where those are exact (x86-64 with VNNI, arm64; without VNNI they
/// saturate pairs of products to int16).
///
/// Activations are kept as Float values holding the integer `code − zeroPoint`, so the heavy
/// products run through OpenBLAS's sgemm: every product and partial sum is an integer far below
/// 2²⁴, which Float represents exactly, so the sums equal the Int32 accumulations of an integer
/// kernel. Requantisation is then done in Float32 in the file's order (see the README).
/// An instance owns scratch buffers and is not thread-safe; give each thread its own.
public final class SoundNetwork {
    private struct Layer {
        enum Kind { case conv, pointwise, depthwise, pool, denseFloat }
        var kind: Kind
        var inH: Int, inW: Int, inC: Int
        var outH: Int, outW: Int, outC: Int
        var kh = 1, kw = 1, sh = 1, sw = 1, padTop = 0, padLeft = 0
        /// conv: [outC][kh][kw][inC]; pointwise/dense: [outC][inC]; depthwise: [kh][kw][C].
        var weights: [Float] = []
        var bias: [Int32]
        /// `bias` as Float (exact: every bias is far below 2²⁴), so requantisation stays in vector registers.
        var biasF: [Float] = []
        /// Per output channel (a per-tensor multiplier is repeated).
        var multiplier: [Float]
        var lower: Float, upper: Float
        var outputScale: Float
        /// denseFloat: float bias, whether ReLU follows, and the scale that dequantises its input (1 when already float).
        var floatBias: [Float] = []
        var relu = false
        var inputScale: Float = 1
    }

    public let model: SoundModel
    private let layers: [Layer]
    private let embeddingLayer: Int?
    private var current: [Float]
    private var next: [Float]
    private var scratch: [Float]
    /// Patches run together: one GEMM per layer for the whole batch amortises OpenBLAS's packing of the weights.
    public let maximumBatch: Int
    private let patchSize: Int
    private let inputScale: Float
    private let inputZeroPoint: Float

    public init(model: SoundModel, maximumBatch: Int = 16) {
        self.model = model
        self.maximumBatch = max(1, maximumBatch)
        let header = model.header
        var h = header.frontEnd.patchFrames, w = header.frontEnd.melBands, c = 1
        var layers: [Layer] = []
        var largest = h * w * c, largestColumns = 0
        for (i, spec) in header.layers.enumerated() {
            let shape = model.shapes[i]
            var multiplier = spec.multiplier.map(model.float32s) ?? [1]
            if multiplier.count == 1 { multiplier = Array(repeating: multiplier[0], count: spec.outputChannels) }
            let zp = Float(spec.outputZeroPoint ?? 0)
            var layer = Layer(kind: .pool, inH: h, inW: w, inC: c, outH: shape.h, outW: shape.w, outC: shape.c,
                              bias: spec.bias.flatMap { $0.type == "int32" ? model.int32s($0) : nil } ?? Array(repeating: 0, count: spec.outputChannels),
                              multiplier: multiplier, lower: -zp, upper: 255 - zp, outputScale: Float(spec.outputScale ?? 1))
            layer.biasF = layer.bias.map { Float($0) }
            let raw = spec.weights.flatMap { $0.type == "int8" ? model.int8s($0) : nil } ?? []
            switch spec.op {
            case .denseFloat:
                layer.kind = .denseFloat
                layer.weights = model.float32s(spec.weights!)
                layer.floatBias = model.float32s(spec.bias!)
                layer.relu = spec.activation == "relu"
                layer.inputScale = header.layers[i - 1].op == .denseFloat ? 1 : Float(header.layers[i - 1].outputScale ?? 1)
            case .conv:
                let (kh, kw) = (spec.kernel![0], spec.kernel![1])
                layer.kh = kh; layer.kw = kw
                layer.sh = spec.stride![0]; layer.sw = spec.stride![1]
                layer.padTop = spec.pads![0]; layer.padLeft = spec.pads![1]
                if kh == 1, kw == 1, layer.sh == 1, layer.sw == 1, spec.pads!.allSatisfy({ $0 == 0 }) {
                    layer.kind = .pointwise
                    layer.weights = SoundNetwork.transposed(raw, outputs: spec.outputChannels, inputs: c)
                } else {
                    layer.kind = .conv
                    // OIHW → O·(ky, kx, ci), the order of an im2col row of an HWC map.
                    var wts = [Float](repeating: 0, count: raw.count)
                    for o in 0..<spec.outputChannels {
                        for ci in 0..<c {
                            for ky in 0..<kh {
                                for kx in 0..<kw {
                                    wts[((o * kh + ky) * kw + kx) * c + ci] = Float(raw[((o * c + ci) * kh + ky) * kw + kx])
                                }
                            }
                        }
                    }
                    layer.weights = wts
                    largestColumns = max(largestColumns, shape.h * shape.w * kh * kw * c)
                }
            case .depthwise:
                let (kh, kw) = (spec.kernel![0], spec.kernel![1])
                layer.kind = .depthwise
                layer.kh = kh; layer.kw = kw
                layer.sh = spec.stride![0]; layer.sw = spec.stride![1]
                layer.padTop = spec.pads![0]; layer.padLeft = spec.pads![1]
                // [C][ky][kx] → [ky][kx][C], so the innermost loop runs over channels.
                var wts = [Float](repeating: 0, count: raw.count)
                for ch in 0..<c {
                    for k in 0..<(kh * kw) { wts[k * c + ch] = Float(raw[ch * kh * kw + k]) }
                }
                layer.weights = wts
            case .globalAveragePool:
                layer.kind = .pool
            case .dense:
                // A dense layer on the pooled 1 × 1 map is a 1 × 1 convolution.
                layer.kind = .pointwise
                layer.weights = SoundNetwork.transposed(raw, outputs: spec.outputChannels, inputs: spec.inputChannels)
            }
            layers.append(layer)
            (h, w, c) = shape
            largest = max(largest, h * w * c)
        }
        self.layers = layers
        embeddingLayer = header.embeddingLayer
        let batch = max(1, maximumBatch)
        current = [Float](repeating: 0, count: largest * batch)
        next = current
        scratch = [Float](repeating: 0, count: max(largest, largestColumns) * batch)
        patchSize = header.frontEnd.patchFrames * header.frontEnd.melBands
        inputScale = Float(header.input.scale)
        inputZeroPoint = Float(header.input.zeroPoint)
        openblas_set_num_threads(1)
    }

    /// [out][in] int8 → [in][out] Float: X·W with neither operand transposed packs fastest in OpenBLAS.
    static func transposed(_ raw: [Int8], outputs: Int, inputs: Int) -> [Float] {
        var w = [Float](repeating: 0, count: raw.count)
        for o in 0..<outputs {
            for i in 0..<inputs { w[i * outputs + o] = Float(raw[o * inputs + i]) }
        }
        return w
    }

    /// Quantises a log-mel patch (frames × bands, row = frame) to the network's uint8 input codes.
    public func quantize(_ patch: UnsafeBufferPointer<Float>, into codes: UnsafeMutableBufferPointer<UInt8>) {
        for i in 0..<patch.count {
            let v = (patch[i] / inputScale + inputZeroPoint).rounded(.toNearestOrEven)
            codes[i] = UInt8(min(max(v, 0), 255))
        }
    }

    /// The network's raw output for one patch of uint8 input codes: the logits (output codes minus
    /// the zero point, times the last layer's scale) and the embedding (dequantised).
    public func run(codes: UnsafeBufferPointer<UInt8>) -> (logits: [Float], embedding: [Float]) {
        run(batch: codes, count: 1)[0]
    }

    /// ``run(codes:)`` for `count` patches stored one after the other (at most ``maximumBatch``).
    public func run(batch codes: UnsafeBufferPointer<UInt8>, count: Int) -> [(logits: [Float], embedding: [Float])] {
        precondition(count >= 1 && count <= maximumBatch && codes.count == count * patchSize, "patch batch size")
        for i in 0..<codes.count { current[i] = Float(codes[i]) - inputZeroPoint }
        var embeddings: [[Float]] = Array(repeating: [], count: count)
        for (index, layer) in layers.enumerated() {
            switch layer.kind {
            case .conv: convolve(layer, count)
            case .pointwise: pointwise(layer, count)
            case .depthwise: depthwise(layer, count)
            case .pool: pool(layer, count)
            case .denseFloat: denseFloat(layer, count)
            }
            swap(&current, &next)
            if index == embeddingLayer {
                let size = layer.outH * layer.outW * layer.outC
                for b in 0..<count { embeddings[b] = (0..<size).map { current[b * size + $0] * layer.outputScale } }
            }
        }
        let last = layers[layers.count - 1]
        return (0..<count).map { b in ((0..<last.outC).map { current[b * last.outC + $0] * last.outputScale }, embeddings[b]) }
    }

    /// Class scores (the model's output activation over the logits).
    public func scores(logits: [Float]) -> [Float] {
        switch model.activation {
        case "sigmoid": return logits.map { 1 / (1 + expf(-$0)) }
        case "softmax":
            let m = logits.max() ?? 0
            let e = logits.map { expf($0 - m) }
            let s = e.reduce(0, +)
            return e.map { $0 / s }
        default: return logits
        }
    }

    /// Requantises `count` accumulators laid out [pixel][channel] in `next`, adding the bias.
    private func requantize(_ layer: Layer, pixels: Int) {
        let c = layer.outC
        next.withUnsafeMutableBufferPointer { out in
            layer.biasF.withUnsafeBufferPointer { bias in
                layer.multiplier.withUnsafeBufferPointer { m in
                    // The sum of two integer-valued Floats below 2²⁴ is the Int32 sum. Adding and removing
                    // 1.5·2²³ rounds to the nearest integer, ties to even (the FPU's mode), exactly for |v| < 2²²,
                    // like cvtps2dq; unlike a call to rintf it vectorises.
                    let magic: Float = 12_582_912
                    let lo = layer.lower, hi = layer.upper
                    for p in 0..<pixels {
                        let row = out.baseAddress! + p * c
                        for k in 0..<c {
                            var v = (row[k] + bias[k]) * m[k]
                            v = v < lo ? lo : v
                            v = v > hi ? hi : v
                            row[k] = (v + magic) - magic
                        }
                    }
                }
            }
        }
    }

    private func pointwise(_ layer: Layer, _ count: Int) {
        let pixels = layer.inH * layer.inW * count
        current.withUnsafeBufferPointer { x in
            layer.weights.withUnsafeBufferPointer { w in
                next.withUnsafeMutableBufferPointer { y in
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, Int32(pixels), Int32(layer.outC), Int32(layer.inC),
                                1, x.baseAddress, Int32(layer.inC), w.baseAddress, Int32(layer.outC), 0, y.baseAddress, Int32(layer.outC))
                }
            }
        }
        requantize(layer, pixels: pixels)
    }

    private func convolve(_ layer: Layer, _ count: Int) {
        let perPatch = layer.outH * layer.outW
        let pixels = perPatch * count
        let k = layer.kh * layer.kw * layer.inC
        let inSize = layer.inH * layer.inW * layer.inC
        // im2col: one row per output pixel, (ky, kx, ci) order; outside the map is the zero point (0).
        current.withUnsafeBufferPointer { x in
            scratch.withUnsafeMutableBufferPointer { col in
              for b in 0..<count {
                let x = UnsafeBufferPointer(rebasing: x[(b * inSize)..<((b + 1) * inSize)])
                for oy in 0..<layer.outH {
                    for ox in 0..<layer.outW {
                        var j = (b * perPatch + oy * layer.outW + ox) * k
                        for ky in 0..<layer.kh {
                            let iy = oy * layer.sh - layer.padTop + ky
                            for kx in 0..<layer.kw {
                                let ix = ox * layer.sw - layer.padLeft + kx
                                let inside = iy >= 0 && iy < layer.inH && ix >= 0 && ix < layer.inW
                                let base = (iy * layer.inW + ix) * layer.inC
                                for ci in 0..<layer.inC {
                                    col[j] = inside ? x[base + ci] : 0
                                    j += 1
                                }
                            }
                        }
                    }
                }
              }
            }
        }
        scratch.withUnsafeBufferPointer { col in
            layer.weights.withUnsafeBufferPointer { w in
                next.withUnsafeMutableBufferPointer { y in
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Int32(pixels), Int32(layer.outC), Int32(k),
                                1, col.baseAddress, Int32(k), w.baseAddress, Int32(k), 0, y.baseAddress, Int32(layer.outC))
                }
            }
        }
        requantize(layer, pixels: pixels)
    }

    private func depthwise(_ layer: Layer, _ count: Int) {
        let c = layer.inC
        let inSize = layer.inH * layer.inW * c, outSize = layer.outH * layer.outW * c
        current.withUnsafeBufferPointer { xAll in
            layer.weights.withUnsafeBufferPointer { w in
                next.withUnsafeMutableBufferPointer { yAll in
                  for b in 0..<count {
                    let x = xAll.baseAddress! + b * inSize, y = yAll.baseAddress! + b * outSize
                    for oy in 0..<layer.outH {
                        for ox in 0..<layer.outW {
                            let out = y + (oy * layer.outW + ox) * c
                            for ch in 0..<c { out[ch] = 0 }
                            for ky in 0..<layer.kh {
                                let iy = oy * layer.sh - layer.padTop + ky
                                guard iy >= 0, iy < layer.inH else { continue }
                                for kx in 0..<layer.kw {
                                    let ix = ox * layer.sw - layer.padLeft + kx
                                    guard ix >= 0, ix < layer.inW else { continue }
                                    let input = x + (iy * layer.inW + ix) * c
                                    let filter = w.baseAddress! + (ky * layer.kw + kx) * c
                                    for ch in 0..<c { out[ch] += input[ch] * filter[ch] }
                                }
                            }
                        }
                    }
                  }
                }
            }
        }
        requantize(layer, pixels: layer.outH * layer.outW * count)
    }

    private func pool(_ layer: Layer, _ count: Int) {
        let pixels = layer.inH * layer.inW, c = layer.inC
        current.withUnsafeBufferPointer { x in
            next.withUnsafeMutableBufferPointer { y in
                for b in 0..<count {
                    let out = b * c, base = b * pixels * c
                    for ch in 0..<c { y[out + ch] = 0 }
                    for p in 0..<pixels {
                        for ch in 0..<c { y[out + ch] += x[base + p * c + ch] }
                    }
                }
            }
        }
        requantize(layer, pixels: count)
    }

    /// A float layer of a trained head: y = W·(s·x) + b, optionally ReLU; values stay real from here on.
    private func denseFloat(_ layer: Layer, _ count: Int) {
        current.withUnsafeBufferPointer { x in
            layer.weights.withUnsafeBufferPointer { w in
                next.withUnsafeMutableBufferPointer { y in
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Int32(count), Int32(layer.outC), Int32(layer.inC),
                                layer.inputScale, x.baseAddress, Int32(layer.inC), w.baseAddress, Int32(layer.inC), 0,
                                y.baseAddress, Int32(layer.outC))
                    for b in 0..<count {
                        for k in 0..<layer.outC {
                            let v = y[b * layer.outC + k] + layer.floatBias[k]
                            y[b * layer.outC + k] = layer.relu ? max(0, v) : v
                        }
                    }
                }
            }
        }
    }

}
