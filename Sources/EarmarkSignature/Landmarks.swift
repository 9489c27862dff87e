/// A hashed pair or triplet of peaks (see ``LandmarkShape``), at the anchor's time.
public struct Landmark: Sendable, Equatable {
    /// Pairs: a 21-bit hash, anchor bin (8 bits) · bin difference + 64 (7 bits) · frame difference (6 bits).
    /// Triplets: 32 bits folded from anchor bin, two bin differences and two frame differences.
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

    /// The hash of an anchor/target pair; `dt` in frames (1…63), bins absolute. Each field keeps its
    /// low bits, also for bins outside the configuration's range (a damaged or crafted signature file).
    @inline(__always)
    public static func hash(anchorBin: Int, targetBin: Int, dt: Int, configuration: SignatureConfiguration) -> UInt32 {
        let a = UInt32(truncatingIfNeeded: anchorBin - configuration.minBin) & 0xFF
        let df = UInt32(truncatingIfNeeded: targetBin - anchorBin + 64) & 0x7F
        return a << 13 | df << 6 | UInt32(dt & 0x3F)
    }

    /// The hash of an anchor and two targets, `t1` before `t2` (or on the same frame, at a lower bin); frame
    /// differences 1…63, bins absolute. The 34 bits of (anchor bin, both bin differences, both frame differences)
    /// are folded into 32 by a multiplicative hash.
    @inline(__always)
    public static func hash(anchorBin: Int, first: (bin: Int, dt: Int), second: (bin: Int, dt: Int),
                            configuration: SignatureConfiguration) -> UInt32 {
        let a = UInt64(truncatingIfNeeded: anchorBin - configuration.minBin) & 0xFF
        let d1 = UInt64(truncatingIfNeeded: first.bin - anchorBin + 64) & 0x7F
        let d2 = UInt64(truncatingIfNeeded: second.bin - anchorBin + 64) & 0x7F
        let raw = a << 26 | d1 << 19 | d2 << 12 | UInt64(first.dt & 0x3F) << 6 | UInt64(second.dt & 0x3F)
        return UInt32(truncatingIfNeeded: (raw &* 0x9E37_79B9_7F4A_7C15) >> 32)
    }

    /// Landmarks of `signature` for `role`, ordered by anchor frame.
    public static func extract(from signature: Signature, role: LandmarkRole,
                               configuration: SignatureConfiguration = .current) -> [Landmark] {
        let (limit, fanout) = switch role {
        case .reference: (configuration.referenceRankLimit, configuration.referenceFanout)
        case .query: (configuration.queryRankLimit, configuration.queryFanout)
        case .deepQuery: (configuration.deepRankLimit, configuration.deepFanout)
        }
        return extract(from: signature, rankLimit: limit, fanout: fanout,
                       suppressRepeats: role == .reference && configuration.repeatSuppressionFrames > 0, configuration: configuration)
    }

    /// Query-side landmarks of `signature`'s peaks of rank below `rankLimit`, each anchor paired with its
    /// `fanout` strongest targets, ordered by anchor frame (the roles' settings are the usual ones).
    public static func extract(from signature: Signature, rankLimit: Int, fanout: Int,
                               configuration: SignatureConfiguration = .current) -> [Landmark] {
        extract(from: signature, rankLimit: rankLimit, fanout: fanout, suppressRepeats: false, configuration: configuration)
    }

    private static func extract(from signature: Signature, rankLimit limit: Int, fanout: Int, suppressRepeats: Bool,
                                configuration: SignatureConfiguration) -> [Landmark] {
        let peaks = signature.peaks.filter { Int($0.rank) < limit }
        var out: [Landmark] = []
        out.reserveCapacity(peaks.count * min(fanout, 8))
        var targets: [(level: Float, index: Int)] = []
        var strongest: [(level: Float, index: Int)] = []
        // Reference side: a hash repeated within `repeatFrames` (a sustained chord) is stored once.
        // Runs of one hash on both sides would otherwise line up at many offsets and fake a match.
        var lastSeen: [UInt32: UInt32] = [:]
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
            if targets.count > fanout { keepStrongest(&targets, fanout, into: &strongest) }
            func emit(_ h: UInt32) {
                if suppressRepeats {
                    // Peaks out of frame order (only in a damaged file) wrap around and are never repeats.
                    if let last = lastSeen[h], a.frame &- last <= UInt32(configuration.repeatSuppressionFrames) { return }
                    lastSeen[h] = a.frame
                }
                out.append(Landmark(hash: h, frame: a.frame))
            }
            switch configuration.landmarkShape {
            case .pairs:
                for t in targets {
                    let b = peaks[t.index]
                    emit(hash(anchorBin: Int(a.bin), targetBin: Int(b.bin), dt: Int(b.frame) - Int(a.frame), configuration: configuration))
                }
            case .triplets:
                // Peaks come in (frame, bin) order, so index order is time order.
                targets.sort { $0.index < $1.index }
                for x in targets.indices {
                    let b = peaks[targets[x].index]
                    for y in targets.indices where y > x {
                        let c = peaks[targets[y].index]
                        emit(hash(anchorBin: Int(a.bin), first: (Int(b.bin), Int(b.frame) - Int(a.frame)),
                                  second: (Int(c.bin), Int(c.frame) - Int(a.frame)), configuration: configuration))
                    }
                }
            }
        }
        return out
    }

    /// Leaves in `targets` (given in index order) its `count` strongest, by level and then index, in that order: what
    /// sorting them all and keeping the first `count` gives, in one pass that keeps only the `count` best so far
    /// (an anchor has a few dozen targets and keeps a few; sorting them all was a tenth of a skew trial's time).
    private static func keepStrongest(_ targets: inout [(level: Float, index: Int)], _ count: Int,
                                      into best: inout [(level: Float, index: Int)]) {
        best.removeAll(keepingCapacity: true)
        guard count > 0 else { return targets.removeAll(keepingCapacity: true) }
        for t in targets {
            // A later target ranks below an earlier one of the same level (indices grow along `targets`).
            if best.count == count {
                guard t.level > best[count - 1].level else { continue }
            } else {
                best.append(t)
            }
            // In place of the weakest (or at the end), then moved up past the weaker ones.
            var at = best.count - 1
            while at > 0, t.level > best[at - 1].level {
                best[at] = best[at - 1]
                at -= 1
            }
            best[at] = t
        }
        swap(&targets, &best)
    }
}
