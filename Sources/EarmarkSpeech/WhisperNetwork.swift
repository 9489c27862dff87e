import CHalfGEMM
import COpenBLAS
import Foundation

/// Whisper's encoder and decoder, with the decoder's key/value caches: the encoder in Float32 on OpenBLAS, the
/// decoder's per-token products on float16 weights widened to Float32 inside the GEMM (`CHalfGEMM`), Float32 sums,
/// or on int8 weights with a scale per row (``SpeechModel/decoderWeights``, `earmark_int8_gemm`).
///
/// The encoder reads one 30-s window of log-mel frames (frame-major, `chunkFrames × melBands`) and
/// leaves `audioContext × audioState` values in ``encoderOutput``; ``prepareDecoder()`` then projects them to
/// every decoder layer's cross-attention keys and values once, and ``step(_:)`` runs one token through
/// the decoder (self-attention over the tokens so far, cross-attention over the window) and returns the
/// next token's logits. All buffers are allocated in `init`; nothing is allocated per token or per frame.
/// An instance is not thread-safe; give each thread its own (they share the model's weights).
public final class WhisperNetwork {
    struct Linear {
        var weight: UnsafePointer<Float>
        var bias: UnsafePointer<Float>
        var rows: Int, cols: Int
    }
    /// A linear layer whose weights stay float16 or int8 (the decoder's per-token layers: fewer bytes to read per step).
    struct HalfLinear {
        var weight: DecoderMatrix
        var bias: UnsafePointer<Float>
        var rows: Int, cols: Int
    }
    struct Norm {
        var gamma: UnsafePointer<Float>
        var beta: UnsafePointer<Float>
    }
    /// An encoder linear layer, Float32 or int8 (``SpeechModel/encoderWeights``).
    struct EncoderLinear {
        var weight: EncoderMatrix
        var bias: UnsafePointer<Float>
        var rows: Int, cols: Int
    }
    struct EncoderLayer {
        var attentionNorm: Norm, qkv: EncoderLinear, output: EncoderLinear
        var ffnNorm: Norm, ffn0: EncoderLinear, ffn1: EncoderLinear
    }
    struct DecoderLayer {
        var selfNorm: Norm, qkv: HalfLinear, selfOutput: HalfLinear
        var crossNorm: Norm, crossQuery: HalfLinear, crossKeyValue: Linear, crossOutput: HalfLinear
        var ffnNorm: Norm, ffn0: HalfLinear, ffn1: HalfLinear
    }

    public let model: SpeechModel
    let d: Int, heads: Int, headSize: Int, frames: Int, context: Int, mels: Int, vocabulary: Int, textContext: Int
    let conv1: Linear, conv2: Linear
    let encoderPositions: UnsafePointer<Float>, encoderNorm: Norm
    let encoderLayers: [EncoderLayer]
    /// The token embedding (float16 or int8), also the output projection.
    let embeddings: DecoderMatrix
    let decoderPositions: UnsafePointer<Float>, decoderNorm: Norm
    let decoderLayers: [DecoderLayer]

    // Encoder scratch.
    private let columns: UnsafeMutablePointer<Float>
    private let stem: UnsafeMutablePointer<Float>
    private let x: UnsafeMutablePointer<Float>
    private let h: UnsafeMutablePointer<Float>
    private let qkv: UnsafeMutablePointer<Float>
    private let attended: UnsafeMutablePointer<Float>
    private let wide: UnsafeMutablePointer<Float>
    private let attentionScratch: UnsafeMutablePointer<Float>
    private let encoded: UnsafeMutablePointer<Float>
    /// The packed int8 GEMM's quantised input rows (`earmark_int8_gemm_packed_scratch_count(4 · d)`; one value with
    /// Float32 encoder weights).
    private let encoderRows: UnsafeMutablePointer<Int16>
    /// The encoder's output for the last window, `encodedPositions × audioState` (valid until the next ``encode(window:frames:)``).
    public var encoderOutput: UnsafeBufferPointer<Float> { UnsafeBufferPointer(start: encoded, count: encodedPositions * d) }
    /// Encoder positions of the last window (`audioContext`, 1500, for a whole window; half the frames encoded).
    public private(set) var encodedPositions: Int

