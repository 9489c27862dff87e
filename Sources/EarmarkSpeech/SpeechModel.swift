import CHalfGEMM
import EarmarkAudio
import Foundation

/// An error loading a speech model.
public struct SpeechModelError: Error, CustomStringConvertible, Sendable, Equatable {
    public enum Code: String, Sendable {
        /// No model file where one was looked for.
        case notFound
        /// Not a speech model file, a damaged one, or a truncated one.
        case invalidFile
        /// A format version this build cannot read.
        case unsupportedVersion
        /// The tensors do not fit the architecture the header states.
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

/// How the weights the decoder reads at every token are held in memory (``SpeechModel/halfPrecisionTensors(_:)``:
/// every decoder linear layer but the cross-attention key/value projection, and the token embedding, which is
/// also the output projection).
public enum DecoderWeights: String, Sendable, CaseIterable {
    /// The model file's own float16 values, widened to Float32 as the GEMM reads them (the same values as
    /// Float32 weights; results equal CTranslate2's float32 ones up to the order of the sums): 97 MB for Whisper base.
    case float16
    /// Quantised once when loading to int8 with a Float32 scale per output row (max |w| / 127, as CTranslate2's
    /// int8 mode), each input row to int16 at every product, sums exact in integers: 48 MB, half the bytes a
    /// decoder step reads, and the same results on every CPU. Not the float weights: transcripts can differ in a
    /// word here and there (3 of 150 English prompts). The window's cross-attention keys and values are then held as
    /// binary16 as well (18 MB instead of 36 MB read at every step of a 30-s window).
    case int8

    /// What ``SpeechModel/init(path:decoderWeights:)`` uses unless told otherwise: int8, which measured the same
    /// word error rate as float16 or lower (en-isolated 5.5 % against 5.6 %, en-long 3.3 % against 4.1 %, beam 5) for
    /// about a quarter less CPU on long audio (docs/benchmarks.md).
    public static let standard: DecoderWeights = .int8
}

/// How the encoder's linear layers (attention projections and feed-forward, 6 × 4 matrices in Whisper base) are held:
/// the convolution stem, the layer norms and the attention itself stay Float32 either way.
public enum EncoderWeights: String, Sendable, CaseIterable {
    /// Widened to Float32 when loading, multiplied by OpenBLAS (results equal CTranslate2's float32 ones up to the order
    /// of the sums).
    case float32
    /// Quantised when loading to int8 with a scale per output row, as the decoder's int8 weights, and multiplied with
    /// each input row quantised to int16 (`earmark_int8_gemm_packed`: exact integer sums, the same bits on every CPU).
    case int8

    /// What ``SpeechModel/init(path:decoderWeights:encoderWeights:)`` uses unless told otherwise.
    public static let standard: EncoderWeights = .float32
}

/// Sizes of a Whisper network (header field `architecture`).
public struct WhisperArchitecture: Codable, Sendable, Equatable {
    /// Mel bands per frame (80).
    public var melBands: Int
    /// Encoder positions per 30-s window (1500: two mel frames each).
    public var audioContext: Int
    /// Width of the encoder (512 for base), its attention heads and blocks.
    public var audioState: Int
    public var audioHeads: Int
    public var audioLayers: Int
    /// Tokens in the vocabulary (51,865 for the multilingual models).
    public var vocabularySize: Int
    /// Most decoder positions (prompt and sampled tokens together).
    public var textContext: Int
    /// Width of the decoder, its attention heads and blocks.
    public var textState: Int
    public var textHeads: Int
    public var textLayers: Int
}

/// The log-mel front end a speech model expects (header field `frontEnd`).
public struct WhisperFrontEndSpec: Codable, Sendable, Equatable {
    /// Hz (16,000 for Whisper).
    public var sampleRate: Int
    /// FFT and Hann window length in samples (400 = 25 ms).
    public var fftLength: Int
    /// Frame hop in samples (160 = 10 ms).
    public var hopLength: Int
    /// Mel bands per frame (80).
    public var melBands: Int
    /// Seconds of audio the encoder reads at once (30).
    public var chunkSeconds: Int

