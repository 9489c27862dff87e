import Foundation

/// Trains an ``InstrumentHead``: one logistic output per family on the sound model's window embeddings,
/// full-batch Adam on the weighted binary cross-entropy with L2 weight decay (inputs centred and scaled
/// by one overall scale, folded into the weights as in ``HeadTrainer``). Per-family hysteresis thresholds
/// and the smoothing of the curves are chosen on out-of-fold curves: the training pieces are split in two, a
/// head trained on either half scores the other half's mixes, each family gets the onset (and offset as a
/// share of it) with the best frame F there (onset 0.5, offset 0.25 if that F is under 0.2), and the smoothing
/// radius with the best mean F wins; the shipped
/// weights are then trained on all training pieces.
public enum InstrumentHeadTrainer {
    /// One rendered clip (a mix, or one family alone): its windows and, per family (``InstrumentFamily/allCases``
    /// order), whether it sounds in each 1-s frame.
    public struct Clip: Sendable {
        public var piece: Int
        public var isMix: Bool
        public var starts: [Double]
        public var ends: [Double]
        public var embeddings: [[Float]]
        public var frames: [[Bool]]
        public init(piece: Int, isMix: Bool, starts: [Double], ends: [Double], embeddings: [[Float]], frames: [[Bool]]) {
            self.piece = piece
            self.isMix = isMix
            self.starts = starts
            self.ends = ends
            self.embeddings = embeddings
            self.frames = frames
        }

        /// Family truth per window: the frame of the window's middle.
        func windowTruth(_ f: Int) -> [Bool] {
            zip(starts, ends).map { s, e in
                let i = Int((s + e) / 2)
                return frames[f].indices.contains(i) && frames[f][i]
            }
        }
    }

    public struct Options: Sendable {
        public var epochs = 400
        public var learningRate: Float = 0.003
        public var weightDecay: Float = 1e-3
        /// Weight of solo-render windows relative to mix windows.
        public var soloWeight: Float = 0.5
        /// Whether the thresholds are chosen on the solo renders too (at `soloWeight`), so that a family
        /// claimed where only another one plays costs F.
        public var soloThresholds = true
        public init() {}
    }

    public struct Report: Sendable {
        /// Out-of-fold frame F per family with the chosen thresholds, on the training mixes (and solo renders,
        /// with `soloThresholds`); nil: no true frames.
        public var outOfFoldF: [Double?]
        public var trainingWindows: Int
    }

    static let onsetGrid: [Double] = stride(from: 0.05, through: 0.951, by: 0.05).map { $0 } + [0.975, 0.99]
    /// Candidate half-widths (s) of the moving mean over the probabilities.
    static let smoothingRadii: [Double] = [0, 1.5, 3, 5, 8]

    /// Below this out-of-fold F a family keeps onset 0.5 / offset 0.25.
    static let minimumOutOfFoldF = 0.2

    static func middles(_ clip: Clip) -> [Double] { zip(clip.starts, clip.ends).map { ($0 + $1) / 2 } }
    static let offsetShares: [Double] = [0.5, 0.75, 1.0]

