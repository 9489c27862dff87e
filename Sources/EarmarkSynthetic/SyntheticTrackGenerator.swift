import EarmarkDSP
import EarmarkSignature

/// A track that never existed, made from pieces of real signatures; see ``SyntheticTrackGenerator``.
public struct SyntheticTrack: Sendable, Equatable {
    /// Its number in the generator's sequence (0-based).
    public var index: Int
    /// A unique, readable title: `Synthetic SEED-INDEX`.
    public var title: String
    /// The constellation, ranked as the peak picker ranks; passes ``Signature/validateStructure(configuration:)``.
    public var signature: Signature
    /// How the track was made, in playing order; the stretches fill the track end to end.
    public var stretches: [Stretch]

    /// One piece of a synthetic track: frames of a source signature, shifted in frequency, scaled in time,
    /// maybe reversed, and placed in the track.
    public struct Stretch: Sendable, Equatable {
        /// Index of the source signature in ``SyntheticTrackGenerator/sources``.
        public var source: Int
        /// The source's frames that were cut (frames of ``SignatureConfiguration/frameDuration``, 10 ms).
        public var sourceFrames: Range<Int>
        /// Where the cut starts in the source, in seconds.
        public var sourceStart: Double
        /// Where the cut ends in the source, in seconds.
        public var sourceEnd: Double
        /// Bins added to every peak (|binShift| ≥ 2); peaks shifted out of the band were dropped.
        public var binShift: Int
        /// Track frames per source frame, 0.90…1.10: above 1 the piece plays slower.
        public var timeScale: Double
        /// Whether the piece plays backwards.
        public var reversed: Bool
        /// The track's frames the piece fills.
        public var outputFrames: Range<Int>
        /// Where the piece starts in the track, in seconds.
        public var outputStart: Double

        /// The track frame that source frame `frame` (within ``sourceFrames``) lands on.
        public func outputFrame(ofSourceFrame frame: Int) -> Int {
            var t = frame - sourceFrames.lowerBound
            if reversed { t = sourceFrames.count - 1 - t }
            return outputFrames.lowerBound + Int((Double(t) * timeScale).rounded())
        }
    }
}

/// Makes any number of synthetic tracks out of a few real signatures, to benchmark catalogs far larger than
/// the music at hand.
///
/// Each track is a chain of 8–40 s stretches cut from random sources at random places where they hold sound
/// (no gap of more than 1 s between peaks). Every stretch is shifted by 2–8 bins up or down (levels follow the
/// change of tilt between the old and new bin; peaks leaving the band are dropped), scaled in time by
/// 0.90–1.10 (two peaks landing on one frame and bin: the louder stays) and, one time in four (``reversedShare``),
/// reversed.
/// The whole track is then ranked as ``PeakRanking`` ranks, and peaks of rank ``SignatureConfiguration/deepRankLimit``
/// and above are dropped, so that each rank counts the track's own louder peaks within ±rankRadius frames.
///
/// A track is a pure function of the sources, the seed and its index, computed with a generator of its own
/// (SplitMix64) and IEEE arithmetic only: any track can be made alone, in any order, on any thread, and is
/// bit-identical on every machine.
///
/// ```swift
/// let generator = SyntheticTrackGenerator(sources: signatures, seed: 1)
/// let track = generator.track(41)   // the same track every time
/// ```
public struct SyntheticTrackGenerator: Sendable {
    /// The real signatures stretches are cut from.
    public let sources: [Signature]
    public let seed: UInt64
    public let configuration: SignatureConfiguration
    /// The range track lengths are drawn from uniformly, in seconds (default 2–6 min, 4 min on average).
    public let durations: ClosedRange<Double>
    /// The share of stretches played backwards (default ``reverseProbability``). At 1, no stretch is a copy of
    /// its source's audio that a speed, tempo or pitch change could make: those keep time's direction, while a
    /// reversed constellation's landmarks have nearly the statistics of a forward one's (an anchor, a bin
    /// difference and a frame difference become the target's bin, the negated difference and the same frame
    /// difference).
    public let reversedShare: Double

    /// Seconds of source cut for one stretch (the last stretch of a track too).
    public static let stretchDurations: ClosedRange<Double> = 8...40
    /// Time scale factors.
    public static let timeScales: ClosedRange<Double> = 0.90...1.10
    /// Bin shift magnitudes; the sign is drawn separately.
    public static let binShifts: ClosedRange<Int> = 2...8
    /// Share of stretches played backwards, by default.
    public static let reverseProbability = 0.25
    /// Seconds without a peak that count as silence: stretches never span one.
    public static let silenceGap = 1.0

