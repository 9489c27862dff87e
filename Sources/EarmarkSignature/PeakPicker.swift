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
    // Ring of tilt-compensated power spectra and their frequency-direction running maxima.
    private var spectra: [[Float]]
    private var freqMax: [[Float]]
    private var frames: [Int]
    private var candidates: [Peak] = []   // stage-2 queue, ordered by frame
    private var firstUnranked = 0
    private(set) var peaks: [Peak] = []

    init(config: SignatureConfiguration) {
        self.config = config
        bandCount = config.maxBin - config.minBin
        let ringSize = 2 * config.peakTimeRadius + 1
        spectra = Array(repeating: [Float](repeating: 0, count: bandCount), count: ringSize)
        freqMax = spectra
        frames = Array(repeating: -1, count: ringSize)
        // +3 dB per octave, so that the usual downward slope of music spectra does not put every peak in the bass.
        let refBin = 1000.0 * Double(config.fftSize) / config.sampleRate
        tilt = (config.minBin..<config.maxBin).map { Float(10 * log10(Double($0) / refBin)) }
        tiltFactor = tilt.map { powf(10, $0 / 10) }
        floorPower = powf(10, config.levelFloor / 10)
    }

    private var lastFrame = -1

    /// Ends the current run of frames (after a gap in the input): the last frames are examined
    /// without their future, then stage-1 history is dropped. Candidates already found are kept.
    func discontinuity() {
        examineTail()
        for i in frames.indices { frames[i] = -1 }
    }

    private func examineTail() {
        guard lastFrame >= 0 else { return }
        for center in max(0, lastFrame - config.peakTimeRadius + 1)...lastFrame
        where frames[center % spectra.count] == center {
            examine(center: center)
        }
        lastFrame = -1
    }

    func push(frame: Int, power: UnsafeBufferPointer<Float>) {
        let ring = spectra.count
        let slot = frame % ring
        frames[slot] = frame
        spectra[slot].withUnsafeMutableBufferPointer { s in
            for k in 0..<bandCount { s[k] = power[k] * tiltFactor[k] }
        }
        let r = config.peakBinRadius
        spectra[slot].withUnsafeBufferPointer { s in
            freqMax[slot].withUnsafeMutableBufferPointer { m in
                for k in 0..<bandCount {
                    var best = s[k]
                    let lo = max(0, k - r), hi = min(bandCount - 1, k + r)
                    for j in lo...hi where s[j] > best { best = s[j] }
                    m[k] = best
                }
            }
        }
        lastFrame = frame
        let radius = config.peakTimeRadius
        let center = frame - radius
        if center >= 0, frames[center % ring] == center { examine(center: center) }
        rank(upTo: frame - radius - config.rankRadius)
    }

    private func examine(center: Int) {
        let ring = spectra.count
        let radius = config.peakTimeRadius
        let cslot = center % ring
        let cs = spectra[cslot]
        let cm = freqMax[cslot]
        for k in 0..<bandCount {
            let v = cs[k]
            guard v == cm[k], v > floorPower * tiltFactor[k] else { continue }
            var isPeak = true
            for dt in -radius...radius where dt != 0 {
                let f = center + dt
                let slot = ((f % ring) + ring) % ring
                guard f >= 0, frames[slot] == f else { continue }
                // Strict on one side so a plateau yields one peak.
                if dt < 0 ? freqMax[slot][k] >= v : freqMax[slot][k] > v { isPeak = false; break }
            }
            if isPeak {
                candidates.append(Peak(frame: UInt32(center), bin: UInt16(k + config.minBin), rank: 0, level: 10 * log10f(v)))
            }
        }
    }

    /// Ranks every candidate whose frame is ≤ `limit` (all its ±rankRadius neighbours are known).
    private func rank(upTo limit: Int) {
        let radius = config.rankRadius
        var lo = 0
        while firstUnranked < candidates.count, Int(candidates[firstUnranked].frame) <= limit {
            let c = candidates[firstUnranked]
            while Int(candidates[lo].frame) < Int(c.frame) - radius { lo += 1 }
            var stronger = 0
            var j = lo
            while j < candidates.count, Int(candidates[j].frame) <= Int(c.frame) + radius {
                if candidates[j].level > c.level { stronger += 1 }
                j += 1
            }
            if stronger < config.queryRankLimit {
                var p = c
                p.rank = UInt16(stronger)
                peaks.append(p)
            }
            firstUnranked += 1
        }
        // Keep only candidates that can still be neighbours of unranked ones.
        let keepFrom = limit - radius
        var drop = 0
        while drop < firstUnranked, Int(candidates[drop].frame) < keepFrom { drop += 1 }
        if drop > 1024 {
            candidates.removeFirst(drop)
            firstUnranked -= drop
        }
    }

    /// Ranks everything still pending (end of input).
    func finish() {
        examineTail()
        rank(upTo: Int.max - config.rankRadius - config.peakTimeRadius - 1)
    }
}
