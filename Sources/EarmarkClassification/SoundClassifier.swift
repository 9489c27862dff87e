import EarmarkAudio
import Foundation

/// How audio is cut into classification windows (as SNClassifySoundRequest's windowDuration and overlapFactor).
public struct ClassificationOptions: Sendable, Equatable {
    /// Seconds per window; at least the model's patch (YAMNet 0.96 s). Longer windows average the
    /// scores of the patches they hold (patches every half patch). Default 0.96.
    public var windowDuration: Double
    /// Fraction of a window shared with the next, 0 ≤ overlap < 1. Default 0.5.
    public var overlapFactor: Double
    /// Labels reported per window, best first. Default 5.
    public var topK: Int

    public init(windowDuration: Double = 0.96, overlapFactor: Double = 0.5, topK: Int = 5) {
        self.windowDuration = windowDuration
        self.overlapFactor = overlapFactor
        self.topK = topK
    }

    /// Throws a clear error for values no window can be made from.
    public func validate(for model: SoundModel) throws {
        let patch = model.frontEnd.patchDuration
        guard windowDuration.isFinite, windowDuration >= patch - 1e-9, windowDuration <= 3600 else {
            throw SoundModelError(.inconsistent, String(format: "window must be between %.2f s (the model's patch) and 3600 s", patch))
        }
        guard overlapFactor.isFinite, overlapFactor >= 0, overlapFactor < 1 else {
            throw SoundModelError(.inconsistent, "overlap must be at least 0 and below 1")
        }
        guard topK >= 1 else { throw SoundModelError(.inconsistent, "top must be at least 1") }
    }
}

/// A label and how confident the model is that it is present.
public struct LabelConfidence: Codable, Sendable, Equatable {
    /// Display name ("Speech").
    public var label: String
    /// Stable identifier (AudioSet id for YAMNet).
    public var identifier: String
    /// 0…1.
    public var confidence: Double
}

/// One classified time window.
public struct SoundWindow: Codable, Sendable, Equatable {
    /// Seconds from the start of the audio.
    public var start: Double
    public var duration: Double
    /// The top labels, best first.
    public var labels: [LabelConfidence]
    /// RMS level in dBFS of the window's audio at the model's rate (a full-scale sine is −3), at least −120.
    public var level: Double = -120
    /// Every label's score, in the model's label order (not encoded; for summaries).
    public var scores: [Float] = []
    /// The window's embedding (mean of its patches'), for training heads; not encoded.
    public var embedding: [Float] = []

    enum CodingKeys: String, CodingKey { case start, duration, labels, level }

    public init(start: Double, duration: Double, labels: [LabelConfidence], level: Double = -120,
                scores: [Float] = [], embedding: [Float] = []) {
        self.start = start
        self.duration = duration
        self.labels = labels
        self.level = level
        self.scores = scores
        self.embedding = embedding
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        start = try c.decode(Double.self, forKey: .start)
        duration = try c.decode(Double.self, forKey: .duration)
        labels = try c.decode([LabelConfidence].self, forKey: .labels)
        level = try c.decodeIfPresent(Double.self, forKey: .level) ?? -120
    }
}

/// Classifies a stream of audio into windows, incrementally (the analogue of SNAudioStreamAnalyzer).
///
/// Takes PCM of any sample rate and channel count, converts it to the model's rate with soxr,
/// computes log-mel frames as they complete, runs the network once per patch (patches shared by
/// overlapping windows are computed once) and returns each window as soon as its audio is in.
public final class SoundClassificationStream {
    public let model: SoundModel
    public let options: ClassificationOptions
    private let network: SoundNetwork
    private let frontEnd: LogMelFrontEnd
    private var resampler: Resampler?
    private var inputRate: Double?
    /// Log-mel frames from `firstFrame` on, flat.
    private var frames: [Float] = []
    private var firstFrame = 0
    private let windowFrames: Int
    private let hopFrames: Int
    private let patchOffsets: [Int]
    private var nextWindow = 0
    private var patchCache: [Int: (scores: [Float], embedding: [Float])] = [:]
    private var samplesIn = 0
    private var codes: [UInt8]
    /// Sum of squares of each hop-long block of real (not padding) samples, from block `firstFrame` on,
    /// and of the block being filled.
    private var blockEnergy: [Double] = []
    private var partialEnergy = 0.0
    private var partialCount = 0