    /// Frames of sound in one source: no gap between peaks longer than ``silenceGap``.
    private struct Run: Sendable {
        var source: Int
        var frames: Range<Int>
    }
    private let runs: [Run]
    private let longestRun: Int
    private let shortestStretch: Int
    /// Tilt and lowest valid level by bin (indices below minBin unused).
    private let tilt: [Float]
    private let lowestLevel: [Float]

    /// - Parameters:
    ///   - sources: valid signatures of `configuration`'s version (ranked up to deepRankLimit, as generated),
    ///     together holding at least one 8 s stretch of sound.
    ///   - seed: selects the sequence of tracks.
    ///   - durations: track lengths in seconds, at least 8.
    ///   - reversedShare: the share of stretches played backwards, 0…1. The random draws do not depend on it,
    ///     so tracks of two shares differ only in which stretches are reversed.
    public init(sources: [Signature], seed: UInt64, configuration: SignatureConfiguration = .current,
                durations: ClosedRange<Double> = 120...360, reversedShare: Double = reverseProbability) {
        precondition(durations.lowerBound >= SyntheticTrackGenerator.stretchDurations.lowerBound, "tracks of at least 8 s")
        precondition((0...1).contains(reversedShare), "a share of stretches, 0…1")
        for (i, s) in sources.enumerated() {
            precondition(s.configurationVersion == configuration.version, "source \(i) is of algorithm version \(s.configurationVersion)")
            precondition((try? s.validateStructure(configuration: configuration)) != nil, "source \(i) is not a valid signature")
        }
        self.sources = sources
        self.seed = seed
        self.configuration = configuration
        self.durations = durations
        self.reversedShare = reversedShare
        let fd = configuration.frameDuration
        shortestStretch = Int((SyntheticTrackGenerator.stretchDurations.lowerBound / fd).rounded())
        let runs = SyntheticTrackGenerator.runs(in: sources, gap: Int((SyntheticTrackGenerator.silenceGap / fd).rounded()),
                                                shortest: shortestStretch)
        precondition(!runs.isEmpty, "the sources hold no \(Int(SyntheticTrackGenerator.stretchDurations.lowerBound)) s of sound")
        self.runs = runs
        longestRun = runs.map(\.frames.count).max()!
        var tilt = [Float](repeating: 0, count: configuration.maxBin)
        var lowest = tilt
        for b in configuration.minBin..<configuration.maxBin {
            tilt[b] = Float(configuration.tiltDecibels(bin: b))
            lowest[b] = configuration.levelFloor + tilt[b]
        }
        self.tilt = tilt
        lowestLevel = lowest
    }

    /// The runs of at least `shortest` frames in which no two consecutive peaks lie more than `gap` frames apart.
    private static func runs(in sources: [Signature], gap: Int, shortest: Int) -> [Run] {
        var runs: [Run] = []
        for (i, s) in sources.enumerated() where !s.peaks.isEmpty {
            var start = Int(s.peaks[0].frame)
            for k in s.peaks.indices {
                let frame = Int(s.peaks[k].frame)
                let next = k + 1 < s.peaks.count ? Int(s.peaks[k + 1].frame) : Int.max
                if next - frame > gap {
                    if frame + 1 - start >= shortest { runs.append(Run(source: i, frames: start..<(frame + 1))) }
                    start = next
                }
            }
        }
        return runs
    }

    /// Track number `index` (0-based): a pure function of the sources, the seed and `index`.
    public func track(_ index: Int) -> SyntheticTrack {
        var random = SplitMix64(seed: seed, stream: UInt64(bitPattern: Int64(index)))
        let fd = configuration.frameDuration
        let target = Int((random.uniform(in: durations) / fd).rounded())
        var stretches: [SyntheticTrack.Stretch] = []
        var candidates: [Peak] = []
        candidates.reserveCapacity(target * 2)
        var end = 0
        while end < target {
            var length = Int((random.uniform(in: SyntheticTrackGenerator.stretchDurations) / fd).rounded())
            let scale = random.uniform(in: SyntheticTrackGenerator.timeScales)
            let magnitude = SyntheticTrackGenerator.binShifts.lowerBound + random.below(SyntheticTrackGenerator.binShifts.count)
            let shift = random.below(2) == 0 ? magnitude : -magnitude
            let reversed = random.unit() < reversedShare
            // The last stretch ends near the target length, but is no shorter than any other.
            let remaining = Int((Double(target - end) / scale).rounded(.up))
            length = max(shortestStretch, min(length, remaining))
            let (source, start) = place(length: &length, random: &random)
            let outLength = Int((Double(length - 1) * scale).rounded()) + 1
            let stretch = SyntheticTrack.Stretch(
                source: source, sourceFrames: start..<(start + length), sourceStart: Double(start) * fd,
                sourceEnd: Double(start + length) * fd, binShift: shift, timeScale: scale, reversed: reversed,
                outputFrames: end..<(end + outLength), outputStart: Double(end) * fd)
            append(stretch, to: &candidates)
            stretches.append(stretch)
            end += outLength
        }
        let peaks = rank(candidates)
        let signature = Signature(configurationVersion: configuration.version, duration: Double(end) * fd, peaks: peaks)
        return SyntheticTrack(index: index, title: "Synthetic \(seed)-\(index)", signature: signature, stretches: stretches)
    }