    // Decoder state.
    /// The window's cross-attention keys and values, packed per layer and head for `earmark_attention_scores` and
    /// `earmark_attention_values` (layer l at `l · crossLayerStride`, head h at
    /// `h · earmark_attention_packed_count(encodedPositions, headSize)`): made once per window by ``prepareDecoder()``
    /// and read in place at every step. With int8 decoder weights they are held as binary16 (``crossHalf``: 2 bytes a
    /// value, half the bytes a step reads), otherwise as Float32.
    private let crossKeys: UnsafeMutablePointer<Float>
    private let crossValues: UnsafeMutablePointer<Float>
    private let crossLayerStride: Int
    private let crossHalf: Bool
    /// One layer's keys or values as rows of width d, before they are packed (`audioContext × audioState`), and the
    /// same rounded to binary16 when ``crossHalf``.
    private let crossStaging: UnsafeMutablePointer<Float>
    private let crossStagingHalf: UnsafeMutablePointer<UInt16>
    /// Self-attention key/value caches, one slot per sequence decoded side by side (beam search, sampling
    /// several candidates): slot s, layer l starts at `(s · layers + l) · textContext · d`. The first ``sharedPrefix``
    /// positions are held by slot 0 alone (every slot reads them there).
    private var selfKeys: UnsafeMutablePointer<Float>
    private var selfValues: UnsafeMutablePointer<Float>
    /// Positions that every slot shares (the prompt, after ``sharePrefix()``): slot 0 holds them, and they are also
    /// packed per layer and head for `earmark_attention_scores` and `earmark_attention_values` in ``prefixKeys`` and
    /// ``prefixValues`` (layer l, head h at `(l · heads + h) · earmark_attention_packed_count(textContext, headSize)`),
    /// so that a step of several sequences reads them once for all its rows and a copied slot copies only the rest.
    private(set) var sharedPrefix = 0
    private let prefixKeys: UnsafeMutablePointer<Float>
    private let prefixValues: UnsafeMutablePointer<Float>
    /// Per-row scratch of a step (rows ≤ max(``slots``, ``prefillRows``)).
    private var tx: UnsafeMutablePointer<Float>
    private var th: UnsafeMutablePointer<Float>
    private var tqkv: UnsafeMutablePointer<Float>
    private var ta: UnsafeMutablePointer<Float>
    private var tf: UnsafeMutablePointer<Float>
    private var logitsBuffer: UnsafeMutablePointer<Float>
    /// The int8 GEMM's quantised input rows (`earmark_int8_gemm_scratch_count(rows, 4 · d)`; one value without int8 weights).
    private var quantizedRows: UnsafeMutablePointer<Int16>
    /// Cache slots (and rows a step may run) allocated; 1 until ``reserveSlots(_:)`` asks for more.
    private(set) var slots = 1
    /// Self-attention weights of up to ``crossRows`` decoder queries (`crossRows × textContext`).
    private let stepScores: UnsafeMutablePointer<Float>
    /// Cross-attention weights of up to ``crossRows`` decoder queries at once (`crossRows × audioContext`).
    private let crossScores: UnsafeMutablePointer<Float>
    /// Rows whose cross-attention runs as one GEMM per head (the window's keys and values read once for all of them).
    static let crossRows = 32
    /// Tokens the decoder has read since ``resetDecoder()``.
    public private(set) var position = 0
    /// While ``crossAttentionLogits(tokens:heads:frames:)`` runs: where head (layer·heads + head) of the cross-attention
    /// is copied (−1: not copied), the destination, and how many encoder positions are kept.
    private var captureIndex: [Int] = []
    private var capture: UnsafeMutablePointer<Float>?
    private var captureFrames = 0
    private var captureTokens = 0
    private var allocations: [UnsafeMutablePointer<Float>] = []