    public init(model: SoundModel, options: ClassificationOptions = .init()) throws {
        try options.validate(for: model)
        self.model = model
        self.options = options
        network = SoundNetwork(model: model)
        frontEnd = LogMelFrontEnd(spec: model.frontEnd)
        let fe = model.frontEnd
        let patch = fe.patchFrames
        windowFrames = max(patch, Int((options.windowDuration / fe.frameDuration).rounded()))
        hopFrames = max(1, Int((Double(windowFrames) * (1 - options.overlapFactor)).rounded()))
        // Patches evenly spread over the window, about half a patch apart, the last ending at its end.
        let span = windowFrames - patch
        let count = span == 0 ? 1 : Int((Double(span) / Double(max(1, patch / 2))).rounded(.up)) + 1
        patchOffsets = (0..<count).map { count == 1 ? 0 : Int((Double(span) * Double($0) / Double(count - 1)).rounded()) }
        codes = [UInt8](repeating: 0, count: patch * fe.melBands)
    }

    /// Seconds of audio appended so far.
    public var duration: Double { Double(samplesIn) / model.frontEnd.sampleRate }

    /// Appends audio; returns the windows it completes.
    public func append(_ buffer: PCMBuffer) throws -> [SoundWindow] {
        guard buffer.sampleRate > 0, buffer.sampleRate.isFinite, buffer.channels >= 1 else {
            throw AudioError(.unsupportedFormat, "bad PCM buffer (\(buffer.sampleRate) Hz, \(buffer.channels) channels)")
        }
        let mono = buffer.mono
        if inputRate != buffer.sampleRate {
            if let r = resampler { feed(r.flush()) }
            inputRate = buffer.sampleRate
            resampler = buffer.sampleRate == model.frontEnd.sampleRate ? nil
                : try Resampler(inputRate: buffer.sampleRate, outputRate: model.frontEnd.sampleRate)
        }
        feed(resampler?.process(mono) ?? mono)
        return windowsReady()
    }

    /// Ends the stream: flushes the converter and returns the remaining windows. A last partial window
    /// (at least half a window of new audio, or any audio when no window was made yet) is padded with silence.
    public func finish() -> [SoundWindow] {
        if let r = resampler { feed(r.flush()) }
        var out = windowsReady()
        let fe = model.frontEnd
        let framesAvailable = max(0, (samplesIn - fe.fftLength) / fe.hopLength + 1)
        let covered = nextWindow == 0 ? 0 : (nextWindow - 1) * hopFrames + windowFrames
        if samplesIn > 0, nextWindow == 0 || framesAvailable - covered >= windowFrames / 2 {
            // Pad with silence until one more window is complete; it is reported with its true length.
            let start = nextWindow * hopFrames
            let needed = (start + windowFrames - 1) * fe.hopLength + fe.fftLength - samplesIn
            let realEnd = Double(samplesIn) / fe.sampleRate
            if needed > 0 { feedPadding(needed) }
            out += windowsReady()
            if var last = out.last { last.duration = max(0, min(last.duration, realEnd - last.start)); out[out.count - 1] = last }
        }
        return out
    }

    private func feed(_ samples: [Float]) {
        samplesIn += samples.count
        let hop = model.frontEnd.hopLength
        for x in samples {
            partialEnergy += Double(x) * Double(x)
            partialCount += 1
            if partialCount == hop {
                blockEnergy.append(partialEnergy)
                partialEnergy = 0
                partialCount = 0
            }
        }
        frames += frontEnd.append(samples)
    }

    /// RMS level in dBFS of the real samples in frames [start, start + count): the hop blocks they begin in.
    private func level(startFrame start: Int, frames count: Int) -> Double {
        let from = start - firstFrame
        var sum = 0.0, n = 0
        let blocks = min(blockEnergy.count, from + count)
        if from < blocks {
            for b in from..<blocks { sum += blockEnergy[b] }
            n = (blocks - from) * model.frontEnd.hopLength
        }
        if blockEnergy.count < from + count, partialCount > 0 {
            sum += partialEnergy
            n += partialCount
        }
        guard n > 0, sum > 0 else { return -120 }
        return max(-120, 10 * log10(sum / Double(n)))
    }

    private func feedPadding(_ count: Int) {
        frames += frontEnd.append([Float](repeating: 0, count: count))
    }

