import COpenBLAS
import Foundation

extension SoundModel {
    /// The model as file bytes (the format ``init(data:name:)`` reads).
    func fileData(header: ModelHeader, blob: [UInt8]) throws -> Data {
        var header = header
        header.blobBytes = blob.count
        header.blobFNV1a64 = String(format: "%016llx", SoundModel.fnv1a64(blob))
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let json = try encoder.encode(header)
        var out = Data(SoundModel.magic)
        for v in [SoundModel.formatVersion, UInt32(json.count)] { withUnsafeBytes(of: v.littleEndian) { out.append(contentsOf: $0) } }
        out.append(json)
        while out.count % 16 != 0 { out.append(0) }
        out.append(contentsOf: blob)
        return out
    }

    /// A new classifier: this model's layers up to its embedding, then a float layer `weights` (labels ×
    /// embedding, row-major) and `bias`, with softmax scores over `labels`. Returns the file's bytes.
    public func withHead(labels: [SoundLabel], weights: [Float], bias: [Float], name: String, description: String) throws -> Data {
        guard let e = header.embeddingLayer else { throw SoundModelError(.inconsistent, "\(self.name) names no embedding layer to train on") }
        let d = embeddingSize
        guard !labels.isEmpty, weights.count == labels.count * d, bias.count == labels.count else {
            throw SoundModelError(.inconsistent, "head shape does not fit \(labels.count) labels × \(d) embedding values")
        }
        var blob = self.blob
        func append(_ values: [Float]) -> TensorRef {
            while blob.count % 16 != 0 { blob.append(0) }
            let ref = TensorRef(offset: blob.count, count: values.count, type: "float32")
            for v in values { withUnsafeBytes(of: v.bitPattern.littleEndian) { blob.append(contentsOf: $0) } }
            return ref
        }
        var h = header
        h.name = name
        h.description = description
        h.source = "head trained by earmark train-classifier on the embeddings of \(self.name)"
        h.layers = Array(header.layers[0...e]) + [
            LayerSpec(op: .denseFloat, inputChannels: d, outputChannels: labels.count, weights: append(weights), bias: append(bias),
                      activation: "none"),
        ]
        h.output = .init(activation: "softmax")
        h.labels = labels
        return try fileData(header: h, blob: blob)
    }
}

/// Trains a linear softmax classifier on embeddings (the analogue of Create ML's MLSoundClassifier
/// head): inputs are centred and scaled, full-batch Adam with L2 weight decay; the standardisation is folded
/// into the returned weights, so they apply to raw embeddings.
public enum HeadTrainer {
    /// One training window: its embedding, its label index, and the file it came from.
    public struct Example: Sendable {
        public var embedding: [Float]
        public var label: Int
        public var file: Int
        public init(embedding: [Float], label: Int, file: Int) {
            self.embedding = embedding
            self.label = label
            self.file = file
        }
    }

    public struct Result: Sendable {
        /// labels × dimensions, row-major, for raw embeddings.
        public var weights: [Float]
        public var bias: [Float]
        /// Fraction of training windows classified right by the final head.
        public var trainingAccuracy: Double
        /// Fraction of windows right on held-out files (one file per label held out while training a
        /// check head), when every label has at least two files; nil otherwise.
        public var validationAccuracy: Double?
    }

    public static func train(_ examples: [Example], labels: Int, epochs: Int = 300, learningRate: Float = 0.01,
                             weightDecay: Float = 1e-3) -> Result {
        precondition(!examples.isEmpty && labels >= 1)
        let d = examples[0].embedding.count
        var validation: Double?
        // One file per label held out, if every label has two files or more.
        var filesPerLabel: [Int: Set<Int>] = [:]
        for e in examples { filesPerLabel[e.label, default: []].insert(e.file) }
        if labels >= 2, (0..<labels).allSatisfy({ (filesPerLabel[$0]?.count ?? 0) >= 2 }) {
            let held = Set((0..<labels).map { filesPerLabel[$0]!.max()! })
            let fit = fitHead(examples.filter { !held.contains($0.file) }, labels: labels, d: d, epochs: epochs,
                              learningRate: learningRate, weightDecay: weightDecay)
            validation = accuracy(examples.filter { held.contains($0.file) }, fit.weights, fit.bias, labels: labels, d: d)
        }
        let fit = fitHead(examples, labels: labels, d: d, epochs: epochs, learningRate: learningRate, weightDecay: weightDecay)
        return Result(weights: fit.weights, bias: fit.bias,
                      trainingAccuracy: accuracy(examples, fit.weights, fit.bias, labels: labels, d: d), validationAccuracy: validation)
    }

    static func accuracy(_ examples: [Example], _ w: [Float], _ b: [Float], labels: Int, d: Int) -> Double {
        guard !examples.isEmpty else { return 0 }
        var right = 0
        for e in examples {
            var best = 0, bestValue = -Float.infinity
            for k in 0..<labels {
                var v = b[k]
                for j in 0..<d { v += w[k * d + j] * e.embedding[j] }
                if v > bestValue { (best, bestValue) = (k, v) }
            }
            if best == e.label { right += 1 }
        }
        return Double(right) / Double(examples.count)
    }