    public init(model: SpeechModel) {
        self.model = model
        let a = model.architecture
        d = a.audioState
        heads = a.audioHeads
        headSize = d / heads
        frames = model.frontEnd.chunkFrames
        context = a.audioContext
        mels = a.melBands
        vocabulary = a.vocabularySize
        textContext = a.textContext
        encodedPositions = a.audioContext
        func linear(_ p: String, _ rows: Int, _ cols: Int) -> Linear {
            Linear(weight: model.tensor(p + "/weight"), bias: model.tensor(p + "/bias"), rows: rows, cols: cols)
        }
        func half(_ p: String, _ rows: Int, _ cols: Int) -> HalfLinear {
            HalfLinear(weight: model.decoderTensor(p + "/weight"), bias: model.tensor(p + "/bias"), rows: rows, cols: cols)
        }
        func encoderLinear(_ p: String, _ rows: Int, _ cols: Int) -> EncoderLinear {
            EncoderLinear(weight: model.encoderTensor(p + "/weight"), bias: model.tensor(p + "/bias"), rows: rows, cols: cols)
        }
        func norm(_ p: String) -> Norm { Norm(gamma: model.tensor(p + "/layer_norm/gamma"), beta: model.tensor(p + "/layer_norm/beta")) }
        let d = a.audioState
        conv1 = linear("encoder/conv1", d, mels * 3)
        conv2 = linear("encoder/conv2", d, d * 3)
        encoderPositions = model.tensor("encoder/position_encodings/encodings")
        encoderNorm = norm("encoder")
        encoderLayers = (0..<a.audioLayers).map { i in
            let p = "encoder/layer_\(i)"
            return EncoderLayer(attentionNorm: norm(p + "/self_attention"), qkv: encoderLinear(p + "/self_attention/linear_0", 3 * d, d),
                                output: encoderLinear(p + "/self_attention/linear_1", d, d), ffnNorm: norm(p + "/ffn"),
                                ffn0: encoderLinear(p + "/ffn/linear_0", 4 * d, d), ffn1: encoderLinear(p + "/ffn/linear_1", d, 4 * d))
        }
        embeddings = model.decoderTensor("decoder/embeddings/weight")
        decoderPositions = model.tensor("decoder/position_encodings/encodings")
        decoderNorm = norm("decoder")
        decoderLayers = (0..<a.textLayers).map { i in
            let p = "decoder/layer_\(i)"
            return DecoderLayer(selfNorm: norm(p + "/self_attention"), qkv: half(p + "/self_attention/linear_0", 3 * d, d),
                                selfOutput: half(p + "/self_attention/linear_1", d, d),
                                crossNorm: norm(p + "/attention"), crossQuery: half(p + "/attention/linear_0", d, d),
                                crossKeyValue: linear(p + "/attention/linear_1", 2 * d, d), crossOutput: half(p + "/attention/linear_2", d, d),
                                ffnNorm: norm(p + "/ffn"), ffn0: half(p + "/ffn/linear_0", 4 * d, d), ffn1: half(p + "/ffn/linear_1", d, 4 * d))
        }
        var made: [UnsafeMutablePointer<Float>] = []
        func buffer(_ count: Int) -> UnsafeMutablePointer<Float> {
            let p = UnsafeMutablePointer<Float>.allocate(capacity: max(1, count))
            p.initialize(repeating: 0, count: max(1, count))
            made.append(p)
            return p
        }
        // One arena serves the encoder's scratch and then the cross-attention keys and values: the encoder's
        // intermediate values are dead once its output is in `encoded`. In the encoder, the im2col columns and the
        // self-attention's scratch share the feed-forward buffer and the stem shares the query/key/value buffer.
        let qkvSize = max(3 * context * d, frames * d)
        let wideSize = max(4 * context * d, frames * mels * 3, context * d * 3, earmark_self_attention_scratch_count(context, d / a.audioHeads))
        // Left uninitialised: the encoder and prepareDecoder() write every value they read later, so the arena (31 MB;
        // 37 MB with Float32 keys and values) only becomes resident at the first window (after speech detection has
        // freed its buffers, in `transcribe`).
        let crossLayerStride = a.audioHeads * earmark_attention_packed_count(context, d / a.audioHeads)
        let crossHalf = model.decoderWeights == .int8
        // Floats that hold all layers' keys (or values): binary16 ones take half as many.
        let crossFloats = a.textLayers * crossLayerStride / (crossHalf ? 2 : 1)
        let arenaSize = max(3 * context * d + qkvSize + wideSize, 2 * crossFloats)
        let arena = UnsafeMutablePointer<Float>.allocate(capacity: arenaSize)
        made.append(arena)
        x = arena
        h = arena + context * d
        attended = arena + 2 * context * d
        qkv = arena + 3 * context * d
        wide = qkv + qkvSize
        columns = wide
        attentionScratch = wide
        stem = qkv
        encoded = buffer(context * d)
        crossKeys = arena
        crossValues = arena + crossFloats
        self.crossLayerStride = crossLayerStride
        // Written before it is read, like the arena.
        crossStaging = .allocate(capacity: context * d)
        made.append(crossStaging)
        self.crossHalf = crossHalf
        crossStagingHalf = .allocate(capacity: crossHalf ? context * d : 1)
        stepScores = buffer(WhisperNetwork.crossRows * textContext)
        // Written by sharePrefix() before they are read.
        let prefixCount = a.textLayers * heads * earmark_attention_packed_count(textContext, headSize)
        prefixKeys = .allocate(capacity: prefixCount)
        prefixValues = .allocate(capacity: prefixCount)
        made += [prefixKeys, prefixValues]
        crossScores = buffer(WhisperNetwork.crossRows * context)
        allocations = made
        (selfKeys, selfValues, tx, th, tqkv, ta, tf, logitsBuffer) = WhisperNetwork.rowBuffers(
            slots: 1, layers: a.textLayers, textContext: a.textContext, d: d, vocabulary: a.vocabularySize)
        quantizedRows = WhisperNetwork.quantizedScratch(model: model, rows: max(1, WhisperNetwork.prefillRows), d: d)
        encoderRows = .allocate(capacity: model.encoderWeights == .int8 ? max(1, earmark_int8_gemm_packed_scratch_count(4 * d)) : 1)
        openblas_set_num_threads(1)
    }

    deinit {
        for p in allocations { p.deallocate() }
        for p in [selfKeys, selfValues, tx, th, tqkv, ta, tf, logitsBuffer] { p.deallocate() }
        quantizedRows.deallocate()
        encoderRows.deallocate()
        crossStagingHalf.deallocate()
    }

    private static func quantizedScratch(model: SpeechModel, rows: Int, d: Int) -> UnsafeMutablePointer<Int16> {
        .allocate(capacity: model.decoderWeights == .int8 ? max(1, earmark_int8_gemm_scratch_count(rows, 4 * d)) : 1)
    }