    /// Picks a place for a stretch of `length` frames uniformly among all places in all sources where it
    /// fits within a run of sound; `length` shrinks to the longest run when none is long enough.
    private func place(length: inout Int, random: inout SplitMix64) -> (source: Int, start: Int) {
        length = min(length, longestRun)
        var total = 0
        for r in runs where r.frames.count >= length { total += r.frames.count - length + 1 }
        var pick = random.below(total)
        for r in runs where r.frames.count >= length {
            let places = r.frames.count - length + 1
            if pick < places { return (r.source, r.frames.lowerBound + pick) }
            pick -= places
        }
        preconditionFailure("unreachable: pick < total")
    }

    /// Appends the stretch's peaks, transformed and in track frames, to `candidates` (in no particular order).
    private func append(_ stretch: SyntheticTrack.Stretch, to candidates: inout [Peak]) {
        let band = configuration.minBin..<configuration.maxBin
        let peaks = sources[stretch.source].peaks
        let lo = firstIndex(in: peaks, atOrAfter: stretch.sourceFrames.lowerBound)
        let hi = firstIndex(in: peaks, atOrAfter: stretch.sourceFrames.upperBound)
        peaks.withUnsafeBufferPointer { src in
            for i in lo..<hi {
                let p = src[i]
                let from = Int(p.bin), to = from + stretch.binShift
                guard band.contains(to) else { continue }
                let level = min(max(p.level + (tilt[to] - tilt[from]), lowestLevel[to]), 99.99)
                candidates.append(Peak(frame: UInt32(stretch.outputFrame(ofSourceFrame: Int(p.frame))), bin: UInt16(to),
                                       rank: 0, level: level))
            }
        }
    }

    private func firstIndex(in peaks: [Peak], atOrAfter frame: Int) -> Int {
        var lo = 0, hi = peaks.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if Int(peaks[mid].frame) < frame { lo = mid + 1 } else { hi = mid }
        }
        return lo
    }

    /// Orders the candidates as the peak picker emits peaks (by frame, then bin), keeps the louder of two on
    /// one frame and bin and at most as many per frame as a signature may hold, then ranks them.
    private func rank(_ candidates: [Peak]) -> [Peak] {
        let sorted = candidates.sorted {
            $0.frame != $1.frame ? $0.frame < $1.frame : $0.bin != $1.bin ? $0.bin < $1.bin : $0.level > $1.level
        }
        let perFrame = (configuration.maxBin - configuration.minBin) / (configuration.peakBinRadius + 1) + 1
        var kept: [Peak] = []
        kept.reserveCapacity(sorted.count)
        var i = 0
        while i < sorted.count {
            let frame = sorted[i].frame, first = kept.count
            var lastBin: UInt16?
            while i < sorted.count, sorted[i].frame == frame {
                if sorted[i].bin != lastBin { kept.append(sorted[i]) }
                lastBin = sorted[i].bin
                i += 1
            }
            if kept.count - first > perFrame {
                let loudest = kept[first...].sorted { $0.level > $1.level || ($0.level == $1.level && $0.bin < $1.bin) }
                    .prefix(perFrame).sorted { $0.bin < $1.bin }
                kept.replaceSubrange(first..., with: loudest)
            }
        }
        var peaks = PeakRanking.rank(kept, configuration: configuration)
        // Dropping peaks can only lower the ranks of the rest (a second pass drops none), so the ranks become
        // those of the peaks the track holds.
        if peaks.count < kept.count { peaks = PeakRanking.rank(peaks, configuration: configuration) }
        // Ties aside, no window can hold more peaks than a signature allows; should one, its weakest go.
        while let window = overfullWindow(peaks) {
            let weakest = window.min { peaks[$0].level < peaks[$1].level || (peaks[$0].level == peaks[$1].level && $0 > $1) }!
            peaks.remove(at: weakest)
            peaks = PeakRanking.rank(peaks, configuration: configuration)
        }
        return peaks
    }

    /// The peaks of the first stretch of rankRadius + 1 frames holding more than a signature may.
    private func overfullWindow(_ peaks: [Peak]) -> ClosedRange<Int>? {
        let limit = Signature.maximumPeaksPerRankWindow(configuration: configuration)
        var start = 0
        for i in peaks.indices {
            while Int(peaks[start].frame) < Int(peaks[i].frame) - configuration.rankRadius { start += 1 }
            if i - start + 1 > limit { return start...i }
        }
        return nil
    }
}