    /// Mel frames per window (3,000).
    public var chunkFrames: Int { chunkSeconds * sampleRate / hopLength }
}

/// Token ids with a fixed role.
public struct WhisperSpecialTokens: Codable, Sendable, Equatable {
    public var endOfText: Int
    public var startOfTranscript: Int
    public var translate: Int
    public var transcribe: Int
    public var startOfPrevious: Int
    public var noSpeech: Int
    public var noTimestamps: Int
    /// `<|0.00|>`; every id from here to the end of the vocabulary is a time, 0.02 s apart.
    public var timestampBegin: Int
}

/// A language the model knows, with its token (`<|en|>` …).
public struct WhisperLanguage: Codable, Sendable, Equatable, Hashable {
    /// ISO 639-1 code as Whisper spells it ("en", "fr", "haw", …).
    public var code: String
    public var token: Int
}

struct TensorEntry: Codable, Sendable {
    var offset: Int
    var bytes: Int
    var shape: [Int]
    var type: String
}

struct SpeechModelHeader: Codable, Sendable {
    var name: String
    var description: String?
    var licence: String?
    var architecture: WhisperArchitecture
    var frontEnd: WhisperFrontEndSpec
    var special: WhisperSpecialTokens
    var languages: [WhisperLanguage]
    var suppressTokens: [Int]
    var suppressAtBegin: [Int]
    var alignmentHeads: [[Int]]?
    var tensors: [String: TensorEntry]
    var blobBytes: Int
    var blobChecksum: String
}

/// A Whisper speech recogniser's weights and vocabulary in Earmark's own file format (`.emodel`, magic
/// `EARWHSPR`; see docs/speech.md), loaded and checked.
///
/// `tools/fetch-speech-model.sh` makes the file from Systran's CTranslate2 conversion of Whisper base.
/// Every byte is treated as untrusted: loading checks the magic, version, sizes and checksum, and that
/// every tensor has the shape the stated architecture needs, so a truncated, damaged or foreign file is
/// refused with a ``SpeechModelError``. The float16 weights are widened to Float32 once, here, except those the
/// decoder reads at every token (``halfPrecisionTensors(_:)``), which stay float16 or are quantised to int8
/// (``DecoderWeights``).
///
/// ```swift
/// let model = try SpeechModel(path: "models/whisper-base.emodel")
/// let recognizer = WhisperRecognizer(model: model)
/// ```
public struct SpeechModel: Sendable {
    static let magic = Array("EARWHSPR".utf8)
    /// The format version this build reads.
    public static let formatVersion: UInt32 = 1
    static let alignment = 64

    /// Where `tools/fetch-speech-model.sh` puts the model, relative to the repository.
    public static let defaultRelativePath = "models/whisper-base.emodel"

    /// The model's name ("whisper-base").
    public let name: String
    /// What the network is, from the converter.
    public let description: String?
    /// Licence and origin of the weights.
    public let licence: String?
    public let architecture: WhisperArchitecture
    public let frontEnd: WhisperFrontEndSpec
    public let special: WhisperSpecialTokens
    /// The languages in the order of the model's language tokens.
    public let languages: [WhisperLanguage]
    /// Tokens never sampled (punctuation-like symbols and special tokens, from the model's config).
    public let suppressTokens: [Int]
    /// Tokens not sampled first (a blank and end of text).
    public let suppressAtBegin: [Int]
    /// Decoder cross-attention heads (layer, head) used for word times (from the model's config).
    public let alignmentHeads: [(layer: Int, head: Int)]
    /// The tokenizer for this model's vocabulary.
    public let tokenizer: WhisperTokenizer
    /// How the decoder's per-token weights are held (float16 as in the file, or int8 quantised when loading).
    public let decoderWeights: DecoderWeights
    /// How the encoder's linear layers are held (Float32, or int8 quantised when loading).
    public let encoderWeights: EncoderWeights
    let weights: WeightStorage