    private static func rowBuffers(slots: Int, layers: Int, textContext: Int, d: Int, vocabulary: Int) -> (
        UnsafeMutablePointer<Float>, UnsafeMutablePointer<Float>, UnsafeMutablePointer<Float>, UnsafeMutablePointer<Float>,
        UnsafeMutablePointer<Float>, UnsafeMutablePointer<Float>, UnsafeMutablePointer<Float>, UnsafeMutablePointer<Float>
    ) {
        func buffer(_ count: Int) -> UnsafeMutablePointer<Float> {
            let p = UnsafeMutablePointer<Float>.allocate(capacity: max(1, count))
            p.initialize(repeating: 0, count: max(1, count))
            return p
        }
        let cache = slots * layers * textContext * d, rows = max(slots, prefillRows)
        // The caches are left uninitialised: a position is written before it is read, and the pages of positions no
        // sequence reaches are never touched, so they cost no memory (a prompt uses a few dozen of the 448).
        return (.allocate(capacity: cache), .allocate(capacity: cache), buffer(rows * d), buffer(rows * d), buffer(rows * 3 * d),
                buffer(rows * d), buffer(rows * 4 * d), buffer(slots * vocabulary))
    }

    /// Makes room for `count` sequences decoded side by side (cache slots and step rows); slots already in use
    /// keep their contents. Allocates only when `count` is more than before.
    func reserveSlots(_ count: Int) {
        guard count > slots else { return }
        let layers = decoderLayers.count
        let fresh = WhisperNetwork.rowBuffers(slots: count, layers: layers, textContext: textContext, d: d, vocabulary: vocabulary)
        // Only the positions read so far are copied (the rest of the old caches may never have been written).
        for block in 0..<(slots * layers) {
            let offset = block * textContext * d
            (fresh.0 + offset).update(from: selfKeys + offset, count: position * d)
            (fresh.1 + offset).update(from: selfValues + offset, count: position * d)
        }
        for p in [selfKeys, selfValues, tx, th, tqkv, ta, tf, logitsBuffer] { p.deallocate() }
        (selfKeys, selfValues, tx, th, tqkv, ta, tf, logitsBuffer) = fresh
        quantizedRows.deallocate()
        quantizedRows = WhisperNetwork.quantizedScratch(model: model, rows: max(count, WhisperNetwork.prefillRows), d: d)
        slots = count
    }

    /// Copies the cached keys and values of the tokens read so far from one slot to another (those after the shared
    /// prefix: the prefix is every slot's already).
    func copySlot(_ source: Int, to destination: Int) {
        precondition(source >= 0 && source < slots && destination >= 0 && destination < slots)
        guard source != destination, position > sharedPrefix else { return }
        let layers = decoderLayers.count, span = textContext * d, first = sharedPrefix * d, count = (position - sharedPrefix) * d
        for l in 0..<layers {
            let from = (source * layers + l) * span + first, to = (destination * layers + l) * span + first
            (selfKeys + to).update(from: selfKeys + from, count: count)
            (selfValues + to).update(from: selfValues + from, count: count)
        }
    }

    /// Makes the tokens read so far (in slot 0) the prefix of every slot: later steps of several sequences read its keys
    /// and values once for all rows, and ``copySlot(_:to:)`` leaves it alone. Any slot may then continue from it.
    func sharePrefix() {
        let layers = decoderLayers.count, hs = headSize, stride = earmark_attention_packed_count(textContext, hs)
        for l in 0..<layers {
            let keys = selfKeys + l * textContext * d, values = selfValues + l * textContext * d
            for head in 0..<heads {
                let offset = (l * heads + head) * stride
                earmark_attention_pack_keys(keys + head * hs, d, position, hs, prefixKeys + offset)
                earmark_attention_pack_values(values + head * hs, d, position, hs, prefixValues + offset)
            }
        }
        sharedPrefix = position
    }

    // MARK: Encoder

