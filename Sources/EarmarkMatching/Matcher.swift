import EarmarkCatalog
import EarmarkSignature
import Foundation

/// How matches are decided.
public struct MatchOptions: Sendable, Equatable {
    /// A match needs at least this many time-aligned landmark hits. Default 6.
    public var minimumHits: Int
    /// … and this significance: −log₁₀ of the expected number of random (track, offset) cells in the
    /// whole search that would reach its hit count by chance. Default 1.5 (calibrated on negative clips,
    /// see README).
    public var minimumSignificance: Double
    /// At most this many matches are returned. Default 5.
    public var maximumMatches: Int

    public static let `default` = MatchOptions(minimumHits: 6, minimumSignificance: 1.5, maximumMatches: 5)

    public init(minimumHits: Int, minimumSignificance: Double, maximumMatches: Int) {
        self.minimumHits = minimumHits
        self.minimumSignificance = minimumSignificance
        self.maximumMatches = maximumMatches
    }
}

/// One identified track in a query.
public struct Match: Sendable, Codable, Equatable {
    public var track: Track
    /// Seconds into the reference track where the query starts (may be negative when the query starts before it).
    public var matchOffset: Double
    /// 0…1: how sure the matcher is that this is not a coincidence.
    public var confidence: Double
    /// Time-aligned landmark hits (the raw score).
    public var score: Int
    /// −log₁₀ of the expected number of chance cells this strong (see ``MatchOptions``).
    public var significance: Double
    /// Raw score of the best other track (0 when none).
    public var runnerUpScore: Int
    /// Seconds of the query covered by aligned hits.
    public var queryStart: Double
    public var queryEnd: Double
    /// The same stretch in the reference track, in seconds.
    public var referenceStart: Double
    public var referenceEnd: Double
}

/// The outcome of one query.
public struct MatchResult: Sendable, Codable, Equatable {
    /// Ranked best first; empty means no match.
    public var matches: [Match]
    /// Seconds of query audio.
    public var queryDuration: Double
    /// Query landmarks looked up.
    public var queryLandmarks: Int
    /// Postings that shared a hash with the query.
    public var candidateHits: Int
}

/// Scores a query signature against a catalog: candidate tracks from shared hashes, then
/// time consistency (a histogram of reference − query frame offsets per track).
///
/// The best offset cell of each track is judged against chance: with `n` hits spread over the
/// track's `span` possible offsets, a 3-frame cell expects `λ = 3n/span` random hits; the Poisson
/// tail P(X ≥ k) times the number of cells searched is the expected number of equally strong
/// chance cells, and its −log₁₀ is the match's significance.
public final class Matcher {
    public let catalog: Catalog
    public var options: MatchOptions
    public let configuration: SignatureConfiguration

    public init(catalog: Catalog, options: MatchOptions = .default) {
        self.catalog = catalog
        self.options = options
        configuration = catalog.configuration
    }