    /// Reads and checks a model file; `decoderWeights` says how the decoder's per-token weights are kept, `encoderWeights`
    /// how the encoder's linear layers are.
    public init(path: String, decoderWeights: DecoderWeights = .standard, encoderWeights: EncoderWeights = .standard) throws {
        guard FileManager.default.fileExists(atPath: path) else {
            throw SpeechModelError(.notFound, "no speech model at \(path) (run tools/fetch-speech-model.sh to fetch and convert Whisper base)")
        }
        // Mapped read-only by hand (not Data's mapping, which may copy), so that pages already converted can be
        // dropped while loading: the float16 file and the Float32 weights are then never resident together.
        let fd = open(path, O_RDONLY)
        guard fd >= 0 else {
            throw SpeechModelError(.invalidFile, "cannot read the speech model \(path): \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else {
            throw SpeechModelError(.invalidFile, "cannot read the speech model \(path): \(String(cString: strerror(errno)))")
        }
        let size = Int(info.st_size)
        guard size > 0 else { try self.init(data: Data(), name: path, decoderWeights: decoderWeights, encoderWeights: encoderWeights); return }
        guard let mapped = mmap(nil, size, PROT_READ, MAP_PRIVATE, fd, 0), mapped != MAP_FAILED else {
            throw SpeechModelError(.invalidFile, "cannot map the speech model \(path): \(String(cString: strerror(errno)))")
        }
        let data = Data(bytesNoCopy: mapped, count: size, deallocator: .custom { pointer, count in munmap(pointer, count) })
        try self.init(data: data, name: path, fileMapped: true, decoderWeights: decoderWeights, encoderWeights: encoderWeights)
    }

    /// Parses a model from its bytes; `name` is used in error messages.
    public init(data: Data, name fileName: String = "model", decoderWeights: DecoderWeights = .standard,
                encoderWeights: EncoderWeights = .standard) throws {
        try self.init(data: data, name: fileName, fileMapped: false, decoderWeights: decoderWeights, encoderWeights: encoderWeights)
    }

    /// `fileMapped`: `data` is a read-only private mapping of a file, whose pages may be released once read.
    private init(data: Data, name fileName: String, fileMapped: Bool, decoderWeights: DecoderWeights,
                 encoderWeights: EncoderWeights) throws {
        func bad(_ why: String) -> SpeechModelError {
            SpeechModelError(.invalidFile, "\(fileName) is not a usable speech model: \(why)")
        }
        func inconsistent(_ why: String) -> SpeechModelError { SpeechModelError(.inconsistent, "\(fileName): \(why)") }
        let parsed: (SpeechModelHeader, WeightStorage, [UInt8]) = try data.withUnsafeBytes { (raw: UnsafeRawBufferPointer) in
            guard raw.count >= 16, Array(raw[0..<8]) == SpeechModel.magic else { throw bad("no EARWHSPR signature") }
            func u32(_ at: Int) -> UInt32 { (0..<4).reduce(UInt32(0)) { $0 | UInt32(raw[at + $1]) << (8 * $1) } }
            let version = u32(8)
            guard version == SpeechModel.formatVersion else {
                throw SpeechModelError(.unsupportedVersion, "\(fileName) has speech model format version \(version); this build reads version \(SpeechModel.formatVersion)")
            }
            let headerLength = Int(u32(12))
            guard headerLength > 0, headerLength <= raw.count - 16 else { throw bad("truncated header") }
            let header: SpeechModelHeader
            do {
                header = try JSONDecoder().decode(SpeechModelHeader.self, from: Data(raw[16..<(16 + headerLength)]))
            } catch {
                throw bad("damaged header (\(error))")
            }
            let blobStart = (16 + headerLength + SpeechModel.alignment - 1) / SpeechModel.alignment * SpeechModel.alignment
            // Compared by subtraction: a damaged header may state any Int, and a sum could overflow.
            guard header.blobBytes >= 0, header.blobBytes % 8 == 0, blobStart <= raw.count, header.blobBytes == raw.count - blobStart else {
                throw bad("expected \(blobStart) + \(header.blobBytes) bytes, found \(raw.count) (truncated or extended)")
            }
            let blob = UnsafeRawBufferPointer(rebasing: raw[blobStart...])
            // Drops the pages of a file mapping from memory (they are read again from the file if touched).
            func release(_ from: Int, _ count: Int) {
                guard fileMapped, count > 0 else { return }
                let page = Int(sysconf(Int32(_SC_PAGESIZE)))
                let start = raw.baseAddress! + blobStart + from
                let aligned = UnsafeRawPointer(bitPattern: Int(bitPattern: start) / page * page)!
                let end = Int(bitPattern: start) + count
                _ = madvise(UnsafeMutableRawPointer(mutating: aligned), end - Int(bitPattern: aligned), Int32(MADV_DONTNEED))
            }
            guard SpeechModel.checksum(blob) == header.blobChecksum.lowercased() else { throw bad("checksum mismatch (damaged weights)") }
            release(0, blob.count)
            let expected = try SpeechModel.expectedShapes(header, inconsistent)
            let half = SpeechModel.halfPrecisionTensors(header)
            let total = expected.values.reduce(0) { $0 + $1.reduce(1, *) }
            let halfTotal = expected.filter { half.contains($0.key) }.values.reduce(0) { $0 + $1.reduce(1, *) }
            guard total <= blob.count / 2 else { throw inconsistent("the file holds fewer weights than its architecture needs") }
            let quantise = decoderWeights == .int8
            let halfRows = expected.filter { half.contains($0.key) }.values.reduce(0) { $0 + $1[0] }
            let packedEncoder = encoderWeights == .int8 ? SpeechModel.encoderLinearTensors(header) : []
            let packedShapes = expected.filter { packedEncoder.contains($0.key) }.values
            let packedTotal = packedShapes.reduce(0) { $0 + $1.reduce(1, *) }
            let weights = WeightStorage(count: total - halfTotal - packedTotal, halfCount: quantise ? 0 : halfTotal,
                                        quantizedCount: quantise ? halfTotal : 0,
                                        scaleCount: (quantise ? halfRows : 0) + packedShapes.reduce(0) { $0 + $1[0] },
                                        packedCount: packedShapes.reduce(0) { $0 + earmark_int8_pack_count($1[0], $1[1]) })
            for (tensorName, shape) in expected.sorted(by: { $0.key < $1.key }) {
                guard let entry = header.tensors[tensorName] else { throw inconsistent("no tensor \(tensorName)") }
                guard entry.shape == shape else { throw inconsistent("\(tensorName) has shape \(entry.shape), the architecture needs \(shape)") }
                let count = shape.reduce(1, *)
                guard entry.type == "float16", entry.bytes == count * 2, entry.offset >= 0, entry.offset % 2 == 0,
                      entry.offset <= blob.count, entry.bytes <= blob.count - entry.offset
                else { throw inconsistent("\(tensorName) is not \(count) float16 values inside the blob") }
                let base = blob.baseAddress! + entry.offset
                var finite = true
                if half.contains(tensorName) && quantise {
                    // Quantised row by row (each row's float16 values copied out first: the blob need not be aligned).
                    let rows = shape[0], cols = count / max(1, rows)
                    let (out, scales) = weights.addQuantized(tensorName, rows: rows, cols: cols)
                    finite = quantiseHalfRows(base, rows: rows, cols: cols, into: out, scales: scales)
                } else if packedEncoder.contains(tensorName) {
                    // Quantised row by row as the decoder's int8 weights, then packed for the many-row kernel.
                    let rows = shape[0], cols = count / max(1, rows)
                    let (packed, scales) = weights.addPacked(tensorName, count: earmark_int8_pack_count(rows, cols), rows: rows)
                    let quantized = UnsafeMutablePointer<Int8>.allocate(capacity: max(1, count))
                    defer { quantized.deallocate() }
                    finite = quantiseHalfRows(base, rows: rows, cols: cols, into: quantized, scales: scales)
                    if finite { earmark_int8_pack(quantized, cols, rows, cols, packed) }
                } else if half.contains(tensorName) {
                    // Kept as float16 bit patterns (read by the half-precision GEMM); finite means exponent bits not all set.
                    let out = weights.addHalf(tensorName, count: count)
                    for i in 0..<count {
                        let bits = UInt16(littleEndian: base.loadUnaligned(fromByteOffset: 2 * i, as: UInt16.self))
                        finite = finite && bits & 0x7C00 != 0x7C00
                        out[i] = bits
                    }
                } else {
                    let out = weights.add(tensorName, count: count)
                    for i in 0..<count {
                        let bits = UInt16(littleEndian: base.loadUnaligned(fromByteOffset: 2 * i, as: UInt16.self))
                        let value = Float(Float16(bitPattern: bits))
                        finite = finite && value.isFinite
                        out[i] = value
                    }
                }
                guard finite else { throw inconsistent("\(tensorName) holds a non-finite value") }
                release(entry.offset, entry.bytes)
            }
            guard let v = header.tensors["vocabulary"], v.type == "uint8", v.shape == [v.bytes], v.offset >= 0,
                  v.offset <= blob.count, v.bytes <= blob.count - v.offset
            else { throw inconsistent("no vocabulary inside the blob") }
            return (header, weights, Array(blob[v.offset..<(v.offset + v.bytes)]))
        }
        let (header, weights, vocabulary) = parsed
        let a = header.architecture
        let tokenizer = try WhisperTokenizer(vocabulary: vocabulary, special: header.special, languages: header.languages,
                                             vocabularySize: a.vocabularySize, fileName: fileName)
        for id in header.suppressTokens + header.suppressAtBegin + header.languages.map(\.token) where !(0..<a.vocabularySize).contains(id) {
            throw inconsistent("token id \(id) outside the vocabulary")
        }
        name = header.name
        description = header.description
        licence = header.licence
        architecture = a
        frontEnd = header.frontEnd
        special = header.special
        languages = header.languages
        suppressTokens = header.suppressTokens
        suppressAtBegin = header.suppressAtBegin
        // The heads whose cross-attention follows the speech; without them, every head of the upper half (Whisper's default).
        let heads = (header.alignmentHeads ?? []).filter {
            $0.count == 2 && (0..<a.textLayers).contains($0[0]) && (0..<a.textHeads).contains($0[1])
        }
        if heads.isEmpty {
            alignmentHeads = (a.textLayers / 2..<a.textLayers).flatMap { l in (0..<a.textHeads).map { (layer: l, head: $0) } }
        } else {
            alignmentHeads = heads.map { (layer: $0[0], head: $0[1]) }
        }
        self.tokenizer = tokenizer
        self.weights = weights
        self.decoderWeights = decoderWeights
        self.encoderWeights = encoderWeights
    }

    /// The sums of `blobChecksum`: over little-endian UInt64 words w, s1 = Σ w[i], s2 = Σ (i + 1)·w[i], both mod 2⁶⁴.
    static func checksum(_ blob: UnsafeRawBufferPointer) -> String {
        var s1: UInt64 = 0, s2: UInt64 = 0
        let n = blob.count / 8
        let base = blob.baseAddress
        for i in 0..<n {
            let w = UInt64(littleEndian: base!.loadUnaligned(fromByteOffset: 8 * i, as: UInt64.self))
            s1 &+= w
            s2 &+= UInt64(i + 1) &* w
        }
        func hex(_ v: UInt64) -> String {
            let s = String(v, radix: 16)
            return String(repeating: "0", count: 16 - s.count) + s
        }
        return hex(s1) + ":" + hex(s2)
    }

    /// Every weight tensor the network reads, with the shape the architecture gives it.
    static func expectedShapes(_ header: SpeechModelHeader, _ inconsistent: (String) -> SpeechModelError) throws -> [String: [Int]] {
        let a = header.architecture, fe = header.frontEnd
        // Bounds far above Whisper large's (1280 wide, 32 layers, 51,866 tokens) keep every product within Int.
        guard (1...4096).contains(a.audioState), (1...4096).contains(a.textState), a.audioState == a.textState,
              (1...64).contains(a.audioHeads), (1...64).contains(a.textHeads),
              a.audioState % a.audioHeads == 0, a.textState % a.textHeads == 0,
              (1...64).contains(a.audioLayers), (1...64).contains(a.textLayers),
              (1...4096).contains(a.textContext), (1...200_000).contains(a.vocabularySize),
              (1...512).contains(a.melBands), a.melBands == fe.melBands,
              fe.sampleRate == 16_000, (16...4096).contains(fe.fftLength), (1...4096).contains(fe.hopLength),
              (1...60).contains(fe.chunkSeconds), (2...6000).contains(fe.chunkFrames), fe.chunkFrames % 2 == 0,
              a.audioContext == fe.chunkFrames / 2
        else { throw inconsistent("architecture or front end out of range") }
        let s = header.special
        guard [s.endOfText, s.startOfTranscript, s.translate, s.transcribe, s.startOfPrevious, s.noSpeech, s.noTimestamps]
                .allSatisfy({ (0..<a.vocabularySize).contains($0) }),
              s.timestampBegin == s.noTimestamps + 1, s.timestampBegin < a.vocabularySize, s.endOfText < s.timestampBegin
        else { throw inconsistent("special tokens outside the vocabulary") }
        let d = a.audioState, f = 4 * d
        var shapes: [String: [Int]] = [
            "encoder/conv1/weight": [d, a.melBands, 3], "encoder/conv1/bias": [d],
            "encoder/conv2/weight": [d, d, 3], "encoder/conv2/bias": [d],
            "encoder/position_encodings/encodings": [a.audioContext, d],
            "encoder/layer_norm/gamma": [d], "encoder/layer_norm/beta": [d],
            "decoder/embeddings/weight": [a.vocabularySize, d],
            "decoder/position_encodings/encodings": [a.textContext, d],
            "decoder/layer_norm/gamma": [d], "decoder/layer_norm/beta": [d],
        ]
        func norm(_ p: String) { shapes[p + "/layer_norm/gamma"] = [d]; shapes[p + "/layer_norm/beta"] = [d] }
        func linear(_ p: String, _ rows: Int, _ cols: Int) { shapes[p + "/weight"] = [rows, cols]; shapes[p + "/bias"] = [rows] }
        func ffn(_ p: String) { norm(p); linear(p + "/linear_0", f, d); linear(p + "/linear_1", d, f) }
        for i in 0..<a.audioLayers {
            let p = "encoder/layer_\(i)"
            norm(p + "/self_attention")
            linear(p + "/self_attention/linear_0", 3 * d, d)
            linear(p + "/self_attention/linear_1", d, d)
            ffn(p + "/ffn")
        }
        for i in 0..<a.textLayers {
            let p = "decoder/layer_\(i)"
            norm(p + "/self_attention")
            linear(p + "/self_attention/linear_0", 3 * d, d)
            linear(p + "/self_attention/linear_1", d, d)
            norm(p + "/attention")
            linear(p + "/attention/linear_0", d, d)
            linear(p + "/attention/linear_1", 2 * d, d)
            linear(p + "/attention/linear_2", d, d)
            ffn(p + "/ffn")
        }
        return shapes
    }

    /// A weight tensor widened to Float32 (present: the loader checked every name the network reads).
    func tensor(_ name: String) -> UnsafePointer<Float> { weights.pointer(name) }

    /// One of ``halfPrecisionTensors(_:)`` as the decoder reads it: float16 bit patterns, or int8 rows with their scales.
    func decoderTensor(_ name: String) -> DecoderMatrix {
        switch decoderWeights {
        case .float16: return .half(weights.halfPointer(name))
        case .int8:
            let (values, scales) = weights.quantizedPointer(name)
            return .int8(values, scales: scales)
        }
    }

    /// An encoder linear layer's weights as the encoder reads them (``encoderWeights``).
    func encoderTensor(_ name: String) -> EncoderMatrix {
        switch encoderWeights {
        case .float32: return .float32(weights.pointer(name))
        case .int8:
            let (values, scales) = weights.packedPointer(name)
            return .int8(values, scales: scales)
        }
    }

    /// The encoder's linear layers' weights (attention projections and feed-forward), held as int8 with
    /// ``EncoderWeights/int8``.
    static func encoderLinearTensors(_ header: SpeechModelHeader) -> Set<String> {
        var names: Set<String> = []
        for i in 0..<header.architecture.audioLayers {
            for linear in ["self_attention/linear_0", "self_attention/linear_1", "ffn/linear_0", "ffn/linear_1"] {
                names.insert("encoder/layer_\(i)/" + linear + "/weight")
            }
        }
        return names
    }

    /// The weights kept as float16, as in the file: the token embedding (also the output projection) and every
    /// decoder layer's linear weights read at each token, except the cross-attention key/value projection (run once
    /// per window over 1,500 positions, by OpenBLAS). They are read once per decoder step, so their size in memory
    /// is the step's cost; the half-precision GEMM widens them to Float32 as it reads them (the same values).
    static func halfPrecisionTensors(_ header: SpeechModelHeader) -> Set<String> {
        var names: Set<String> = ["decoder/embeddings/weight"]
        for i in 0..<header.architecture.textLayers {
            let p = "decoder/layer_\(i)/"
            for linear in ["self_attention/linear_0", "self_attention/linear_1", "attention/linear_0", "attention/linear_2",
                           "ffn/linear_0", "ffn/linear_1"] {
                names.insert(p + linear + "/weight")
            }
        }
        return names
    }

    /// The language with this code, if the model knows it.
    public func language(code: String) -> WhisperLanguage? { languages.first { $0.code == code } }
}

/// A decoder weight matrix (rows = outputs) as the decoder's GEMMs read it.
enum DecoderMatrix {
    /// float16 bit patterns, row-major.
    case half(UnsafePointer<UInt16>)
    /// int8 values, row-major, and a Float32 scale per row.
    case int8(UnsafePointer<Int8>, scales: UnsafePointer<Float>)
}

/// An encoder weight matrix (rows = outputs): Float32, or int8 values packed by `earmark_int8_pack` with a scale per row.
enum EncoderMatrix {
    case float32(UnsafePointer<Float>)
    case int8(UnsafePointer<Int16>, scales: UnsafePointer<Float>)
}

/// Every weight of a model in one Float32 allocation and one float16 or int8 allocation (the tensors the decoder
/// reads at every token), written once while loading and only read after that; `@unchecked Sendable` is safe
/// because nothing mutates it once ``SpeechModel`` holds it.
final class WeightStorage: @unchecked Sendable {
    private let base: UnsafeMutablePointer<Float>
    private let halfBase: UnsafeMutablePointer<UInt16>
    private let quantizedBase: UnsafeMutablePointer<Int8>
    private let scaleBase: UnsafeMutablePointer<Float>
    private let packedBase: UnsafeMutablePointer<Int16>
    private let capacity: Int, halfCapacity: Int, quantizedCapacity: Int, scaleCapacity: Int, packedCapacity: Int
    private var used = 0, halfUsed = 0, quantizedUsed = 0, scalesUsed = 0, packedUsed = 0
    private var packedOffsets: [String: (values: Int, scales: Int)] = [:]
    private var offsets: [String: Int] = [:]
    private var halfOffsets: [String: Int] = [:]
    private var quantizedOffsets: [String: (values: Int, scales: Int)] = [:]