    /// Runs the encoder on one window of `chunkFrames × melBands` log-mel values (frame-major); the
    /// result is in ``encoderOutput``. With `frames` (even, at most `chunkFrames`), only the window's first `frames`
    /// frames are read and `frames / 2` positions come out: Whisper's network on a shorter context, which costs
    /// less than the whole window in proportion (attention: in its square) but is not exactly what the whole
    /// window gives.
    public func encode(window mel: UnsafePointer<Float>, frames encodedFrames: Int? = nil) {
        let F = max(2, min(frames, (encodedFrames ?? frames) / 2 * 2)), M = mels, d = self.d
        let context = F / 2
        encodedPositions = context
        // conv1 (kernel 3, padding 1) as one GEMM.
        WhisperNetwork.unfold(mel, frames: F, channels: M, stride: 1, outputFrames: F, into: columns)
        WhisperNetwork.affine(columns, rows: F, conv1, into: stem, accumulate: false)
        WhisperNetwork.gelu(stem, count: F * d)
        // conv2 (kernel 3, stride 2, padding 1).
        WhisperNetwork.unfold(stem, frames: F, channels: d, stride: 2, outputFrames: context, into: columns)
        WhisperNetwork.affine(columns, rows: context, conv2, into: x, accumulate: false)
        WhisperNetwork.gelu(x, count: context * d)
        for i in 0..<(context * d) { x[i] += encoderPositions[i] }

        let T = context, hs = headSize, scale = 1 / Float(hs).squareRoot()
        for layer in encoderLayers {
            WhisperNetwork.layerNorm(x, rows: T, width: d, layer.attentionNorm, into: h)
            encoderAffine(h, rows: T, layer.qkv, into: qkv, accumulate: false)
            // All heads in one call: per head the keys packed once, 48 queries' scores at a time made, normalised and
            // applied while in cache (no T × T score matrix, no repacking, no zero-filling; see earmark_self_attention).
            earmark_self_attention(T, heads, hs, qkv, qkv + d, qkv + 2 * d, 3 * d, scale, attended, d, attentionScratch)
            encoderAffine(attended, rows: T, layer.output, into: x, accumulate: true)
            WhisperNetwork.layerNorm(x, rows: T, width: d, layer.ffnNorm, into: h)
            encoderAffine(h, rows: T, layer.ffn0, into: wide, accumulate: false)
            WhisperNetwork.gelu(wide, count: T * 4 * d)
            encoderAffine(wide, rows: T, layer.ffn1, into: x, accumulate: true)
        }
        WhisperNetwork.layerNorm(x, rows: T, width: d, encoderNorm, into: encoded)
    }

    // MARK: Decoder

    /// Projects ``encoderOutput`` to every layer's cross-attention keys and values, packs them for the attention
    /// kernels (once per window, so no step packs them again) and empties the token cache.
    public func prepareDecoder() {
        let n = encodedPositions, hs = headSize, headStride = earmark_attention_packed_count(n, hs)
        for (l, layer) in decoderLayers.enumerated() {
            let kv = layer.crossKeyValue
            let keys = Linear(weight: kv.weight, bias: kv.bias, rows: d, cols: d)
            let values = Linear(weight: kv.weight + d * d, bias: kv.bias + d, rows: d, cols: d)
            for (projection, packed, isKeys) in [(keys, crossKeys, true), (values, crossValues, false)] {
                WhisperNetwork.affine(encoded, rows: n, projection, into: crossStaging, accumulate: false)
                if crossHalf { earmark_float_to_half(crossStaging, crossStagingHalf, n * d) }
                for head in 0..<heads {
                    let offset = l * crossLayerStride + head * headStride
                    switch (crossHalf, isKeys) {
                    case (true, true): earmark_attention_pack_keys_half(crossStagingHalf + head * hs, d, n, hs, halfPacked(packed, offset))
                    case (true, false): earmark_attention_pack_values_half(crossStagingHalf + head * hs, d, n, hs, halfPacked(packed, offset))
                    case (false, true): earmark_attention_pack_keys(crossStaging + head * hs, d, n, hs, packed + offset)
                    case (false, false): earmark_attention_pack_values(crossStaging + head * hs, d, n, hs, packed + offset)
                    }
                }
            }
        }
        resetDecoder()
    }

    /// Forgets the tokens read so far (the cross-attention keys and values stay).
    public func resetDecoder() {
        position = 0
        sharedPrefix = 0
    }

    /// Forgets the tokens read after the first `count` (their cached keys and values stay valid in every slot that holds
    /// them; rewinding into the shared prefix leaves them in slot 0 only).
    func rewind(to count: Int) {
        precondition(count >= 0 && count <= position)
        position = count
        if count < sharedPrefix { sharedPrefix = 0 }
    }

    /// Reads one token at the next position and returns the logits of the token after it
    /// (`vocabularySize` values, valid until the next call). Precondition: `position < textContext`.
    @discardableResult
    public func step(_ token: Int) -> UnsafeMutablePointer<Float> {
        withUnsafeTemporaryAllocation(of: Int.self, capacity: 2) { b in
            b[0] = token
            b[1] = 0
            return step(tokens: UnsafeBufferPointer(rebasing: b[0..<1]), slots: UnsafeBufferPointer(rebasing: b[1..<2]))
        }
    }

    /// Reads one token for each of several sequences at the same next position, row r's token with the cache of
    /// `slots[r]` (distinct slots below ``slots``), and returns their next tokens' logits, row r at
    /// `r · vocabularySize` (valid until the next call). One row is computed exactly as ``step(_:)`` computes it.
    @discardableResult
    func step(tokens: UnsafeBufferPointer<Int>, slots rowSlots: UnsafeBufferPointer<Int>) -> UnsafeMutablePointer<Float> {
        let rows = tokens.count
        precondition(position < textContext && rows >= 1 && rows <= slots && rowSlots.count == rows)
        precondition(capture == nil || rows == 1)
        forward(rows: rows, token: { tokens[$0] }, slot: { rowSlots[$0] }, position: { _ in self.position }, logits: true)
        position += 1
        return logitsBuffer
    }

