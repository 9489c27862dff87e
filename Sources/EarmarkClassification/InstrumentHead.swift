import COpenBLAS
import EarmarkAudio
import Foundation

/// A multi-label head on the sound model's embeddings: one logistic output per instrument family, with
/// its own hysteresis thresholds. Trained by ``InstrumentHeadTrainer`` on FluidSynth renders of
/// multi-part MIDI pieces (tools/train-instrument-head.sh); the trained head ships as the resource
/// `instrument-head.json` of this module (see ``InstrumentHead/shipped``).
///
/// File format (JSON, sorted keys): `format` (1), `name`, `description`, `model` (the sound model whose
/// embeddings it reads), `embeddingSize`, `families` (raw values, the output order), `weights` (base64
/// of little-endian float32, families × embeddingSize, row-major, for raw embeddings), `bias`, `onset`
/// and `offset` (per family, on the 0…1 curve), `smoothing` (seconds: the curve of a window is the mean
/// probability of the windows whose middles are that close to its middle).
public struct InstrumentHead: Sendable, Equatable {
    public static let fileName = "instrument-head.json"
    public static let formatVersion = 1

    public var name: String
    public var description: String
    /// Name of the sound model whose embeddings the head was trained on.
    public var model: String
    public var embeddingSize: Int
    public var families: [InstrumentFamily]
    /// families × embeddingSize, row-major.
    public var weights: [Float]
    public var bias: [Float]
    public var onset: [Double]
    public var offset: [Double]
    /// Half-width in seconds of the moving mean over the probabilities.
    public var smoothing: Double

    public init(name: String, description: String, model: String, embeddingSize: Int, families: [InstrumentFamily],
                weights: [Float], bias: [Float], onset: [Double], offset: [Double], smoothing: Double) {
        self.name = name
        self.description = description
        self.model = model
        self.embeddingSize = embeddingSize
        self.families = families
        self.weights = weights
        self.bias = bias
        self.onset = onset
        self.offset = offset
        self.smoothing = smoothing
    }

    struct File: Codable {
        var format: Int
        var name: String
        var description: String
        var model: String
        var embeddingSize: Int
        var families: [String]
        var weights: String
        var bias: [Float]
        var onset: [Double]
        var offset: [Double]
        var smoothing: Double
    }

    public init(data: Data) throws {
        let f: File
        do { f = try JSONDecoder().decode(File.self, from: data) } catch {
            throw SoundModelError(.inconsistent, "instrument head: not a head file (\(error))")
        }
        guard f.format == InstrumentHead.formatVersion else {
            throw SoundModelError(.inconsistent, "instrument head: format \(f.format), this build reads \(InstrumentHead.formatVersion)")
        }
        let families = f.families.compactMap(InstrumentFamily.init(rawValue:))
        guard families.count == f.families.count, !families.isEmpty else {
            throw SoundModelError(.inconsistent, "instrument head: unknown family in \(f.families)")
        }
        guard let raw = Data(base64Encoded: f.weights), raw.count == 4 * families.count * f.embeddingSize else {
            throw SoundModelError(.inconsistent, "instrument head: weights do not fit \(families.count) × \(f.embeddingSize)")
        }
        guard f.bias.count == families.count, f.onset.count == families.count, f.offset.count == families.count else {
            throw SoundModelError(.inconsistent, "instrument head: bias or thresholds do not fit \(families.count) families")
        }
        let weights = raw.withUnsafeBytes { p in
            (0..<(raw.count / 4)).map { Float(bitPattern: UInt32(littleEndian: p.loadUnaligned(fromByteOffset: 4 * $0, as: UInt32.self))) }
        }
        guard weights.allSatisfy(\.isFinite), f.bias.allSatisfy(\.isFinite) else {
            throw SoundModelError(.inconsistent, "instrument head: weights are not finite")
        }
        self.init(name: f.name, description: f.description, model: f.model, embeddingSize: f.embeddingSize, families: families,
                  weights: weights, bias: f.bias, onset: f.onset, offset: f.offset, smoothing: f.smoothing)
    }