    init(count: Int, halfCount: Int, quantizedCount: Int = 0, scaleCount: Int = 0, packedCount: Int = 0) {
        capacity = count
        packedCapacity = packedCount
        packedBase = .allocate(capacity: max(1, packedCount))
        halfCapacity = halfCount
        quantizedCapacity = quantizedCount
        scaleCapacity = scaleCount
        base = .allocate(capacity: max(1, count))
        halfBase = .allocate(capacity: max(1, halfCount))
        quantizedBase = .allocate(capacity: max(1, quantizedCount))
        scaleBase = .allocate(capacity: max(1, scaleCount))
    }

    deinit {
        base.deallocate()
        halfBase.deallocate()
        quantizedBase.deallocate()
        scaleBase.deallocate()
        packedBase.deallocate()
    }

    /// Reserves `count` packed int16 values and `rows` scales for `name` (loading only).
    func addPacked(_ name: String, count: Int, rows: Int) -> (UnsafeMutablePointer<Int16>, UnsafeMutablePointer<Float>) {
        precondition(packedUsed + count <= packedCapacity && scalesUsed + rows <= scaleCapacity)
        packedOffsets[name] = (packedUsed, scalesUsed)
        packedUsed += count
        scalesUsed += rows
        return (packedBase + (packedUsed - count), scaleBase + (scalesUsed - rows))
    }