    /// Reads several tokens of one sequence (slot 0) at the next positions, ``prefillRows`` at a time, each layer's
    /// weights once per group instead of once per token, and returns the logits after the last token (valid until
    /// the next call). Used for a prompt of earlier text; the result is what as many ``step(_:)`` calls give, up to
    /// the order of the sums. Precondition: `position + tokens.count ≤ textContext`, no slot but 0 in use.
    @discardableResult
    public func prefill(_ tokens: [Int]) -> UnsafeMutablePointer<Float> {
        precondition(!tokens.isEmpty && position + tokens.count <= textContext && capture == nil)
        var start = 0
        while start < tokens.count {
            let rows = min(WhisperNetwork.prefillRows, tokens.count - start), first = position
            let last = start + rows == tokens.count
            forward(rows: rows, token: { tokens[start + $0] }, slot: { _ in 0 }, position: { first + $0 }, logits: last)
            position += rows
            start += rows
        }
        return logitsBuffer
    }

    /// Rows of one prefill group (the step scratch holds at least this many rows).
    static let prefillRows = 32

    /// One decoder pass over `rows` rows: row r reads `token(r)` at `position(r)` with the cache of `slot(r)` (rows
    /// of one slot in increasing positions, each seeing the ones before it). With `logits`, the last row's logits
    /// (or every row's, when the rows are distinct slots at one position) go to ``logitsBuffer``.
    private func forward(rows: Int, token: (Int) -> Int, slot: (Int) -> Int, position: (Int) -> Int, logits: Bool) {
        let d = self.d, scale = 1 / Float(headSize).squareRoot(), layers = decoderLayers.count
        for r in 0..<rows {
            let t = token(r), pos = position(r)
            precondition(t >= 0 && t < vocabulary && slot(r) >= 0 && slot(r) < slots && pos < textContext)
            let pe = decoderPositions + pos * d, x = tx + r * d
            switch embeddings {
            case .half(let e):
                earmark_half_to_float(e + t * d, x, d)
            case .int8(let e, let scales):
                let row = e + t * d, scale = scales[t]
                for i in 0..<d { x[i] = Float(row[i]) * scale }
            }
            for i in 0..<d { x[i] += pe[i] }
        }
        for (l, layer) in decoderLayers.enumerated() {
            // Self-attention over positions 0…p of each row's own cache.
            WhisperNetwork.layerNorm(tx, rows: rows, width: d, layer.selfNorm, into: th)
            halfLinear(th, rows: rows, layer.qkv, into: tqkv, accumulate: false)
            for r in 0..<rows {
                let offset = (slot(r) * layers + l) * textContext * d, p = position(r), q = tqkv + r * 3 * d
                (selfKeys + offset + p * d).update(from: q + d, count: d)
                (selfValues + offset + p * d).update(from: q + 2 * d, count: d)
            }
            attendSelf(rows: rows, layer: l, slot: slot, position: position, scale: scale, into: ta)
            halfLinear(ta, rows: rows, layer.selfOutput, into: tx, accumulate: true)
            // Cross-attention over the window.
            WhisperNetwork.layerNorm(tx, rows: rows, width: d, layer.crossNorm, into: th)
            halfLinear(th, rows: rows, layer.crossQuery, into: tqkv, accumulate: false)
            attendWindow(queries: tqkv, rows: rows, layer: l, scale: scale, into: ta)
            halfLinear(ta, rows: rows, layer.crossOutput, into: tx, accumulate: true)
            // Feed-forward.
            WhisperNetwork.layerNorm(tx, rows: rows, width: d, layer.ffnNorm, into: th)
            halfLinear(th, rows: rows, layer.ffn0, into: tf, accumulate: false)
            WhisperNetwork.gelu(tf, count: rows * 4 * d)
            halfLinear(tf, rows: rows, layer.ffn1, into: tx, accumulate: true)
        }
        // The output projection is the token embedding matrix (not needed while only attention is collected).
        guard capture == nil, logits else { return }
        let sameSlot = rows > 1 && slot(0) == slot(1)
        // A prefill group: only the last position's logits are wanted.
        let logitRows = sameSlot ? 1 : rows
        WhisperNetwork.layerNorm(tx + (rows - logitRows) * d, rows: logitRows, width: d, decoderNorm, into: th)
        product(rows: logitRows, n: vocabulary, k: d, th, embeddings, bias: nil, into: logitsBuffer, accumulate: false)
    }

    /// Reads `tokens` from position 0 (after ``prepareDecoder()``) and returns the cross-attention logits
    /// (scaled query · key, before the softmax) of `heads` over the first `frames` encoder positions, laid out
    /// `[head][token][frame]`. The decoder's token cache is left holding `tokens`.
    public func crossAttentionLogits(tokens: [Int], heads wanted: [(layer: Int, head: Int)], frames: Int) -> [Float] {
        let frames = max(0, min(frames, encodedPositions))
        precondition(tokens.count <= textContext)
        var out = [Float](repeating: 0, count: wanted.count * tokens.count * frames)
        captureIndex = [Int](repeating: -1, count: decoderLayers.count * heads)
        for (i, h) in wanted.enumerated() where (0..<decoderLayers.count).contains(h.layer) && (0..<heads).contains(h.head) {
            captureIndex[h.layer * heads + h.head] = i
        }
        captureFrames = frames
        captureTokens = tokens.count
        out.withUnsafeMutableBufferPointer { buffer in
            capture = buffer.baseAddress
            resetDecoder()
            for t in tokens { step(t) }
            capture = nil
        }
        return out
    }