    static func fitHead(_ examples: [Example], labels: Int, d: Int, epochs: Int, learningRate: Float,
                        weightDecay: Float) -> (weights: [Float], bias: [Float]) {
        let n = examples.count
        // Classes weighted inversely to their size, so a label with many windows does not drown the others.
        var counts = [Float](repeating: 0, count: labels)
        for e in examples { counts[e.label] += 1 }
        let classWeight = counts.map { $0 > 0 ? Float(n) / (Float(labels) * $0) : 0 }
        return fitLinear(examples.map(\.embedding), outputs: labels, d: d, epochs: epochs, learningRate: learningRate,
                         weightDecay: weightDecay) { logits, b in
            // Softmax − one-hot, weighted.
            for (i, e) in examples.enumerated() {
                let row = i * labels
                var m = -Float.infinity
                for k in 0..<labels { logits[row + k] += b[k]; m = max(m, logits[row + k]) }
                var sum: Float = 0
                for k in 0..<labels { logits[row + k] = expf(logits[row + k] - m); sum += logits[row + k] }
                let cw = classWeight[e.label] / Float(n)
                for k in 0..<labels { logits[row + k] = (logits[row + k] / sum - (k == e.label ? 1 : 0)) * cw }
            }
        }
    }

    /// Full-batch Adam with L2 weight decay on a linear layer (`outputs` × `d`) over `rows` centred and divided
    /// by one overall scale: scaling each dimension to unit variance would blow up the many that are nearly
    /// constant in training (0 after the ReLUs) and overfit to them. Each epoch, `gradient(logits, bias)`
    /// replaces the n × outputs logits (bias not yet added) with the loss gradient per logit, in place; the
    /// bias gradient is their column sum. The standardisation is folded into the returned weights, so they
    /// apply to raw embeddings. Shared by ``HeadTrainer`` (softmax) and ``InstrumentHeadTrainer`` (one
    /// logistic output per family).
    static func fitLinear(_ rows: [[Float]], outputs k: Int, d: Int, epochs: Int, learningRate: Float, weightDecay: Float,
                          gradient: (_ logits: inout [Float], _ bias: [Float]) -> Void) -> (weights: [Float], bias: [Float]) {
        let n = rows.count
        var mean = [Float](repeating: 0, count: d)
        for r in rows { for j in 0..<d { mean[j] += r[j] } }
        for j in 0..<d { mean[j] /= Float(n) }
        var z = [Float](repeating: 0, count: n * d)
        var sq: Float = 0
        for (i, r) in rows.enumerated() { for j in 0..<d { let v = r[j] - mean[j]; z[i * d + j] = v; sq += v * v } }
        let scale = max(1e-3, (sq / Float(n * d)).squareRoot())
        for i in z.indices { z[i] /= scale }

        var w = [Float](repeating: 0, count: k * d), b = [Float](repeating: 0, count: k)
        var mw = w, vw = w, mb = b, vb = b
        let (beta1, beta2, eps): (Float, Float, Float) = (0.9, 0.999, 1e-8)
        var logits = [Float](repeating: 0, count: n * k)
        var gw = [Float](repeating: 0, count: k * d)
        for epoch in 1...max(1, epochs) {
            // logits = Z·Wᵀ; G = ∂loss/∂logits; ∇W = Gᵀ·Z, ∇b = column sums of G.
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Int32(n), Int32(k), Int32(d), 1, z, Int32(d), w, Int32(d),
                        0, &logits, Int32(k))
            gradient(&logits, b)
            var gb = [Float](repeating: 0, count: k)
            for i in 0..<n { for f in 0..<k { gb[f] += logits[i * k + f] } }
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Int32(k), Int32(d), Int32(n), 1, logits, Int32(k), z, Int32(d),
                        0, &gw, Int32(d))
            let t = Float(epoch)
            let c1 = 1 - powf(beta1, t), c2 = 1 - powf(beta2, t)
            for i in w.indices {
                let g = gw[i] + weightDecay * w[i]
                mw[i] = beta1 * mw[i] + (1 - beta1) * g
                vw[i] = beta2 * vw[i] + (1 - beta2) * g * g
                w[i] -= learningRate * (mw[i] / c1) / ((vw[i] / c2).squareRoot() + eps)
            }
            for f in b.indices {
                mb[f] = beta1 * mb[f] + (1 - beta1) * gb[f]
                vb[f] = beta2 * vb[f] + (1 - beta2) * gb[f] * gb[f]
                b[f] -= learningRate * (mb[f] / c1) / ((vb[f] / c2).squareRoot() + eps)
            }
        }
        // Fold the standardisation in: w·(x − μ)/s + b = (w/s)·x + (b − Σ w μ/s).
        var raw = w, rawBias = b
        for f in 0..<k {
            for j in 0..<d {
                raw[f * d + j] = w[f * d + j] / scale
                rawBias[f] -= w[f * d + j] * mean[j] / scale
            }
        }
        return (raw, rawBias)
    }
}