    func packedPointer(_ name: String) -> (UnsafePointer<Int16>, UnsafePointer<Float>) {
        let o = packedOffsets[name]!
        return (UnsafePointer(packedBase + o.values), UnsafePointer(scaleBase + o.scales))
    }

    /// Reserves `rows × cols` int8 values and `rows` scales for `name` (loading only).
    func addQuantized(_ name: String, rows: Int, cols: Int) -> (UnsafeMutablePointer<Int8>, UnsafeMutablePointer<Float>) {
        precondition(quantizedUsed + rows * cols <= quantizedCapacity && scalesUsed + rows <= scaleCapacity)
        quantizedOffsets[name] = (quantizedUsed, scalesUsed)
        quantizedUsed += rows * cols
        scalesUsed += rows
        return (quantizedBase + (quantizedUsed - rows * cols), scaleBase + (scalesUsed - rows))
    }

    func quantizedPointer(_ name: String) -> (UnsafePointer<Int8>, UnsafePointer<Float>) {
        let o = quantizedOffsets[name]!
        return (UnsafePointer(quantizedBase + o.values), UnsafePointer(scaleBase + o.scales))
    }

    /// Reserves `count` Float32 values for `name` (loading only).
    func add(_ name: String, count: Int) -> UnsafeMutablePointer<Float> {
        precondition(used + count <= capacity)
        offsets[name] = used
        used += count
        return base + (used - count)
    }