    /// Self-attention of `rows` queries (in ``tqkv``), row r over positions 0…position(r) of its slot, head by head, up
    /// to ``crossRows`` rows at a time: the shared prefix's packed keys and values are read once for all of them, the
    /// positions after it from each row's own slot.
    private func attendSelf(rows: Int, layer l: Int, slot: (Int) -> Int, position: (Int) -> Int, scale: Float,
                            into out: UnsafeMutablePointer<Float>) {
        let d = self.d, hs = headSize, prefix = sharedPrefix, layers = decoderLayers.count
        let stride = earmark_attention_packed_count(textContext, hs), lds = textContext
        var start = 0
        while start < rows {
            let group = min(WhisperNetwork.crossRows, rows - start)
            for head in 0..<heads {
                let packed = (l * heads + head) * stride
                if prefix > 0 {
                    earmark_attention_scores(group, prefix, hs, tqkv + start * 3 * d + head * hs, 3 * d, prefixKeys + packed, scale,
                                             stepScores, lds)
                }
                for g in 0..<group {
                    let r = start + g, own = position(r) + 1 - prefix
                    precondition(own >= 1, "a row before the end of the shared prefix")
                    let keys = selfKeys + (slot(r) * layers + l) * textContext * d + prefix * d
                    cblas_sgemv(CblasRowMajor, CblasNoTrans, Int32(own), Int32(hs), scale, keys + head * hs, Int32(d),
                                tqkv + r * 3 * d + head * hs, 1, 0, stepScores + g * lds + prefix, 1)
                    WhisperNetwork.softmax(stepScores + g * lds, count: prefix + own)
                }
                if prefix > 0 {
                    earmark_attention_values(group, prefix, hs, stepScores, lds, prefixValues + packed, out + start * d + head * hs, d)
                }
                for g in 0..<group {
                    let r = start + g, own = position(r) + 1 - prefix
                    let values = selfValues + (slot(r) * layers + l) * textContext * d + prefix * d
                    cblas_sgemv(CblasRowMajor, CblasTrans, Int32(own), Int32(hs), 1, values + head * hs, Int32(d),
                                stepScores + g * lds + prefix, 1, prefix > 0 ? 1 : 0, out + r * d + head * hs, 1)
                }
            }
            start += group
        }
    }

    /// Cross-attention of `rows` queries (rows of width d) over the window's packed keys and values of layer `l`, head
    /// by head, up to ``crossRows`` rows at a time (the keys and values are read once for all of them); while
    /// ``crossAttentionLogits(tokens:heads:frames:)`` runs (one row), the logits of the captured heads are copied out.
    private func attendWindow(queries: UnsafePointer<Float>, rows: Int, layer l: Int, scale: Float, into out: UnsafeMutablePointer<Float>) {
        let d = self.d, hs = headSize, n = encodedPositions, headStride = earmark_attention_packed_count(n, hs)
        var start = 0
        while start < rows {
            let group = min(WhisperNetwork.crossRows, rows - start)
            for head in 0..<heads {
                let q = queries + start * d + head * hs, offset = l * crossLayerStride + head * headStride
                if crossHalf {
                    earmark_attention_scores_half(group, n, hs, q, d, halfPacked(crossKeys, offset), scale, crossScores, n)
                } else {
                    earmark_attention_scores(group, n, hs, q, d, crossKeys + offset, scale, crossScores, n)
                }
                if let capture, captureIndex[l * heads + head] >= 0 {
                    let i = captureIndex[l * heads + head]
                    (capture + (i * captureTokens + position) * captureFrames).update(from: crossScores, count: min(captureFrames, n))
                }
                for r in 0..<group { WhisperNetwork.softmax(crossScores + r * n, count: n) }
                if crossHalf {
                    earmark_attention_values_half(group, n, hs, crossScores, n, halfPacked(crossValues, offset), out + start * d + head * hs, d)
                } else {
                    earmark_attention_values(group, n, hs, crossScores, n, crossValues + offset, out + start * d + head * hs, d)
                }
            }
            start += group
        }
    }

    /// Where packed value `offset` of binary16 keys or values starts in `base`'s memory (2 bytes a value; only C code
    /// reads or writes them, so the memory stays bound to Float for Swift).
    private func halfPacked(_ base: UnsafeMutablePointer<Float>, _ offset: Int) -> UnsafeMutableRawPointer {
        UnsafeMutableRawPointer(base) + 2 * offset
    }

    // MARK: Kernels