    private func windowsReady() -> [SoundWindow] {
        let bands = model.frontEnd.melBands
        let available = firstFrame + frames.count / bands
        var ready: [Int] = []
        while (nextWindow + ready.count) * hopFrames + windowFrames <= available { ready.append(nextWindow + ready.count) }
        guard !ready.isEmpty else { return [] }
        var needed: [Int] = []
        var seen = Set<Int>()
        for w in ready {
            for offset in patchOffsets where patchCache[w * hopFrames + offset] == nil && seen.insert(w * hopFrames + offset).inserted {
                needed.append(w * hopFrames + offset)
            }
        }
        computePatches(needed)
        let fd = model.frontEnd.frameDuration
        var out: [SoundWindow] = []
        for w in ready {
            let start = w * hopFrames
            var scores = [Float](repeating: 0, count: model.labels.count)
            var embedding = [Float](repeating: 0, count: model.embeddingSize)
            for offset in patchOffsets {
                let p = patchCache[start + offset]!
                for i in scores.indices { scores[i] += p.scores[i] }
                for i in embedding.indices { embedding[i] += p.embedding[i] }
            }
            let n = Float(patchOffsets.count)
            for i in scores.indices { scores[i] /= n }
            for i in embedding.indices { embedding[i] /= n }
            let top = scores.indices.sorted { scores[$0] > scores[$1] || (scores[$0] == scores[$1] && $0 < $1) }.prefix(options.topK)
            out.append(SoundWindow(start: Double(start) * fd, duration: Double(windowFrames) * fd,
                                   labels: top.map { LabelConfidence(label: model.labels[$0].name, identifier: model.labels[$0].mid,
                                                                     confidence: Double(scores[$0])) },
                                   level: level(startFrame: start, frames: windowFrames),
                                   scores: scores, embedding: embedding))
        }
        nextWindow += ready.count
        // Frames and patches before the next window are no longer needed.
        let keepFrom = nextWindow * hopFrames
        if keepFrom > firstFrame {
            let drop = min(keepFrom - firstFrame, frames.count / bands)
            frames.removeFirst(drop * bands)
            blockEnergy.removeFirst(min(drop, blockEnergy.count))
            firstFrame += drop
        }
        patchCache = patchCache.filter { $0.key >= keepFrom }
        return out
    }

    /// Runs the network on the patches starting at `starts`, in batches.
    private func computePatches(_ starts: [Int]) {
        let bands = model.frontEnd.melBands
        let size = model.frontEnd.patchFrames * bands
        var i = 0
        while i < starts.count {
            let batch = Array(starts[i..<min(starts.count, i + network.maximumBatch)])
            if codes.count < batch.count * size { codes = [UInt8](repeating: 0, count: network.maximumBatch * size) }
            frames.withUnsafeBufferPointer { f in
                codes.withUnsafeMutableBufferPointer { c in
                    for (b, frame) in batch.enumerated() {
                        let from = (frame - firstFrame) * bands
                        network.quantize(UnsafeBufferPointer(rebasing: f[from..<(from + size)]),
                                         into: UnsafeMutableBufferPointer(rebasing: c[(b * size)..<((b + 1) * size)]))
                    }
                }
            }
            let results = codes.withUnsafeBufferPointer {
                network.run(batch: UnsafeBufferPointer(rebasing: $0[0..<(batch.count * size)]), count: batch.count)
            }
            for (b, frame) in batch.enumerated() {
                patchCache[frame] = (network.scores(logits: results[b].logits), results[b].embedding)
            }
            i += batch.count
        }
    }
}

/// Classifies files with one loaded model.
public final class SoundClassifier {
    public let model: SoundModel

    public init(model: SoundModel) {
        self.model = model
    }

    /// Loads the model at `path`.
    public convenience init(modelPath: String) throws {
        self.init(model: try SoundModel(path: modelPath))
    }

    /// Classifies a whole file (any format the audio reader takes, any rate and channel count).
    /// `progress` gets the seconds decoded so far.
    public func classify(path: String, options: ClassificationOptions = .init(),
                         progress: ((Double) -> Void)? = nil) throws -> [SoundWindow] {
        let reader = try MultichannelFileReader(path: path)
        let stream = try SoundClassificationStream(model: model, options: options)
        var windows: [SoundWindow] = []
        var seconds = 0.0
        while let buffer = try reader.next() {
            windows += try stream.append(buffer)
            seconds += buffer.duration
            progress?(seconds)
        }
        windows += stream.finish()
        return windows
    }
}