    /// Reserves `count` float16 values for `name` (loading only).
    func addHalf(_ name: String, count: Int) -> UnsafeMutablePointer<UInt16> {
        precondition(halfUsed + count <= halfCapacity)
        halfOffsets[name] = halfUsed
        halfUsed += count
        return halfBase + (halfUsed - count)
    }

    func pointer(_ name: String) -> UnsafePointer<Float> { UnsafePointer(base + offsets[name]!) }

    func halfPointer(_ name: String) -> UnsafePointer<UInt16> { UnsafePointer(halfBase + halfOffsets[name]!) }
}

extension SpeechModel {
    /// File name of the default model.
    public static let defaultFileName = "whisper-base.emodel"

    /// Where the default model is looked for, in order: `$EARMARK_SPEECH_MODEL`; `models/whisper-base.emodel`
    /// in the folder of the executable or any of its parents (a build inside the source tree finds the tree's
    /// `models/`, where tools/fetch-speech-model.sh puts it); the same in the working directory;
    /// `$XDG_DATA_HOME/earmark/models/` (else `~/.local/share/earmark/models/`).
    public static func defaultPathCandidates() -> [String] {
        ModelFiles.candidates(fileName: defaultFileName, environmentVariable: "EARMARK_SPEECH_MODEL")
    }