    /// out[r] (+)= W · input[r] + b for `rows` rows (W is `rows × cols` of the layer, row-major).
    static func affine(_ input: UnsafePointer<Float>, rows: Int, _ layer: Linear, into out: UnsafeMutablePointer<Float>, accumulate: Bool) {
        let n = layer.rows
        for r in 0..<rows {
            let o = out + r * n
            if accumulate {
                for j in 0..<n { o[j] += layer.bias[j] }
            } else {
                o.update(from: layer.bias, count: n)
            }
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Int32(rows), Int32(n), Int32(layer.cols), 1,
                    input, Int32(layer.cols), layer.weight, Int32(layer.cols), 1, out, Int32(n))
    }

    /// affine(_:rows:_:into:accumulate:) for an encoder layer, on its Float32 or packed int8 weights.
    private func encoderAffine(_ input: UnsafePointer<Float>, rows: Int, _ layer: EncoderLinear, into out: UnsafeMutablePointer<Float>,
                               accumulate: Bool) {
        switch layer.weight {
        case .float32(let w):
            WhisperNetwork.affine(input, rows: rows, Linear(weight: w, bias: layer.bias, rows: layer.rows, cols: layer.cols),
                                  into: out, accumulate: accumulate)
        case .int8(let w, let scales):
            earmark_int8_gemm_packed(rows, layer.rows, layer.cols, input, layer.cols, w, scales, layer.bias, out, layer.rows,
                                     accumulate ? 1 : 0, encoderRows)
        }
    }

    /// out[r] (+)= W · input[r] + b for `rows` rows with the layer's float16 or int8 weights (at most
    /// max(``slots``, ``prefillRows``) rows; the kernels are made for few rows, as the decoder's steps have).
    func halfLinear(_ input: UnsafePointer<Float>, rows: Int, _ layer: HalfLinear, into out: UnsafeMutablePointer<Float>,
                    accumulate: Bool) {
        product(rows: rows, n: layer.rows, k: layer.cols, input, layer.weight, bias: layer.bias, into: out, accumulate: accumulate)
    }

    /// out[r · n + j] (+)= Σ_p input[r · k + p] · W[j][p] (+ bias[j]) for a decoder matrix W of n rows of k values.
    private func product(rows: Int, n: Int, k: Int, _ input: UnsafePointer<Float>, _ matrix: DecoderMatrix, bias: UnsafePointer<Float>?,
                         into out: UnsafeMutablePointer<Float>, accumulate: Bool) {
        switch matrix {
        case .half(let w):
            earmark_half_gemm(rows, n, k, input, k, w, k, bias, out, n, accumulate ? 1 : 0)
        case .int8(let w, let scales):
            precondition(rows <= max(slots, WhisperNetwork.prefillRows) && k <= 4 * d)
            earmark_int8_gemm(rows, n, k, input, k, w, k, scales, bias, out, n, accumulate ? 1 : 0, quantizedRows)
        }
    }

    /// Layer normalisation of each row (ε = 10⁻⁵), scaled by γ and shifted by β.
    static func layerNorm(_ input: UnsafePointer<Float>, rows: Int, width: Int, _ norm: Norm, into out: UnsafeMutablePointer<Float>) {
        let inverseWidth = 1 / Float(width)
        for r in 0..<rows {
            let x = input + r * width, y = out + r * width
            var mean: Float = 0
            for i in 0..<width { mean += x[i] }
            mean *= inverseWidth
            var variance: Float = 0
            for i in 0..<width {
                let c = x[i] - mean
                variance += c * c
            }
            let inverse = 1 / (variance * inverseWidth + 1e-5).squareRoot()
            for i in 0..<width { y[i] = (x[i] - mean) * inverse * norm.gamma[i] + norm.beta[i] }
        }
    }

    /// The input of a kernel-3, zero-padded 1-D convolution as GEMM rows:
    /// `columns[t][c·3 + k] = input[stride·t + k − 1][c]`, zero outside the `frames` input frames (frame-major).
    static func unfold(_ input: UnsafePointer<Float>, frames: Int, channels: Int, stride: Int, outputFrames: Int,
                       into columns: UnsafeMutablePointer<Float>) {
        for t in 0..<outputFrames {
            let row = columns + t * channels * 3
            for k in 0..<3 {
                let s = stride * t + k - 1
                if s < 0 || s >= frames {
                    for c in 0..<channels { row[c * 3 + k] = 0 }
                } else {
                    let src = input + s * channels
                    for c in 0..<channels { row[c * 3 + k] = src[c] }
                }
            }
        }
    }

    /// GELU with the error function (not the tanh approximation), in place (8 values at a time with AVX2; see `earmark_gelu`).
    static func gelu(_ x: UnsafeMutablePointer<Float>, count: Int) {
        earmark_gelu(x, count)
    }

    /// Softmax in place (8 values at a time with AVX2; see `earmark_softmax`).
    static func softmax(_ x: UnsafeMutablePointer<Float>, count: Int) {
        earmark_softmax(x, count)
    }
}
