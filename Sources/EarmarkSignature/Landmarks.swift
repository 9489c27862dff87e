/// A hashed pair of peaks: anchor frequency, frequency difference and time difference, at the anchor's time.
public struct Landmark: Sendable, Equatable {
    /// 21-bit hash: anchor bin (8 bits) · bin difference + 64 (7 bits) · frame difference (6 bits).
    public var hash: UInt32
    /// Frame of the anchor peak.
    public var frame: UInt32

    public init(hash: UInt32, frame: UInt32) {
        self.hash = hash
        self.frame = frame
    }
}

/// Which side of a lookup landmarks are made for.
public enum LandmarkRole: Sendable {
    /// Catalog side: the most salient peaks, few pairs each (small index).
    case reference
    /// Query side: a denser superset of peaks paired with every target in the zone, so that each
    /// reference pair of the same audio is also made here, even when noise hides some peaks.
    case query
    /// Query side, deeper still (``SignatureConfiguration/deepRankLimit``): for clips where louder
    /// sound (speech) outranks the music's peaks.
    case deepQuery
}

/// Pairs a signature's peaks into landmark hashes.
public enum Landmarks {
    /// Bits in a landmark hash.
    public static let hashBits = 21
    /// Names the hash layout; a catalog's index records it and refuses another.
    public static let keyDesign = "pairs21"

    /// The hash of an anchor/target pair; `dt` in frames (1…63), bins absolute. Each field keeps its
    /// low bits, also for bins outside the configuration's range (a damaged or crafted signature file).
    @inline(__always)
    public static func hash(anchorBin: Int, targetBin: Int, dt: Int, configuration: SignatureConfiguration) -> UInt32 {
        let a = UInt32(truncatingIfNeeded: anchorBin - configuration.minBin) & 0xFF
        let df = UInt32(truncatingIfNeeded: targetBin - anchorBin + 64) & 0x7F
        return a << 13 | df << 6 | UInt32(dt & 0x3F)
    }

    /// Landmarks of `signature` for `role`, ordered by anchor frame.
    public static func extract(from signature: Signature, role: LandmarkRole,
                               configuration: SignatureConfiguration = .current) -> [Landmark] {
        let (limit, fanout) = switch role {
        case .reference: (configuration.referenceRankLimit, configuration.referenceFanout)
        case .query: (configuration.queryRankLimit, configuration.queryFanout)
        case .deepQuery: (configuration.deepRankLimit, configuration.deepFanout)
        }
        let peaks = signature.peaks.filter { Int($0.rank) < limit }
        var out: [Landmark] = []
        out.reserveCapacity(peaks.count * min(fanout, 8))
        var targets: [(level: Float, index: Int)] = []
        // Reference side: a hash repeated within `repeatFrames` (a sustained chord) is stored once.
        // Runs of one hash on both sides would otherwise line up at many offsets and fake a match.
        var lastSeen: [UInt32: UInt32] = [:]
        let suppressRepeats = role == .reference && configuration.repeatSuppressionFrames > 0
        for i in peaks.indices {
            let a = peaks[i]
            targets.removeAll(keepingCapacity: true)
            var j = i + 1
            while j < peaks.count {
                let b = peaks[j]
                let dt = Int(b.frame) - Int(a.frame)
                if dt > configuration.maxPairFrames { break }
                if dt >= 1, abs(Int(b.bin) - Int(a.bin)) <= configuration.maxPairBins {
                    targets.append((b.level, j))
                }
                j += 1
            }
            if targets.count > fanout {
                targets.sort { $0.level > $1.level || ($0.level == $1.level && $0.index < $1.index) }
                targets.removeLast(targets.count - fanout)
            }
            for t in targets {
                let b = peaks[t.index]
                let h = hash(anchorBin: Int(a.bin), targetBin: Int(b.bin), dt: Int(b.frame) - Int(a.frame),
                             configuration: configuration)
                if suppressRepeats {
                    // Peaks out of frame order (only in a damaged file) wrap around and are never repeats.
                    if let last = lastSeen[h], a.frame &- last <= UInt32(configuration.repeatSuppressionFrames) { continue }
                    lastSeen[h] = a.frame
                }
                out.append(Landmark(hash: h, frame: a.frame))
            }
        }
        return out
    }
}