    /// Loads `path`, or the first default candidate that exists; a missing default names every place it looked.
    public static func load(path: String?, decoderWeights: DecoderWeights = .standard,
                            encoderWeights: EncoderWeights = .standard) throws -> SpeechModel {
        if let path { return try SpeechModel(path: path, decoderWeights: decoderWeights, encoderWeights: encoderWeights) }
        let places = defaultPathCandidates()
        guard let found = places.first(where: { FileManager.default.fileExists(atPath: $0) }) else {
            throw SpeechModelError(.notFound, "no speech model found (looked in \(places.joined(separator: ", "))); "
                                   + "run tools/fetch-speech-model.sh to fetch and convert Whisper base, or pass --model")
        }
        return try SpeechModel(path: found, decoderWeights: decoderWeights, encoderWeights: encoderWeights)
    }
}

/// Quantises `rows` rows of `cols` float16 values at `base` (unaligned) into int8 rows with a scale each, as the decoder's
/// int8 weights are held. False at the first value that is not finite (the rest is left undone).
private func quantiseHalfRows(_ base: UnsafeRawPointer, rows: Int, cols: Int, into out: UnsafeMutablePointer<Int8>,
                              scales: UnsafeMutablePointer<Float>) -> Bool {
    withUnsafeTemporaryAllocation(of: UInt16.self, capacity: max(1, cols)) { row in
        for j in 0..<rows {
            for i in 0..<cols {
                let bits = UInt16(littleEndian: base.loadUnaligned(fromByteOffset: 2 * (j * cols + i), as: UInt16.self))
                guard bits & 0x7C00 != 0x7C00 else { return false }
                row[i] = bits
            }
            earmark_quantise_half_rows(row.baseAddress, 1, cols, out + j * cols, scales + j)
        }
        return true
    }
}