    public func match(_ signature: Signature) throws -> MatchResult {
        try signature.validateForMatching(configuration: configuration)
        let landmarks = Landmarks.extract(from: signature, role: .query, configuration: configuration)
        var byHash: [UInt32: [UInt32]] = [:]
        byHash.reserveCapacity(landmarks.count)
        for l in landmarks { byHash[l.hash, default: []].append(l.frame) }

        var hits: [Hit] = []
        hits.reserveCapacity(landmarks.count * 4)
        try catalog.lookup(hashes: Set(byHash.keys)) { hash, track, rframe in
            guard let frames = byHash[hash] else { return }
            for q in frames {
                hits.append(Hit(key: Hit.key(track: track, offset: Int32(Int64(rframe) - Int64(q))), qframe: q, hash: hash))
            }
        }
        hits.sort { $0.key < $1.key || ($0.key == $1.key && $0.hash < $1.hash) }

        let fd = configuration.frameDuration
        let queryFrames = max(1.0, signature.duration / fd)
        var perTrack: [TrackScore] = []
        var i = 0
        var totalCells = 0.0
        while i < hits.count {
            let track = hits[i].track
            var j = i
            while j < hits.count, hits[j].track == track { j += 1 }
            let s = bestCell(hits[i..<j])
            perTrack.append(TrackScore(track: track, range: i..<j, offset: s.offset, hits: s.hits))
            i = j
        }
        // Spans need durations; fetch only tracks that could matter.
        perTrack.sort { $0.hits > $1.hits }
        let considered = perTrack.prefix(max(20, options.maximumMatches * 4))
        let tracks = try catalog.tracks(ids: considered.map(\.track))
        for t in perTrack {
            let duration = tracks[t.track]?.duration ?? 180
            totalCells += duration / fd + queryFrames
        }
        var matches: [Match] = []
        for (rank, t) in considered.enumerated() {
            guard let track = tracks[t.track] else { continue }
            let span = track.duration / fd + queryFrames
            let n = t.range.count
            let lambda = max(1e-3, 3 * Double(n - t.hits) / span)
            let significance = -(Matcher.log10PoissonTail(k: t.hits, lambda: lambda) + log10(max(1, totalCells / 3)))
            let runnerUp = rank == 0 ? (considered.count > 1 ? considered[considered.startIndex + 1].hits : 0)
                                     : considered[considered.startIndex].hits
            guard t.hits >= options.minimumHits, significance >= options.minimumSignificance else { continue }
            // Inliers refine the offset and give the covered ranges.
            var sum = 0.0, count = 0.0
            var qmin = UInt32.max, qmax: UInt32 = 0
            for h in hits[t.range] where abs(Int(h.offset) - t.offset) <= 1 {
                sum += Double(h.offset)
                count += 1
                qmin = min(qmin, h.qframe)
                qmax = max(qmax, h.qframe)
            }
            let offset = sum / count * fd
            let qs = Double(qmin) * fd, qe = min(signature.duration, Double(qmax) * fd + Double(configuration.maxPairFrames) * fd)
            matches.append(Match(track: track, matchOffset: offset,
                                 confidence: Matcher.confidence(significance: significance),
                                 score: t.hits, significance: significance, runnerUpScore: runnerUp,
                                 queryStart: qs, queryEnd: qe, referenceStart: offset + qs, referenceEnd: offset + qe))
            if matches.count >= options.maximumMatches { break }
        }
        return MatchResult(matches: matches, queryDuration: signature.duration, queryLandmarks: landmarks.count,
                           candidateHits: hits.count)
    }

    /// Maps significance to 0…1: 0.5 at the decision threshold, 0.99 about 3 decades above it.
    static func confidence(significance: Double) -> Double {
        let x = (significance - MatchOptions.default.minimumSignificance) / 0.65
        return 1 / (1 + exp(-x))
    }

    /// The 3-frame offset cell with the most distinct hashes among one track's hits (sorted by offset,
    /// then hash). Counting distinct hashes, not hits, keeps a repeated hash from inflating a cell.
    private func bestCell(_ hits: ArraySlice<Hit>) -> (offset: Int, hits: Int) {
        // Distinct (offset, hash) runs first.
        var offsets: [Int32] = []
        var counts: [Int] = []
        var i = hits.startIndex
        while i < hits.endIndex {
            let o = hits[i].offset
            var distinct = 0
            var lastHash = UInt32.max
            while i < hits.endIndex, hits[i].offset == o {
                if hits[i].hash != lastHash { distinct += 1; lastHash = hits[i].hash }
                i += 1
            }
            offsets.append(o)
            counts.append(distinct)
        }
        var best = (offset: 0, hits: 0)
        var lo = 0
        var sum = 0
        for hi in offsets.indices {
            sum += counts[hi]
            while offsets[lo] < offsets[hi] - 2 { sum -= counts[lo]; lo += 1 }
            if sum > best.hits {
                // Centre the cell on its heaviest offset.
                var centre = lo
                for k in lo...hi where counts[k] > counts[centre] { centre = k }
                best = (Int(offsets[centre]), sum)
            }
        }
        return best
    }

    /// log₁₀ P(X ≥ k) for X ~ Poisson(λ), accurate in the far tail.
    static func log10PoissonTail(k: Int, lambda: Double) -> Double {
        if k <= 0 { return 0 }
        if Double(k) <= lambda { return log10(0.5) }
        // log pmf(k) + log of the geometric bound on the tail sum.
        let logPmf = Double(k) * log(lambda) - lambda - lgamma(Double(k) + 1)
        let ratio = lambda / Double(k + 1)
        return (logPmf - log(1 - ratio)) / log(10.0)
    }
}

struct Hit {
    var key: UInt64
    var qframe: UInt32
    var hash: UInt32
    static func key(track: Int64, offset: Int32) -> UInt64 {
        UInt64(UInt32(truncatingIfNeeded: track)) << 32 | UInt64(UInt32(bitPattern: offset) ^ 0x8000_0000)
    }
    var track: Int64 { Int64(key >> 32) }
    var offset: Int32 { Int32(bitPattern: UInt32(truncatingIfNeeded: key) ^ 0x8000_0000) }
}

struct TrackScore {
    var track: Int64
    var range: Range<Int>
    var offset: Int
    var hits: Int
}