    public static func train(_ clips: [Clip], model: String, embeddingSize d: Int, name: String, description: String,
                             options: Options = .init(), log: (String) -> Void = { _ in }) -> (head: InstrumentHead, report: Report) {
        let families = InstrumentFamily.allCases
        let k = families.count
        let pieces = Array(Set(clips.map(\.piece))).sorted()
        // Out-of-fold curves of the mixes.
        var oof: [Int: [[Float]]] = [:]
        for fold in 0..<2 {
            let held = Set(pieces.enumerated().filter { $0.offset % 2 == fold }.map(\.element))
            let fit = fitHead(clips.filter { !held.contains($0.piece) }, d: d, k: k, options: options)
            for (c, clip) in clips.enumerated() where held.contains(clip.piece) && (clip.isMix || options.soloThresholds) {
                oof[c] = apply(fit.w, fit.b, clip.embeddings, d: d, k: k)
            }
            log("fold \(fold + 1)/2 trained")
        }
        // Per smoothing radius, per family: the thresholds with the best out-of-fold frame F; the radius with
        // the best mean F over the families that play in the training mixes.
        let playing = (0..<k).filter { f in clips.contains { $0.isMix && $0.frames[f].contains(true) } }
        var best: (radius: Double, onset: [Double], offset: [Double], f: [Double?])?
        for radius in smoothingRadii {
            var onset = [Double](repeating: 1.01, count: k), offset = [Double](repeating: 1.01, count: k)
            var oofF = [Double?](repeating: nil, count: k)
            var smoothed: [Int: [[Float]]] = [:]
            for (c, curve) in oof { smoothed[c] = InstrumentHead.smooth(curve, middles: middles(clips[c]), radius: radius) }
            for f in playing {
                var top = (f: -1.0, on: 0.5, off: 0.5)
                for on in onsetGrid {
                    for share in offsetShares {
                        var tp = 0.0, fp = 0.0, fn = 0.0
                        for (c, curve) in smoothed {
                            let clip = clips[c]
                            let ranges = hysteresisRanges(zip(zip(clip.starts, clip.ends), curve[f]).map { ($0.0, $0.1, Double($1)) },
                                                          onset: on, offset: on * share, bridge: InstrumentActivity.bridge,
                                                          minimumDuration: InstrumentActivity.minimumDuration)
                            let found = InstrumentActivity.coveredFrames(ranges, count: clip.frames[f].count)
                            let w = clip.isMix ? 1 : Double(options.soloWeight)
                            for (x, t) in zip(found, clip.frames[f]) {
                                if x && t { tp += w } else if x { fp += w } else if t { fn += w }
                            }
                        }
                        let score = tp == 0 ? 0 : 2 * tp / (2 * tp + fp + fn)
                        if score > top.f + 1e-9 { top = (score, on, on * share) }
                    }
                }
                // A family the other half could not learn (too few pieces) gets the probability's midpoint, not
                // thresholds fitted to noise.
                if top.f < minimumOutOfFoldF { top = (top.f, 0.5, 0.25) }
                (onset[f], offset[f], oofF[f]) = (top.on, top.off, top.f)
            }
            let mean = playing.isEmpty ? 0 : playing.map { oofF[$0] ?? 0 }.reduce(0, +) / Double(playing.count)
            log(String(format: "smoothing ±%.1f s: mean out-of-fold frame F %.3f", radius, mean))
            if best == nil || mean > (playing.isEmpty ? 0 : playing.map { best!.f[$0] ?? 0 }.reduce(0, +) / Double(playing.count)) + 1e-9 {
                best = (radius, onset, offset, oofF)
            }
        }
        let chosen = best!
        let fit = fitHead(clips, d: d, k: k, options: options)
        let head = InstrumentHead(name: name, description: description, model: model, embeddingSize: d, families: families,
                                  weights: fit.w, bias: fit.b, onset: chosen.onset, offset: chosen.offset, smoothing: chosen.radius)
        return (head, Report(outOfFoldF: chosen.f, trainingWindows: clips.reduce(0) { $0 + $1.embeddings.count }))
    }

    static func apply(_ w: [Float], _ b: [Float], _ embeddings: [[Float]], d: Int, k: Int) -> [[Float]] {
        InstrumentHead(name: "", description: "", model: "", embeddingSize: d, families: InstrumentFamily.allCases, weights: w, bias: b,
                       onset: [], offset: [], smoothing: 0).probabilities(embeddings)
    }

    /// Weighted logistic regression per family; returns weights for raw embeddings.
    static func fitHead(_ clips: [Clip], d: Int, k: Int, options: Options) -> (w: [Float], b: [Float]) {
        var rows: [[Float]] = [], y: [Float] = [], weight: [Float] = []
        for clip in clips {
            let truth = (0..<k).map { clip.windowTruth($0) }
            for (i, e) in clip.embeddings.enumerated() where e.count == d {
                rows.append(e)
                for f in 0..<k { y.append(truth[f][i] ? 1 : 0) }
                weight.append(clip.isMix ? 1 : options.soloWeight)
            }
        }
        guard !rows.isEmpty else { return ([Float](repeating: 0, count: k * d), [Float](repeating: -10, count: k)) }
        let n = rows.count
        // Positives weighted up (square root of the negative/positive ratio, at most 10) so rare families count.
        let totalWeight = weight.reduce(0, +)
        var posWeight = [Float](repeating: 1, count: k)
        for f in 0..<k {
            var pos: Float = 0
            for i in 0..<n where y[i * k + f] > 0 { pos += weight[i] }
            posWeight[f] = pos > 0 ? min(10, max(1, ((totalWeight - pos) / pos).squareRoot())) : 1
        }
        let fit = HeadTrainer.fitLinear(rows, outputs: k, d: d, epochs: options.epochs, learningRate: options.learningRate,
                                        weightDecay: options.weightDecay) { logits, b in
            // Weighted cross-entropy of a logistic output per family.
            for i in 0..<n {
                for f in 0..<k {
                    let p = 1 / (1 + expf(-(logits[i * k + f] + b[f])))
                    let t = y[i * k + f]
                    logits[i * k + f] = (p - t) * weight[i] * (t > 0 ? posWeight[f] : 1) / totalWeight
                }
            }
        }
        return (fit.weights, fit.bias)
    }
}
