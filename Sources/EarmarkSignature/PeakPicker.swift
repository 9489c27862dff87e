import Foundation

/// One spectral peak of a constellation.
public struct Peak: Sendable, Equatable {
    /// STFT frame index (time = frame × hop / sampleRate).
    public var frame: UInt32
    /// FFT bin index (frequency = bin × sampleRate / fftSize).
    public var bin: UInt16
    /// Number of stronger peaks within ±rankRadius frames; smaller is more salient.
    public var rank: UInt16
    /// Tilt-compensated level in dB; orders peaks by strength.
    public var level: Float

    public init(frame: UInt32, bin: UInt16, rank: UInt16, level: Float) {
        self.frame = frame
        self.bin = bin
        self.rank = rank
        self.level = level
    }
}

/// Finds peaks in a stream of power spectra with bounded delay and memory.
///
/// Stage 1 keeps the last 2·peakTimeRadius+1 spectra and emits local maxima of the
/// time-frequency neighbourhood. Stage 2 ranks each candidate against the candidates within
/// ±rankRadius frames and keeps those ranked below the query limit. Ranking in a sliding window
/// (not fixed blocks) makes the choice independent of where a clip starts.
final class PeakPicker {
    private let config: SignatureConfiguration
    private let bandCount: Int
    private let tilt: [Float]
    /// `tilt` as power factors, and the level floor as power: peaks are found in the linear domain
    /// (max and order do not change under log), and only the kept ones get a level in dB.
    private let tiltFactor: [Float]
    private let floorPower: Float
    // Ring of tilt-compensated power spectra and their frequency-direction running maxima,
    // `ringSize` rows of `bandCount` values each, flat.
    private let ringSize: Int
    private var spectra: [Float]
    private var freqMax: [Float]
    private var frames: [Int]
    private var candidates: [Peak] = []   // stage-2 queue, ordered by frame
    /// The candidates' levels, apart, for the ranking's vector comparisons.
    private var levels: [Float] = []
    private var firstUnranked = 0
    /// The ranking window of the last candidate ranked.
    private var window = PeakRanking.Window()
    private(set) var peaks: [Peak] = []
    /// Every peak at or before this frame has been emitted to `peaks` (−1: none yet).
    private(set) var settledFrame = -1

    init(config: SignatureConfiguration) {
        self.config = config
        bandCount = config.maxBin - config.minBin
        ringSize = 2 * config.peakTimeRadius + 1
        spectra = [Float](repeating: 0, count: ringSize * bandCount)
        freqMax = spectra
        frames = Array(repeating: -1, count: ringSize)
        tilt = (config.minBin..<config.maxBin).map { Float(config.tiltDecibels(bin: $0)) }
        tiltFactor = tilt.map { powf(10, $0 / 10) }
        floorPower = powf(10, config.levelFloor / 10)
    }

    private var lastFrame = -1
    private var highestFrame = -1

    /// Ends the current run of frames (after a gap in the input): the last frames are examined
    /// without their future, then stage-1 history is dropped. Candidates already found are kept.
    func discontinuity() {
        examineTail()
        for i in frames.indices { frames[i] = -1 }
    }

    private func examineTail() {
        guard lastFrame >= 0 else { return }
        for center in max(0, lastFrame - config.peakTimeRadius + 1)...lastFrame
        where frames[center % ringSize] == center {
            examine(center: center)
        }
        lastFrame = -1
    }