    public init(path: String) throws {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw SoundModelError(.notFound, "instrument head: cannot read \(path)")
        }
        try self.init(data: data)
    }

    /// The file's bytes (see the type's description).
    public func fileData() throws -> Data {
        var raw = Data(capacity: 4 * weights.count)
        for w in weights { withUnsafeBytes(of: w.bitPattern.littleEndian) { raw.append(contentsOf: $0) } }
        let f = File(format: InstrumentHead.formatVersion, name: name, description: description, model: model,
                     embeddingSize: embeddingSize, families: families.map(\.rawValue), weights: raw.base64EncodedString(),
                     bias: bias, onset: onset.map(InstrumentHead.rounded), offset: offset.map(InstrumentHead.rounded),
                     smoothing: smoothing)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
        return try encoder.encode(f) + Data("\n".utf8)
    }

    static func rounded(_ x: Double) -> Double { (x * 10_000).rounded() / 10_000 }

    /// Whether the head reads `model`'s embeddings.
    public func fits(_ model: SoundModel) -> Bool { model.embeddingSize == embeddingSize && model.name == self.model }

    /// Per family (in ``families`` order), the probability for each of `embeddings` (each embeddingSize long).
    public func probabilities(_ embeddings: [[Float]]) -> [[Float]] {
        let n = embeddings.count, k = families.count, d = embeddingSize
        guard n > 0 else { return [[Float]](repeating: [], count: k) }
        var x = [Float](repeating: 0, count: n * d)
        for (i, e) in embeddings.enumerated() where e.count == d { for j in 0..<d { x[i * d + j] = e[j] } }
        var z = [Float](repeating: 0, count: k * n)
        // z (k × n) = W (k × d) · Xᵀ
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Int32(k), Int32(n), Int32(d), 1, weights, Int32(d), x, Int32(d), 0, &z, Int32(n))
        return (0..<k).map { f in (0..<n).map { i in 1 / (1 + expf(-(z[f * n + i] + bias[f]))) } }
    }

    /// `curves` (per family, over windows in time order) averaged over the windows whose middles are within
    /// `radius` s of each window's middle.
    static func smooth(_ curves: [[Float]], middles: [Double], radius: Double) -> [[Float]] {
        guard radius > 0, middles.count > 1 else { return curves }
        // Windows come in time order; a two-pointer sweep over the prefix sums.
        var spans: [(Int, Int)] = []
        var a = 0, b = 0
        for m in middles {
            while a < middles.count && middles[a] < m - radius - 1e-9 { a += 1 }
            while b < middles.count && middles[b] <= m + radius + 1e-9 { b += 1 }
            spans.append((a, max(a + 1, b)))
        }
        return curves.map { c in
            var prefix = [Double](repeating: 0, count: c.count + 1)
            for (i, v) in c.enumerated() { prefix[i + 1] = prefix[i] + Double(v) }
            return spans.map { Float((prefix[$0.1] - prefix[$0.0]) / Double($0.1 - $0.0)) }
        }
    }

    /// Where the shipped head is looked for, in order: `$EARMARK_INSTRUMENT_HEAD`; the module's SwiftPM
    /// resource bundle beside the executable (Linux: `Earmark_EarmarkClassification.resources/`, macOS:
    /// `Earmark_EarmarkClassification.bundle/`), and beside the executable's folder's parents' (a test runner
    /// inside an .xctest bundle).
    public static func defaultPathCandidates() -> [String] {
        let env = ProcessInfo.processInfo.environment
        if let explicit = env["EARMARK_INSTRUMENT_HEAD"], !explicit.isEmpty { return [explicit] }
        return ResourceBundle.candidates(target: "EarmarkClassification", item: fileName)
    }

    /// The shipped head, or why there is none (loaded once).
    public static let shipped: Result<InstrumentHead, SoundModelError> = {
        let candidates = defaultPathCandidates()
        guard let path = candidates.first(where: { FileManager.default.fileExists(atPath: $0) }) else {
            return .failure(SoundModelError(.notFound, "no \(fileName) (looked in \(candidates.joined(separator: ", ")))"))
        }
        do { return .success(try InstrumentHead(path: path)) } catch let e as SoundModelError { return .failure(e) } catch {
            return .failure(SoundModelError(.inconsistent, "\(error)"))
        }
    }()
}