    func push(frame: Int, power: UnsafeBufferPointer<Float>) {
        let slot = frame % ringSize
        frames[slot] = frame
        let band = bandCount, r = config.peakBinRadius
        let row = slot * band
        spectra.withUnsafeMutableBufferPointer { sp in
            freqMax.withUnsafeMutableBufferPointer { mp in
                tiltFactor.withUnsafeBufferPointer { t in
                    let s = sp.baseAddress! + row, m = mp.baseAddress! + row
                    for k in 0..<band { s[k] = power[k] * t[k] }
                    // Eight bins at a time where all their neighbours are in the band: each lane makes the
                    // same comparisons in the same order as the scalar loop (NaNs included).
                    var k = 0
                    while k < band {
                        if k >= r && k + 7 + r < band {
                            let raw = UnsafeRawPointer(s)
                            var best = raw.loadUnaligned(fromByteOffset: k * MemoryLayout<Float>.stride, as: SIMD8<Float>.self)
                            for j in (k - r)...(k + r) {
                                let v = raw.loadUnaligned(fromByteOffset: j * MemoryLayout<Float>.stride, as: SIMD8<Float>.self)
                                best.replace(with: v, where: v .> best)
                            }
                            UnsafeMutableRawPointer(m).storeBytes(of: best, toByteOffset: k * MemoryLayout<Float>.stride, as: SIMD8<Float>.self)
                            k += 8
                        } else {
                            var best = s[k]
                            for j in max(0, k - r)...min(band - 1, k + r) where s[j] > best { best = s[j] }
                            m[k] = best
                            k += 1
                        }
                    }
                }
            }
        }
        lastFrame = frame
        highestFrame = max(highestFrame, frame)
        let radius = config.peakTimeRadius
        let center = frame - radius
        if center >= 0, frames[center % ringSize] == center { examine(center: center) }
        rank(upTo: frame - radius - config.rankRadius)
    }

    /// Removes and returns the peaks emitted so far (streaming use keeps memory bounded).
    func takePeaks() -> [Peak] {
        defer { peaks.removeAll(keepingCapacity: true) }
        return peaks
    }

    private func examine(center: Int) {
        let radius = config.peakTimeRadius
        let band = bandCount
        // Rows of the neighbouring frames present in the ring (−1: missing, at a gap or the start).
        var rows = [Int](repeating: -1, count: 2 * radius + 1)
        for dt in -radius...radius {
            let f = center + dt
            let slot = ((f % ringSize) + ringSize) % ringSize
            if f >= 0, frames[slot] == f { rows[dt + radius] = slot * band }
        }
        let crow = rows[radius]
        let floor = floorPower
        let minBin = config.minBin
        spectra.withUnsafeBufferPointer { sp in
            freqMax.withUnsafeBufferPointer { mp in
                tiltFactor.withUnsafeBufferPointer { t in
                    for k in 0..<band {
                        let v = sp[crow + k]
                        guard v == mp[crow + k], v > floor * t[k] else { continue }
                        var isPeak = true
                        for i in 0..<rows.count where i != radius && rows[i] >= 0 {
                            let other = mp[rows[i] + k]
                            // Strict on one side so a plateau yields one peak.
                            if i < radius ? other >= v : other > v { isPeak = false; break }
                        }
                        if isPeak {
                            let level = 10 * log10f(v)
                            candidates.append(Peak(frame: UInt32(center), bin: UInt16(k + minBin), rank: 0, level: level))
                            levels.append(level)
                        }
                    }
                }
            }
        }
    }

    /// Ranks every candidate whose frame is ≤ `limit` (all its ±rankRadius neighbours are known).
    private func rank(upTo limit: Int) {
        let radius = config.rankRadius
        let cap = config.deepRankLimit
        candidates.withUnsafeBufferPointer { c in
            levels.withUnsafeBufferPointer { l in
                while firstUnranked < c.count, Int(c[firstUnranked].frame) <= limit {
                    // Only ranks below the cap are kept, so counting stops there.
                    let stronger = PeakRanking.strongerCount(than: c[firstUnranked].level, levels: l.baseAddress!,
                                                             window: window.move(to: firstUnranked, in: c, radius: radius), cap: cap)
                    if stronger < cap {
                        var p = c[firstUnranked]
                        p.rank = UInt16(stronger)
                        peaks.append(p)
                    }
                    firstUnranked += 1
                }
            }
        }
        settledFrame = max(settledFrame, min(limit, highestFrame))
        // Candidates before the last window can no longer be in the window of one still to rank.
        if window.start > 1024 {
            let drop = window.start
            candidates.removeFirst(drop)
            levels.removeFirst(drop)
            firstUnranked -= drop
            window.dropFirst(drop)
        }
    }

    /// Ranks everything still pending (end of input).
    func finish() {
        examineTail()
        rank(upTo: Int.max - config.rankRadius - config.peakTimeRadius - 1)
    }
}
