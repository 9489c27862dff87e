import EarmarkCatalog
import EarmarkSignature
import Foundation

/// How matches are decided.
public struct MatchOptions: Sendable, Equatable {
    /// A match needs at least this many time-aligned distinct landmark hashes. Default 4.
    public var minimumHits: Int
    /// … and an evidence of at least this, in decades (−log₁₀ of a chance probability, corrected for the
    /// candidates, offsets and skews tried): the larger of the peak-verification evidence, plus
    /// ``hashBonus`` when at least ``supportingHits`` distinct hashes align, and the coverage evidence
    /// (how many half-second blocks of the query hold aligned hashes). Default 7; calibrated on negative
    /// clips (see README).
    public var minimumSignificance: Double
    /// Aligned distinct hashes that count as supporting evidence. Default 10.
    public var supportingHits: Int
    /// Decades of evidence that supporting hashes add. Default 4.
    public var hashBonus: Double
    /// … when they are also at least this many times the aligned hashes of the best other track of the same
    /// search that is not a match. That track shows how many hashes chance aligns in this search: in a large
    /// catalog it reaches ``supportingHits`` in most searches (with triplet keys at 10,000 h, 5 to 10 in every skew
    /// trial of a clip that is not in the catalog), and both false matches of the 300 negative clips there had
    /// a rival one hash behind (20 and 19, 6 and 5). Only in catalogs of more than ``catalogTracksAllowed``
    /// tracks: at the calibration's size chance seldom reaches the count, and on the 6.5-h benchmark the test
    /// cost 3 of 2,362 clips and no false match. 0 turns it off. Default 2.
    public var supportingLead = 2.0
    /// At most this many matches are returned. Default 5.
    public var maximumMatches: Int
    /// Tracks with the most aligned hashes that go on to peak verification. Default 8.
    public var candidates: Int
    /// … in the full first search (after the quick one) of a catalog of more than ``catalogTracksAllowed`` tracks. nil:
    /// ``candidates``; 64 for triplet keys (``defaults(for:)``). In a large catalog a clip under loud noise aligns fewer
    /// hashes with its track (2 or 3 triplets under babble) than chance aligns with some of the others (5 to 7), though
    /// its peaks verify at 20 decades or more; only clips that the quick search did not answer pay for the extra checks.
    public var firstSearchCandidates: Int? = nil
    /// … among tracks with at least this many aligned hashes in a cell (and the search's minimum, before
    /// verification). Default 3; 2 for triplet keys (``defaults(for:)``).
    public var candidateHits = 3
    /// Tracks a catalog may hold before the significance pays for more: in a catalog of N tracks every
    /// search is charged log₁₀(N / this) decades more. Each track is one more chance for a coincidence, the
    /// best of N chance fits grows with log N, and the thresholds were calibrated on the 6.5-h catalog (103
    /// tracks), so a catalog of that size pays nothing. Without a charge, 14 of the 300 negative clips matched
    /// a track of the 10,000-h scale catalog (149,061 tracks) at 7.1–9.2 decades; charged for the tracks a
    /// search screened (those with a candidate cell) rather than the catalog's, 6 still did; charged for the
    /// catalog's, 1 (at 8.4 decades). Default 128.
    public var catalogTracksAllowed = 128
    /// A match needs at least this many verified peaks. Default 5.
    public var minimumVerifiedPeaks: Int
    /// Skews tried (in this order) when nothing matches as is; empty disables the search.
    /// Default ``Skew/defaultTrials``.
    public var skewTrials: [Skew] = Skew.defaultTrials
    /// Query peaks of rank below this are verified against the reference constellation. Default 14.
    public var verifyRankLimit: Int = 14
    /// Whether a strong match that covers under 60 % of the query, or verifies under ``explainedShare`` of its
    /// strong peaks, still tries the skews (a skewed clip can line up over a short stretch, or on a band of bins
    /// with another version of the music). Streams turn it off: there a track often fills only part of the window.
    public var skewWhenPartial = true
    /// In a catalog of more than ``catalogTracksAllowed`` tracks, a match that verifies less than this share of
    /// the clip's strong peaks tries the skews too; and a skewed match of another track that verifies a quarter
    /// more of them (and 5 more) replaces it whatever their hash counts. A large catalog holds versions of one
    /// recording at other speeds or pitches (a sped-up edit, a transposed copy), and the one the clip was made
    /// from fits its peaks in every band, while another fits only where the two differ by under a bin. In a
    /// catalog of the calibration's size noise explains a low share far more often, and the extra searches
    /// would cost every noisy clip (on the 6.5-h benchmark they found nothing and took the p95 of matched
    /// 10-s clips from 22 to 169 ms). 0 turns the rule off. Default 0.7.
    public var explainedShare = 0.7
    /// Whether a clip without a decisive match is searched again with its deeper peaks
    /// (``SignatureConfiguration/deepRankLimit``), which finds music under loud speech. Default true.
    public var deepPass = true
    /// A match at least this significant ends the search as is: no deep pass and no skews. nil (the
    /// default): ``minimumSignificance`` plus 5 decades. Calibration runs, which accept everything, set it
    /// so that they search exactly as real ones do.
    public var decisiveSignificance: Double? = nil
    /// The number of skews the whole search covers when ``skewTrials`` holds only one slice of it (a stream
    /// spreads the grid over its attempts); the significance is charged for all of them. nil: `skewTrials.count`.
    public var skewSearchSize: Int? = nil
    /// The extra searches (the deep pass and the skew search) do not look up hashes with more than this many
    /// times the index's mean postings per hash (see ``Catalog/lookup(hashes:commonHashes:_:)``): in a large
    /// catalog they are half of a search's hits and a small part of a match's. nil: every hash. Default 16;
    /// the first searches look up every hash unless ``firstCommonHashes`` says otherwise.
    public var commonHashes: Double? = 16
    /// ``commonHashes`` for the first searches (the quick one and the search as is). nil: every hash (the default,
    /// but 16 for triplet keys, ``defaults(for:)``). A triplet key with more than 64 postings (the index's floor for
    /// a common key) is one that many tracks share and a match seldom needs: at 10,000 h the first search of a clip
    /// that is not in the catalog read a median of 630,000 postings without this, as many as its 84 skew trials
    /// together, and the same 180 clips got the same answers with it (one more found), at 40 % less CPU.
    public var firstCommonHashes: Double? = nil
    /// Aligned distinct hashes a skew trial's candidate needs before its peaks are verified (and to be accepted), in
    /// clips of up to 5 s; a longer clip needs ``supportingHits`` × its duration / 10 s (at most ``supportingHits``),
    /// since chance aligns hashes in proportion to a clip's landmarks. nil: ``supportingHits`` whatever the length;
    /// 3 for triplet keys (``defaults(for:)``), where a 3-s clip a semitone off aligns 3 to 8 triplets at its true skew.
    public var skewMinimumHits: Int? = nil
    /// Decades more than ``minimumSignificance`` that a skew trial's match needs when it aligns fewer than
    /// ``supportingHits`` hashes: without that support, 84 trials of a clip that is not in the catalog give chance
    /// fits more tries (at 10,000 h two of the 300 negative clips matched a stretch of 3 s at 8.2 and 10.1 decades).
    /// Default 5.
    public var unsupportedSkewMargin = 5.0
    /// The skew search pairs the clip's peaks of rank below this … Default 24 (the search as is: 36).
    public var skewRankLimit = 24
    /// … each with this many of its strongest targets. Default 12 (the search as is: 24). A skew trial's
    /// clip is the reference's own audio respaced, not noisier than as is, so a third of the landmarks
    /// still hold most of the reference's: at 100 h the skew searches took half the time with the same
    /// recall (tools/scale-bench.sh; docs/benchmarks.md).
    public var skewFanout = 12
    /// A skew trial first looks up only its anchors with their `skewScreenFanout` strongest targets, and goes on
    /// to its full search only when some track aligns ``skewScreenHits`` of those in one offset cell: in a clip
    /// that matches nothing, chance seldom aligns 3 such landmarks, while a clip at its skew aligns many (at
    /// 10,000 h a 10-s clip that matches nothing took about half the CPU time, and the skew set lost 1 of 204;
    /// docs/benchmarks.md). Lookups are memoised, so a trial that goes on looks them up once. nil: no screen.
    /// Default nil; 2 for triplet keys (one triplet an anchor, a sixth of the trial's landmarks).
    public var skewScreenFanout: Int? = nil
    /// Default 3.
    public var skewScreenHits = 3
    /// Clips shorter than this are not screened (seconds): they hold too few landmarks for the screen's count.
    /// Default 8.
    public var skewScreenSeconds = 8.0
    /// A first, lighter search: the clip's peaks of rank below ``quickRankLimit``, each anchor with its
    /// `quickFanout` strongest targets. A decisive match there (one that would end the search as is) is the
    /// answer; anything less searches again as usual. nil: no such stage.
    public var quickFanout: Int? = nil
    /// The rank limit of the ``quickFanout`` stage. Default 24.
    public var quickRankLimit = 24
    /// Decades more than ``minimumSignificance`` that a track needs when another track aligns more hashes with
    /// the clip but is not a match. Music that is not in the catalog fits some track's peaks now and then
    /// (same key, same beat grid), more often than chance says; such look-alikes are mostly outvoted by yet
    /// another track, while a catalog track leads the vote. Default 5.
    public var outvotedMargin: Double

    public static let `default` = MatchOptions(minimumHits: 4, minimumSignificance: 7, supportingHits: 10, hashBonus: 4,
                                               maximumMatches: 5, candidates: 8, minimumVerifiedPeaks: 5)

    /// The defaults for catalogs of `configuration`'s landmark design. A triplet is far rarer by chance than a
    /// pair, so fewer aligned triplets make a candidate and count as support; a skew trial's anchors need only
    /// their 4 strongest targets (6 triplets each; the search as is: 12, 66 triplets), and its candidates need 3
    /// aligned triplets in clips of up to 5 s (``skewMinimumHits``; 5 decades more while under 6); there is no
    /// deep pass; a quick first search pairs each anchor of rank below 24 with its 3 strongest targets
    /// (``quickFanout``: 3 triplets an anchor, as the reference has, against 66 in the full search), whose
    /// decisive answers end the search (at 10,000 h the same answers on 180 clips, the matched median 5 × lower);
    /// the first searches skip common keys too (``firstCommonHashes``); and in a large catalog the full first search
    /// verifies 64 candidates (``firstSearchCandidates``).
    /// Experimental: tuned on the 6.5-h public benchmark (`earmark-bench --landmarks triplets`), where 12, 8, 6
    /// and 4 skew targets found the same clips (4 in a fifth of the time), the deep pass, with 16, 10 or 6 targets,
    /// found none that the first search missed, and 3 skew hits found 46 more of 1,119 noisy, pitch- and
    /// speed-changed clips than 6 did (at 10,000 h, 69 of the 75 clips gained were 3 or 5 s long).
    public static func defaults(for configuration: SignatureConfiguration) -> MatchOptions {
        var o = MatchOptions.default
        if configuration.landmarkShape == .triplets {
            o.minimumHits = 2
            o.candidateHits = 2
            o.supportingHits = 6
            o.skewFanout = 4
            o.skewMinimumHits = 3
            o.deepPass = false
            o.quickFanout = 3
            o.firstCommonHashes = 16
            o.firstSearchCandidates = 64
            o.skewScreenFanout = 2
        }
        return o
    }

    public init(minimumHits: Int, minimumSignificance: Double, supportingHits: Int, hashBonus: Double,
                maximumMatches: Int, candidates: Int, minimumVerifiedPeaks: Int) {
        self.minimumHits = minimumHits
        self.minimumSignificance = minimumSignificance
        self.supportingHits = supportingHits
        self.hashBonus = hashBonus
        self.maximumMatches = maximumMatches
        self.candidates = candidates
        self.minimumVerifiedPeaks = minimumVerifiedPeaks
        outvotedMargin = 5
    }
}

extension MatchOptions {
    /// The fields ``override(_:)`` can set: those the benchmark tools vary in experiments.
    public static let overridable = ["explainedShare", "candidates", "candidateHits", "minimumHits", "supportingHits",
                                     "commonHashes", "skewRankLimit", "skewFanout", "catalogTracksAllowed",
                                     "minimumSignificance", "deepPass", "skewMinimumHits",
                                     "unsupportedSkewMargin", "skewTrials", "quickFanout", "quickRankLimit",
                                     "firstCommonHashes", "firstSearchCandidates", "skewScreenFanout", "skewScreenHits",
                                     "skewScreenSeconds"]

    /// Sets one field from `NAME=VALUE` (a name of ``overridable``; counts ≥ 1, shares 0…1, `commonHashes=0`
    /// for none, `deepPass=0|1`, `quickFanout=0` for no quick stage, `skewScreenFanout=0` for no screen,
    /// `skewTrials=N` the grid's N nearest skews).
    /// Returns false, changing nothing, when the name or the value is not one of those.
    public mutating func override(_ text: String) -> Bool {
        let parts = text.split(separator: "=", maxSplits: 1).map(String.init)
        guard parts.count == 2, let value = Double(parts[1]), value.isFinite else { return false }
        let count = value == value.rounded() && abs(value) < 1e9 ? Int(value) : 0
        switch parts[0] {
        case "explainedShare" where (0...1).contains(value): explainedShare = value
        case "candidates" where count >= 1: candidates = count
        case "firstSearchCandidates" where count >= 0: firstSearchCandidates = count > 0 ? count : nil
        case "candidateHits" where count >= 1: candidateHits = count
        case "minimumHits" where count >= 1: minimumHits = count
        case "supportingHits" where count >= 1: supportingHits = count
        case "commonHashes" where value >= 0: commonHashes = value > 0 ? value : nil
        case "firstCommonHashes" where value >= 0: firstCommonHashes = value > 0 ? value : nil
        case "skewRankLimit" where count >= 1: skewRankLimit = count
        case "skewFanout" where count >= 1: skewFanout = count
        case "skewScreenFanout" where count >= 0: skewScreenFanout = count > 0 ? count : nil
        case "skewScreenHits" where count >= 1: skewScreenHits = count
        case "skewScreenSeconds" where value >= 0: skewScreenSeconds = value
        case "catalogTracksAllowed" where count >= 1: catalogTracksAllowed = count
        case "minimumSignificance": minimumSignificance = value
        case "deepPass" where value == 0 || value == 1: deepPass = value == 1
        case "skewMinimumHits" where count >= 1: skewMinimumHits = count
        case "unsupportedSkewMargin" where value >= 0: unsupportedSkewMargin = value
        case "quickFanout" where count >= 0: quickFanout = count > 0 ? count : nil
        case "quickRankLimit" where count >= 1: quickRankLimit = count
        case "skewTrials" where count >= 0 && count <= Skew.defaultTrials.count: skewTrials = Array(Skew.defaultTrials.prefix(count))
        default: return false
        }
        return true
    }
}

/// A change of speed, tempo or pitch between a reference and a clip.
public struct Skew: Sendable, Equatable {
    /// Reference seconds per clip second (1.05: the clip plays 5 % faster).
    public var time: Double
    /// Clip frequency over reference frequency (1.05: the clip sounds 5 % higher).
    public var frequency: Double

    public init(time: Double, frequency: Double) {
        self.time = time
        self.frequency = frequency
    }

    /// Pitch and tempo together (a record played fast, a wrong sample-rate label).
    public static func speed(_ s: Double) -> Skew { Skew(time: s, frequency: s) }
    /// Tempo alone, pitch kept.
    public static func tempo(_ s: Double) -> Skew { Skew(time: s, frequency: 1) }
    /// Pitch alone, duration kept.
    public static func pitch(_ p: Double) -> Skew { Skew(time: 1, frequency: p) }

    var isSpeed: Bool { time == frequency }

    /// The default search: speed 0.90…1.10 and pitch 0.94…1.06 (about ±1 semitone) in 0.5 % steps,
    /// since a frequency error moves high peaks by whole bins; tempo 0.90…1.10 in 1 % steps, since
    /// time tolerates more. Ordered by how far from no skew, so the nearest are tried first.
    public static let defaultTrials: [Skew] = {
        var trials: [(Double, Skew)] = []
        for k in 1...20 {
            let d = 0.005 * Double(k)
            trials += [(d, .speed(1 + d)), (d, .speed(1 - d))]
            if k % 2 == 0 { trials += [(d, .tempo(1 + d)), (d, .tempo(1 - d))] }
            if k <= 12 { trials += [(d, .pitch(1 + d)), (d, .pitch(1 - d))] }
        }
        return trials.enumerated().sorted { ($0.element.0, $0.offset) < ($1.element.0, $1.offset) }.map(\.element.1)
    }()

    /// The skews one grid step either side of this one, of the same kind.
    var neighbours: [Skew] {
        let candidates: [Skew]
        if isSpeed {
            candidates = [.speed(time - 0.005), .speed(time + 0.005)]
        } else if frequency == 1 {
            candidates = [.tempo(time - 0.01), .tempo(time + 0.01)]
        } else {
            candidates = [.pitch(frequency - 0.005), .pitch(frequency + 0.005)]
        }
        return candidates.filter { abs($0.time - 1) + abs($0.frequency - 1) > 0.001 }
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
    /// Evidence in decades: peak-verification significance plus the hash bonus (see ``MatchOptions``).
    public var significance: Double
    /// Raw score of the best other track (0 when none).
    public var runnerUpScore: Int
    /// Strong query peaks found in the reference at the match offset (second-stage check) …
    public var verifiedPeaks: Int
    /// … out of this many tested.
    public var queryPeaks: Int
    /// Other offsets (seconds) where the clip fits the track almost as well: the music repeats there.
    public var alternativeOffsets: [Double]
    /// How much higher the clip sounds than the reference, as a fraction (0.03: 3 % higher), as in ShazamKit.
    public var frequencySkew: Double
    /// Reference seconds per clip second (1.03: the clip plays 3 % faster than the reference).
    public var timeScale: Double
    /// Seconds of the query covered by aligned hits.
    public var queryStart: Double
    public var queryEnd: Double
    /// The same stretch in the reference track, in seconds.
    public var referenceStart: Double
    public var referenceEnd: Double
}

extension Match {
    /// The share of the clip's strong peaks that verification found in the reference.
    var explained: Double { Double(verifiedPeaks) / Double(max(1, queryPeaks)) }

    /// Whether this placement verifies a quarter more of the clip's strong peaks than `other`, and 5 more.
    func explainsClearlyMore(than other: Match) -> Bool {
        explained >= 1.25 * other.explained && verifiedPeaks >= other.verifiedPeaks + 5
    }
}

/// The outcome of one query.
public struct MatchResult: Sendable, Codable, Equatable {
    /// Ranked best first; empty means no match.
    public var matches: [Match]
    /// Seconds of query audio.
    public var queryDuration: Double
    /// Query landmarks looked up by the search that gave this result (the quick, first or a skew trial's).
    public var queryLandmarks: Int
    /// Postings that shared a hash with the query in that search.
    public var candidateHits: Int
}

/// Scores a query signature against a catalog in two stages.
///
/// Stage 1 looks up the query's landmark hashes; every shared posting votes for a (track, reference −
/// query frame offset) cell, and each track's cells with the most distinct hashes become candidates.
/// Stage 2 verifies each candidate on the track's stored peak constellation: how many of the query's
/// strong peaks have a reference peak within ±1 frame and ±1 bin, against the Poisson expectation from
/// the reference's own per-bin density in that window. −log₁₀ of that tail, corrected for the
/// candidates, offsets and skews tried, plus a bonus for many aligned hashes, is the significance
/// that decides a match (see ``MatchOptions``), unless the aligned hashes' coverage of the query is
/// the stronger evidence. Weak or missing matches retry with the signature's deeper peaks (loud
/// speech outranks the music's), then under ``Skew``s.
public final class Matcher {
    public let catalog: any CatalogStore
    public var options: MatchOptions
    public let configuration: SignatureConfiguration

    /// Decoded reference peaks of the candidates of the current query (all its skew trials).
    private var peakCache: [Int64: [(frame: UInt32, bin: UInt16)]] = [:]
    /// Postings of the hashes the current query's extra searches looked up (see ``lookup(_:common:_:)``).
    private var postingMemo = PostingMemo()
    /// Skew trials of the last query that went past the screen to a full search (``MatchOptions/skewScreenFanout``).
    private(set) var fullSkewSearches = 0
    /// Lookups the last query asked of the catalog (each a round trip to a server for a remote store).
    package private(set) var catalogLookups = 0
    /// Hits per track slot of one search (see ``Hit/dropSparseTracks(_:floor:counts:)``), kept zeroed between searches.
    private var trackCounts = [UInt8](repeating: 0, count: 1 << 18)

    /// - Parameter options: nil: ``MatchOptions/defaults(for:)`` of the catalog's landmark design.
    public init(catalog: any CatalogStore, options: MatchOptions? = nil) {
        self.catalog = catalog
        self.options = options ?? .defaults(for: catalog.configuration)
        configuration = catalog.configuration
    }

    public func match(_ signature: Signature) throws -> MatchResult {
        try signature.validateForMatching(configuration: configuration)
        // Stored peaks do not depend on the skew, so one decode per track serves every trial.
        peakCache.removeAll(keepingCapacity: true)
        fullSkewSearches = 0
        catalogLookups = 0
        defer { postingMemo = PostingMemo() }
        // Counted once per query: every search of it pays for the same catalog.
        let catalogTracks = try catalog.trackCount()
        let strong = options.decisiveSignificance ?? options.minimumSignificance + 5
        // A skewed clip can still line up over a short stretch, where its peaks have not yet drifted
        // from the reference's, and that can be significant; and another version of the music (sped up,
        // transposed) can fit a skewed clip in the band of bins where the two differ by under a bin. An
        // unskewed match of the right version is strong, covers most of the clip and, unless noise hides
        // them, explains most of its strong peaks. Anything less also tries the skews, and the better result
        // wins. (Under 30 % of the peaks and under 20 decades holds 1 % of the benchmark's unskewed matches;
        // a large catalog asks for ``MatchOptions/explainedShare``, and its noisy clips pay for that.)
        let explainedShare = catalogTracks > options.catalogTracksAllowed ? options.explainedShare : 0
        func weak(_ result: MatchResult) -> Bool {
            result.matches.first.map {
                $0.significance < strong || (options.skewWhenPartial
                    && (($0.queryEnd - $0.queryStart) < 0.6 * signature.duration || $0.explained < explainedShare
                        || ($0.explained < 0.3 && $0.significance < strong + 8)))
            } ?? true
        }
        // A clean clip is decided by a fraction of its landmarks; only the rest pay for all of them.
        if let fanout = options.quickFanout {
            let quick = try matchOnce(signature, trials: 2, catalogTracks: catalogTracks,
                                      shape: (options.quickRankLimit, fanout))
            if !weak(quick) { return quick }
        }
        var plain = try matchOnce(signature, trials: 1, catalogTracks: catalogTracks,
                                  candidates: catalogTracks > options.catalogTracksAllowed ? options.firstSearchCandidates : nil)
        // Speech over music: the music's peaks are there but rank behind the voices', so the first pass
        // finds few of its hashes. The deep pass pairs the signature's weaker peaks too; it costs two or
        // three times the first, so only clips without a strong match pay for it. Like every extra
        // search, it needs the supporting number of aligned hashes.
        if options.deepPass, (plain.matches.first?.significance ?? -.infinity) < strong {
            let deep = try matchOnce(signature, trials: 2, catalogTracks: catalogTracks, minimumHits: options.supportingHits,
                                     role: .deepQuery)
            if let d = deep.matches.first, d.significance > plain.matches.first?.significance ?? -.infinity { plain = deep }
        }
        guard !options.skewTrials.isEmpty, weak(plain) else { return plain }
        // Nothing (or only a short stretch) as is: undo each candidate skew on the query's peaks (time × t, frequency ÷ f) and
        // search again. Each extra search is one more chance for a coincidence, which the
        // significance pays for, and it needs the supporting number of aligned hashes.
        var best = plain
        var bestSkew: Skew?
        let trials = 2 * max(options.skewTrials.count, options.skewSearchSize ?? 0)
        let skewHits = options.skewMinimumHits.map {
            max($0, min(options.supportingHits, Int((Double(options.supportingHits) * signature.duration / 10).rounded(.up))))
        } ?? options.supportingHits
        // The screen pairs only the skew search's peaks, so only those are unskewed for it.
        let screened = options.skewScreenFanout.flatMap { fanout in
            signature.duration < options.skewScreenSeconds ? nil
                : (fanout, Signature(configurationVersion: signature.configurationVersion, duration: signature.duration,
                                     peaks: signature.peaks.filter { Int($0.rank) < options.skewRankLimit }))
        }
        func attempt(_ skew: Skew) throws {
            if let (fanout, strong) = screened,
               try screenedOut(Matcher.unskewed(strong, skew, configuration: configuration), fanout: fanout) { return }
            fullSkewSearches += 1
            var r = try matchOnce(Matcher.unskewed(signature, skew, configuration: configuration),
                                  trials: trials, catalogTracks: catalogTracks,
                                  minimumHits: skewHits, skewed: true)
            // Every result here passed the significance threshold; among them the one with most aligned
            // hashes has the skew closest to the truth.
            guard let top = r.matches.first else { return }
            // Another track (another version of the music) that explains clearly more of the clip's peaks
            // wins whatever the hash counts; one that explains clearly less loses. Within one track the hashes
            // decide: a short noisy clip verifies a few more peaks at some small skew by chance.
            if let current = best.matches.first,
               explainedShare == 0 || top.track.id == current.track.id || !top.explainsClearlyMore(than: current) {
                if (top.score, top.significance) <= (current.score, current.significance) { return }
                // Near no skew, a skew aligns about the hashes no skew does, now and then one more by chance:
                // to replace the unskewed match it needs a tenth more (and two) aligned hashes.
                if bestSkew == nil, top.score < current.score + max(2, current.score / 10) { return }
                // More hashes, but in a band of bins: another version of the music, not a better fit.
                if explainedShare > 0, top.track.id != current.track.id, current.explainsClearlyMore(than: top) { return }
            }
            for i in r.matches.indices {
                // The fitted slope refines the time factor; for a speed change it refines the pitch too.
                let slope = r.matches[i].timeScale
                r.matches[i].timeScale = skew.time * slope
                r.matches[i].frequencySkew = (skew.isSpeed ? skew.frequency * slope : skew.frequency) - 1
                r.matches[i].queryStart /= skew.time
                r.matches[i].queryEnd /= skew.time
            }
            r.queryDuration = signature.duration
            best = r
            bestSkew = skew
        }
        // From a server, each search's lookup is a round trip, and waiting for 84 of them was most of a no-match
        // clip's time: the trials' hashes are fetched ahead into the query's memo (which the searches with a
        // common-hash limit use), for the next 8 trials, then 8, 16, 32…, so a grid that ends early has fetched
        // at most about twice what it used.
        var fetchedTrials = 0
        func fetchAhead(from n: Int) throws {
            let end = min(options.skewTrials.count, n + max(8, n))
            var hashes: [UInt32] = []
            for skew in options.skewTrials[n..<end] {
                let landmarks = if let (fanout, strong) = screened {
                    skewLandmarks(Matcher.unskewed(strong, skew, configuration: configuration), fanout: fanout)
                } else {
                    skewLandmarks(Matcher.unskewed(signature, skew, configuration: configuration), fanout: options.skewFanout)
                }
                hashes += landmarks.map(\.hash)
            }
            try lookup(Array(Set(hashes)).sorted(), common: options.commonHashes) { _, _, _ in }
            fetchedTrials = end
        }
        var climbed: Skew?
        for (n, skew) in options.skewTrials.enumerated() {
            if catalog.lookupsAreRemote, options.commonHashes != nil, n >= fetchedTrials { try fetchAhead(from: n) }
            try attempt(skew)
            // Nearest skews come first. A clearly strong match ends the grid; from there the search climbs
            // to neighbouring skews of the same kind while they align more hashes (a skew a step or two
            // off still matches on the low bins). One that leaves most strong peaks unexplained may be
            // another version of the music, so the grid goes on.
            if let found = bestSkew, found != climbed, let top = best.matches.first, top.significance >= strong {
                var current = found
                for _ in 0..<8 {
                    for neighbour in current.neighbours { try attempt(neighbour) }
                    guard let moved = bestSkew, moved != current else { break }
                    current = moved
                }
                climbed = current
                if best.matches.first.map({ $0.explained >= explainedShare }) ?? true { break }
            }
        }
        if let skew = bestSkew, skew.time != 1, !best.matches.isEmpty {
            // Each round looks ±1.5 % around the last; a skew far off the grid's pick takes two.
            for _ in 0..<3 {
                let next = try refined(best.matches[0], kind: skew, signature)
                if next == best.matches[0] { break }
                best.matches[0] = next
            }
        }
        return best
    }

    /// The skew grid and the hit-line slope can settle a step or two from the truth (hashes tolerate a
    /// little drift). Peak verification does not: the top match's skew is re-measured by the evidence of
    /// skews within ±1.5 % of it in 0.25 % steps (same kind: speed or tempo), at offsets ±4 frames.
    /// Pitch-only changes are left as found: without a time change the evidence hardly varies with
    /// the factor (peaks are verified to ±1 bin), and a phase vocoder's smeared peaks mislead it.
    func refined(_ match: Match, kind: Skew, _ signature: Signature) throws -> Match {
        let fd = configuration.frameDuration
        let time = match.timeScale, frequency = 1 + match.frequencySkew
        func skew(_ k: Int) -> Skew {
            let f = 1 + 0.0025 * Double(k)
            return kind.isSpeed ? .speed(time * f) : .tempo(time * f)
        }
        let current = try evidence(of: signature, trackID: match.track.id, offset: match.matchOffset,
                                   skew: Skew(time: time, frequency: frequency))
        // A neighbour must be clearly better (a decade of evidence): short clips have few peaks to tell skews apart.
        var best = (evidence: current + 1, skew: Skew(time: time, frequency: frequency))
        for k in -6...6 where k != 0 {
            let s = skew(k)
            let strong = strongPeaks(signature, skew: s)
            for df in -4...4 {
                let offset = Int(((match.matchOffset + Double(df) * fd) / fd).rounded())
                let e = try verifiedEvidence(strong, trackID: match.track.id, offset: offset).evidence
                if e > best.evidence { best = (e, s) }
            }
        }
        var m = match
        m.timeScale = best.skew.time
        m.frequencySkew = best.skew.frequency - 1
        return m
    }

    /// How well `signature` fits track `trackID` when placed `offset` seconds into it: the peak-verification
    /// evidence in decades (−log₁₀ of the chance of so many coinciding peaks), not corrected for trials.
    /// `skew` undoes a speed or pitch change first. Comparing two placements this way tells which fits better.
    public func evidence(of signature: Signature, trackID: Int64, offset: Double, skew: Skew? = nil) throws -> Double {
        try verifiedEvidence(strongPeaks(signature, skew: skew), trackID: trackID,
                             offset: Int((offset / configuration.frameDuration).rounded())).evidence
    }

    /// The query peaks peak verification tests, with `skew` undone first.
    private func strongPeaks(_ signature: Signature, skew: Skew?) -> [Peak] {
        let placed = skew.map { Matcher.unskewed(signature, $0, configuration: configuration) } ?? signature
        return placed.peaks.filter { Int($0.rank) < options.verifyRankLimit }
    }

    /// ``verify(_:trackID:offset:)`` with its Poisson evidence in decades.
    private func verifiedEvidence(_ strongQuery: [Peak], trackID: Int64, offset: Int) throws -> (matched: Int, tested: Int, evidence: Double) {
        let v = try verify(strongQuery, trackID: trackID, offset: offset)
        return (v.matched, v.tested, -Matcher.log10PoissonTail(k: v.matched, lambda: v.expected))
    }

    /// The peaks the reference has where the query has `signature`, if the query is the reference skewed by `skew`.
    static func unskewed(_ signature: Signature, _ skew: Skew, configuration: SignatureConfiguration) -> Signature {
        var peaks: [Peak] = []
        peaks.reserveCapacity(signature.peaks.count)
        for p in signature.peaks {
            let bin = Int((Double(p.bin) / skew.frequency).rounded())
            guard bin >= configuration.minBin, bin < configuration.maxBin else { continue }
            peaks.append(Peak(frame: UInt32((Double(p.frame) * skew.time).rounded()), bin: UInt16(bin), rank: p.rank, level: p.level))
        }
        return Signature(configurationVersion: signature.configurationVersion, duration: signature.duration * skew.time, peaks: peaks)
    }

    /// Postings by hash, kept for one query: neighbouring skews re-hash most landmarks to the same keys (a
    /// dt of 20 frames stays 20 under a 1 % change), so the grid of extra searches asks for the same hash again
    /// and again, and each was a full lookup in every segment.
    private struct PostingMemo {
        var commonHashes: Double?
        /// Hash → its postings' range in `tracks` and `frames`.
        var ranges = HashRanges()
        var tracks: [Int64] = []
        var frames: [UInt32] = []
    }

    /// ``Catalog/lookup(hashes:commonHashes:_:)``, through the query's memo for the searches with a `common` limit
    /// (the extra searches; for triplet keys the first searches too). The postings of each hash come in the order
    /// the catalog gives them, so the hits, and so the matches, are the same as without the memo.
    private func lookup(_ hashes: [UInt32], common: Double?, _ body: (Int, Int64, UInt32) -> Void) throws {
        guard let common else {
            catalogLookups += 1
            return try catalog.lookup(hashes: hashes, commonHashes: nil, body)
        }
        if postingMemo.commonHashes != common { postingMemo = PostingMemo(commonHashes: common) }
        let missing = hashes.filter { postingMemo.ranges.find($0) == nil }
        if !missing.isEmpty {
            var found: [(k: Int32, track: Int64, frame: UInt32)] = []
            catalogLookups += 1
            try catalog.lookup(hashes: missing, commonHashes: common) { k, track, frame in
                found.append((Int32(truncatingIfNeeded: k), track, frame))
            }
            // Group by hash, keeping the catalog's order within each (a counting sort).
            var next = [Int](repeating: 0, count: missing.count + 1)
            for f in found { next[Int(f.k) + 1] += 1 }
            for k in 0..<missing.count { next[k + 1] += next[k] }
            let base = postingMemo.tracks.count
            for (k, hash) in missing.enumerated() { postingMemo.ranges.insert(hash, base + next[k]..<base + next[k + 1]) }
            postingMemo.tracks += repeatElement(0, count: found.count)
            postingMemo.frames += repeatElement(0, count: found.count)
            for f in found {
                let at = base + next[Int(f.k)]
                next[Int(f.k)] += 1
                postingMemo.tracks[at] = f.track
                postingMemo.frames[at] = f.frame
            }
        }
        for (k, hash) in hashes.enumerated() {
            guard let range = postingMemo.ranges.find(hash) else { continue }
            for j in range { body(k, postingMemo.tracks[j], postingMemo.frames[j]) }
        }
    }

    /// `landmarks` ordered by (hash, frame). Sorted as packed 64-bit words: the same order as comparing the pairs
    /// (equal pairs are equal landmarks), at a fraction of the cost of a stable sort with a closure.
    static func sortedByHashAndFrame(_ landmarks: [Landmark]) -> [Landmark] {
        var packed = landmarks.map { UInt64($0.hash) << 32 | UInt64($0.frame) }
        packed.radixSort()
        return packed.map { Landmark(hash: UInt32(truncatingIfNeeded: $0 >> 32), frame: UInt32(truncatingIfNeeded: $0)) }
    }

    /// The landmarks a skew trial looks up for the clip's `unskewed` copy: the skew search's peaks, each with its
    /// `fanout` strongest targets (``MatchOptions/skewFanout`` for the full search, fewer for its screen).
    private func skewLandmarks(_ unskewed: Signature, fanout: Int) -> [Landmark] {
        Landmarks.extract(from: unskewed, rankLimit: options.skewRankLimit, fanout: fanout, configuration: configuration)
    }

    /// Whether a skew trial can be skipped: no track aligns ``MatchOptions/skewScreenHits`` distinct hashes in one
    /// offset cell among the landmarks of the trial's anchors with only their `fanout` strongest targets.
    private func screenedOut(_ signature: Signature, fanout: Int) throws -> Bool {
        let floor = options.skewScreenHits
        let hits = try sortedHits(of: skewLandmarks(signature, fanout: fanout), common: options.commonHashes, floor: floor).hits
        var i = 0
        while i < hits.count {
            var j = i
            while j < hits.count, hits[j].track == hits[i].track { j += 1 }
            if j - i >= floor, Matcher.densestCell(hits[i..<j]) >= floor,
               let cell = bestCells(hits[i..<j], count: 1).first, cell.hits >= floor { return false }
            i = j
        }
        return true
    }

    /// The hits of `landmarks` in the catalog (through the memo when `common` is set), without the tracks that
    /// have fewer than `floor`, sorted by track, offset and hash; and how many postings were found before that.
    private func sortedHits(of landmarks: [Landmark], common: Double?, floor: Int) throws -> (hits: [Hit], postings: Int) {
        // Query landmarks sorted by hash; `starts[k]` is the index of the first one with hash `distinct[k]`.
        let sorted = Matcher.sortedByHashAndFrame(landmarks)
        var distinct: [UInt32] = [], starts: [Int] = []
        distinct.reserveCapacity(sorted.count)
        starts.reserveCapacity(sorted.count)
        for (i, l) in sorted.enumerated() where i == 0 || sorted[i - 1].hash != l.hash {
            distinct.append(l.hash)
            starts.append(i)
        }
        var hits: [Hit] = []
        hits.reserveCapacity(landmarks.count * 4)
        try lookup(distinct, common: common) { k, track, rframe in
            let hash = distinct[k]
            var i = starts[k]
            while i < sorted.count, sorted[i].hash == hash {
                let q = sorted[i].frame
                hits.append(Hit(key: Hit.key(track: track, offset: Int32(clamping: Int64(rframe) - Int64(q))), qframe: q, hash: hash))
                i += 1
            }
        }
        // A track with fewer hits than a candidate needs aligned cannot be one: with triplet keys, or in a
        // large catalog, most tracks hold a hit or two, and sorting and scoring them was most of a search.
        let postings = hits.count
        Hit.dropSparseTracks(&hits, floor: floor, counts: &trackCounts)
        Hit.sort(&hits)
        return (hits, postings)
    }

    /// One search of `signature` (`skewed`: a skew trial's unskewed copy of the clip) in a catalog of `catalogTracks`,
    /// with the landmarks of `shape` (peaks of rank below `rankLimit`, `fanout` targets each) when given.
    private func matchOnce(_ signature: Signature, trials: Int, catalogTracks: Int, minimumHits: Int? = nil,
                           role: LandmarkRole = .query, skewed: Bool = false,
                           shape: (rankLimit: Int, fanout: Int)? = nil, candidates: Int? = nil) throws -> MatchResult {
        let common = skewed || role == .deepQuery ? options.commonHashes : options.firstCommonHashes
        let landmarks = if skewed, shape == nil {
            skewLandmarks(signature, fanout: options.skewFanout)
        } else if let shape {
            Landmarks.extract(from: signature, rankLimit: shape.rankLimit, fanout: shape.fanout, configuration: configuration)
        } else {
            Landmarks.extract(from: signature, role: role, configuration: configuration)
        }
        let candidateFloor = options.candidateHits
        let (hits, postingsFound) = try sortedHits(of: landmarks, common: common, floor: candidateFloor)

        let fd = configuration.frameDuration
        var perTrack: [TrackScore] = []
        var i = 0
        while i < hits.count {
            let track = hits[i].track
            var j = i
            while j < hits.count, hits[j].track == track { j += 1 }
            if j - i < candidateFloor || Matcher.densestCell(hits[i..<j]) < candidateFloor {
                i = j
                continue
            }
            let cells = bestCells(hits[i..<j], count: 6)
            if let first = cells.first {
                perTrack.append(TrackScore(track: track, range: i..<j, offset: first.offset, hits: first.hits,
                                           alternatives: Array(cells.dropFirst())))
            }
            i = j
        }
        perTrack.sort { $0.hits > $1.hits }
        let screening = max(1, Double(catalogTracks) / Double(max(1, options.catalogTracksAllowed)))
        let lead = catalogTracks > options.catalogTracksAllowed ? options.supportingLead : 0
        let considered = Array(perTrack.prefix(candidates ?? options.candidates).filter { $0.hits >= candidateFloor })
        // Only candidates that can be accepted are read (with their metadata): in a skew trial that is seldom any.
        let tracks = try catalog.tracks(ids: considered.filter { $0.hits >= (minimumHits ?? options.minimumHits) }.map(\.track))
        let strongQuery = strongPeaks(signature, skew: nil)
        let queryIndex = PeakIndex(sortingByFrame: considered.isEmpty ? [] : signature.peaks)
        func check(_ track: Int64, _ offset: Int) throws -> (matched: Int, tested: Int, evidence: Double) {
            try verifiedEvidence(strongQuery, trackID: track, offset: offset)
        }
        var matches: [Match] = []
        for (rank, candidate) in considered.enumerated() {
            // Its best offset aligns fewer hashes than this search requires, and its other offsets fewer
            // still: it cannot be accepted, so its peaks need not be verified (most candidates of a skew
            // trial or of a clip that is not in the catalog).
            guard candidate.hits >= (minimumHits ?? options.minimumHits) else { continue }
            guard let track = tracks[candidate.track] else { continue }
            var t = candidate
            var v = try check(t.track, t.offset)
            var tried = [(offset: t.offset, evidence: v.evidence)]
            // Other offset cells with a third of the hashes or more (repeated music, or the true place when
            // noise or a skew thins its hashes): the peaks decide, which tells a varied repeat from the original
            // better than the hash count does.
            for alt in t.alternatives where alt.hits * 3 >= t.hits {
                let va = try check(t.track, alt.offset)
                tried.append((alt.offset, va.evidence))
                if va.evidence > v.evidence {
                    v = va
                    (t.offset, t.hits) = (alt.offset, alt.hits)
                }
            }
            // Repetitive music (loops, repeated choruses): offsets verified almost as well as the best.
            let alternatives = tried.filter { $0.offset != t.offset && v.evidence > 0 && $0.evidence >= 0.9 * v.evidence }
                .map { Double($0.offset) * fd }
            let tests = Double(max(1, considered.count) * tried.count * trials) * screening
            let verification = v.evidence - log10(tests)
            let r = Matcher.reverseVerify(reference: try reverseReference(t.track, offset: t.offset, queryFrames: queryIndex.frameCount),
                                          query: queryIndex, offset: t.offset,
                                          minBin: configuration.minBin, bandCount: configuration.maxBin - configuration.minBin)
            // Charged for both directions of verification, as one more test.
            let reverse = -Matcher.log10PoissonTail(k: r.matched, lambda: r.expected) - log10(2 * tests)
            // The best other track that is not (or not yet) a match: the chance level of this search.
            let rival = considered.lazy.filter { c in c.track != t.track && !matches.contains { $0.track.id == c.track } }
                .map(\.hits).max() ?? 0
            let supported = t.hits >= options.supportingHits && Double(t.hits) >= lead * Double(rival)
            let significance = max(verification + (supported ? options.hashBonus : 0), reverse,
                                   Matcher.coverageEvidence(hits[t.range], offset: t.offset, trackDuration: track.duration,
                                                            queryDuration: signature.duration, frameDuration: fd,
                                                            tests: Int((Double(max(1, considered.count) * trials) * screening).rounded())))
            let runnerUp = rank == 0 ? (considered.count > 1 ? considered[1].hits : 0) : considered[0].hits
            // Outvoted: that track aligns more hashes than the chosen place.
            let outvoted = rival > t.hits
            let unsupported = skewed && t.hits < options.supportingHits
            guard t.hits >= (minimumHits ?? options.minimumHits), v.matched >= options.minimumVerifiedPeaks,
                  significance >= options.minimumSignificance + (outvoted ? options.outvotedMargin : 0)
                      + (unsupported ? options.unsupportedSkewMargin : 0) else { continue }
            let line = Matcher.hitLine(hits[t.range], cell: t.offset, skewed: skewed)
            let slope = 1 + line.drift, offset = line.offset * fd
            let qs = Double(line.firstFrame) * fd
            let qe = min(signature.duration, Double(line.lastFrame + configuration.maxPairFrames) * fd)
            matches.append(Match(track: track, matchOffset: offset,
                                 confidence: Matcher.confidence(significance: significance, threshold: options.minimumSignificance),
                                 score: t.hits, significance: significance, runnerUpScore: runnerUp,
                                 verifiedPeaks: v.matched, queryPeaks: v.tested, alternativeOffsets: alternatives,
                                 frequencySkew: slope - 1, timeScale: slope,
                                 queryStart: qs, queryEnd: qe, referenceStart: offset + slope * qs, referenceEnd: offset + slope * qe))
        }
        matches.sort { $0.significance > $1.significance }
        if matches.count > options.maximumMatches { matches.removeLast(matches.count - options.maximumMatches) }
        return MatchResult(matches: matches, queryDuration: signature.duration, queryLandmarks: landmarks.count,
                           candidateHits: postingsFound)
    }

    /// The line through one track's hits at offset cell `cell` (hits within 6 frames of it): by least squares
    /// of the hits' offsets (reference − query frame) on their query frames, the drift (time scale − 1: a
    /// speed a little off the searched one drifts the offset along the clip) and the offset, in frames, at the
    /// clip's start; and the first and last query frames with a hit within a frame of the cell.
    /// Unless the clip is a skew trial's (`skewed`: the grid leaves a residual drift), a drift counts only
    /// when it stands out from the hits' scatter by three standard errors: on a short clip whose hits span
    /// a second or two, frame jitter alone tilts the line by a percent, which would move the offset at the
    /// clip's start off the place its peaks fit. A drift beyond 1 % is a wrong line and counts as none.
    static func hitLine(_ trackHits: ArraySlice<Hit>, cell: Int, skewed: Bool)
        -> (drift: Double, offset: Double, firstFrame: Int, lastFrame: Int) {
        var n = 0.0, sq = 0.0, sd = 0.0, sqq = 0.0, sqd = 0.0, sdd = 0.0
        var first = Int.max, last = 0
        // The hashes of one anchor peak share its timing error, so for the test each (query frame, offset)
        // counts once; a skew trial's fit keeps them all.
        var seen = Set<UInt64>()
        for h in trackHits where abs(Int(h.offset) - cell) <= 6
            && (skewed || seen.insert(UInt64(h.qframe) << 32 | UInt64(UInt32(bitPattern: h.offset))).inserted) {
            let q = Double(h.qframe), d = Double(Int(h.offset) - cell)
            n += 1; sq += q; sd += d; sqq += q * q; sqd += q * d; sdd += d * d
            if abs(Int(h.offset) - cell) <= 1 {
                first = min(first, Int(h.qframe))
                last = max(last, Int(h.qframe))
            }
        }
        guard n > 0 else { return (0, Double(cell), 0, 0) }
        let qVariance = sqq - sq * sq / n, covariance = sqd - sq * sd / n
        var drift = qVariance > 0 ? covariance / qVariance : 0
        let residual = max(0, sdd - sd * sd / n - drift * covariance) / max(1, n - 2)
        if n < 8 || abs(drift) > 0.01 || (!skewed && abs(drift) < 3 * (residual / qVariance).squareRoot()) { drift = 0 }
        return (drift, Double(cell) + (sd - drift * sq) / n, first == .max ? 0 : first, last)
    }

    /// Evidence (decades, corrected for the offset cells and `tests`) from how many half-second blocks of
    /// the query hold a hash aligned at `offset`. Loud speech hides most of the music's strong peaks, so
    /// peak verification is weak, while the deep pass still aligns dozens of hashes all along the clip.
    /// Raw hash counts would not do: unrelated music with the same chord struck in time aligns a burst
    /// of distinct hashes within a fraction of a second. Counting blocks turns a burst into one.
    /// Under chance, blocks with an aligned hash are at most the aligned hashes, which are Poisson with
    /// the track's mean hits per 3-frame cell, so that tail bounds the blocks' chance.
    static func coverageEvidence(_ trackHits: ArraySlice<Hit>, offset: Int, trackDuration: Double, queryDuration: Double,
                                 frameDuration fd: Double, tests: Int) -> Double {
        let cells = max(1, (trackDuration + queryDuration) / fd / 3)
        let lambda = Double(trackHits.count) / cells
        var blocks = Set<UInt32>()
        let blockFrames = UInt32(max(1, (0.5 / fd).rounded()))
        for h in trackHits where abs(Int(h.offset) - offset) <= 1 { blocks.insert(h.qframe / blockFrames) }
        return -Matcher.log10PoissonTail(k: blocks.count, lambda: lambda) - log10(cells * Double(max(1, tests)))
    }

    /// Second stage: how many of the query's strong peaks have a reference peak within ±1 frame and ±1 bin
    /// at `offset`, and how many would by chance, given how often the reference uses each bin in that window.
    func verify(_ query: [Peak], trackID: Int64, offset: Int) throws -> (matched: Int, tested: Int, expected: Double) {
        let peaks = try referencePeaks(trackID)
        let frameCount = Int(peaks.last?.frame ?? 0) + 1
        let band = configuration.maxBin - configuration.minBin
        let lo = max(0, Int(query.first?.frame ?? 0) + offset - 1)
        let hi = min(frameCount - 1, Int(query.last?.frame ?? 0) + offset + 1)
        guard lo <= hi else { return (0, 0, 0) }
        // The frames read: the window above and each query peak's ±1 frame (the peaks need not be in frame order).
        let frames = query.lazy.map { Int($0.frame) }
        let earliest = frames.min() ?? 0, latest = frames.max() ?? 0
        let ref = PeakIndex(peaks, frames: min(lo, earliest + offset - 1)...max(hi + 1, latest + offset + 2))
        // Chance is judged from the reference's own peak density per bin in the aligned window, so a
        // sustained note or a shared key (locally dense bins) earns no credit.
        var density = [Double](repeating: 0, count: band + 2)  // padded by one bin each side
        for k in ref.first(lo)..<ref.first(hi + 1) { density[Int(ref.bins[k]) - configuration.minBin + 1] += 1 }
        let window = Double(hi - lo + 1)
        // Per bin, the chance that 3 reference frames have no peak there (one pow per bin, not per query peak).
        var absent = density
        for i in absent.indices { absent[i] = pow(max(0, 1 - density[i] / window), 3) }
        var matched = 0, tested = 0
        var expected = 0.0
        for q in query {
            let f = Int(q.frame) + offset
            guard f >= 1, f < ref.frameCount - 1 else { continue }
            let b = Int(q.bin)
            tested += 1
            var miss = 1.0
            for db in -1...1 { miss *= absent[b - configuration.minBin + db + 1] }
            expected += 1 - miss
            for k in ref.first(f - 1)..<ref.first(f + 2) where abs(Int(ref.bins[k]) - b) <= 1 {
                matched += 1
                break
            }
        }
        return (matched, tested, expected)
    }

    /// A track's stored peaks in frame order, decoded once per query.
    private func referencePeaks(_ trackID: Int64) throws -> [(frame: UInt32, bin: UInt16)] {
        if let cached = peakCache[trackID] { return cached }
        let peaks = try catalog.peaks(trackID: trackID)
        peakCache[trackID] = peaks
        return peaks
    }

    /// A track's peaks indexed over the frames ``reverseVerify(reference:query:offset:minBin:bandCount:)`` reads at
    /// `offset` for a query of `queryFrames` frames.
    private func reverseReference(_ trackID: Int64, offset: Int, queryFrames: Int) throws -> PeakIndex {
        PeakIndex(try referencePeaks(trackID), frames: (offset + 1)...(offset + queryFrames))
    }

    /// Verification the other way round: how many of the reference's peaks in the stretch the query
    /// covers at `offset` have a query peak (of any rank the signature keeps) within ±1 frame and ±1 bin,
    /// and how many would by chance. Loud speech pushes the music's peaks down the query's ranking but
    /// mostly leaves them standing, so counting from the reference's side, whose peaks are all music,
    /// still sees them. Chance comes from the query's peaks per frame and per bin taken as independent
    /// margins: an onset puts peaks in many bins of one frame, and two pieces at one tempo line their
    /// onsets up.
    static func reverseVerify(reference ref: PeakIndex, query: PeakIndex, offset: Int, minBin: Int, bandCount: Int)
        -> (matched: Int, tested: Int, expected: Double) {
        let lo = max(0, offset + 1), hi = min(ref.frameCount - 1, offset + query.frameCount - 2)
        guard lo <= hi, !query.bins.isEmpty else { return (0, 0, 0) }
        var perBin = [Double](repeating: 0, count: bandCount + 2)  // padded by one bin each side
        for b in query.bins { perBin[Int(b) - minBin + 1] += 1 }
        let total = Double(query.bins.count)
        func perFrame(_ f: Int) -> Double { Double(query.first(f + 1) - query.first(f)) }
        var matched = 0, tested = 0, expected = 0.0
        for r in lo...hi {
            let f = r - offset
            let near = perFrame(f - 1) + perFrame(f) + perFrame(f + 1)
            for k in ref.first(r)..<ref.first(r + 1) {
                let b = Int(ref.bins[k]), i = b - minBin + 1
                tested += 1
                expected += 1 - exp(-near * (perBin[i - 1] + perBin[i] + perBin[i + 1]) / total)
                for j in query.first(f - 1)..<query.first(f + 2) where abs(Int(query.bins[j]) - b) <= 1 {
                    matched += 1
                    break
                }
            }
        }
        return (matched, tested, expected)
    }

    /// Maps significance to 0…1: 0.5 at the decision threshold, 0.99 about 3 decades above it.
    static func confidence(significance: Double, threshold: Double) -> Double {
        let x = (significance - threshold) / 0.65
        return 1 / (1 + exp(-x))
    }

    /// The most hits of one track (sorted by offset) in any 3 adjacent offsets: a bound on ``bestCells(_:count:)``'s
    /// counts (which count distinct hashes), found without allocating.
    static func densestCell(_ hits: ArraySlice<Hit>) -> Int {
        var best = 0, lo = hits.startIndex
        for hi in hits.indices {
            while hits[lo].offset < hits[hi].offset - 2 { lo += 1 }
            best = max(best, hi - lo + 1)
        }
        return best
    }

    /// The 3-frame offset cell with the most distinct hashes among one track's hits (sorted by offset,
    /// then hash). Counting distinct hashes, not hits, keeps a repeated hash from inflating a cell.
    private func bestCells(_ hits: ArraySlice<Hit>, count wanted: Int) -> [(offset: Int, hits: Int)] {
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
        // Window sums over 3 adjacent offsets, centred on the heaviest offset of each window.
        var windows: [(offset: Int, hits: Int)] = []
        var lo = 0
        var sum = 0
        for hi in offsets.indices {
            sum += counts[hi]
            while offsets[lo] < offsets[hi] - 2 { sum -= counts[lo]; lo += 1 }
            if sum >= 2 || offsets.count < 64 {
                var centre = lo
                for k in lo...hi where counts[k] > counts[centre] { centre = k }
                windows.append((Int(offsets[centre]), sum))
            }
        }
        windows.sort { $0.hits > $1.hits || ($0.hits == $1.hits && $0.offset < $1.offset) }
        var best: [(offset: Int, hits: Int)] = []
        for w in windows where !best.contains(where: { abs($0.offset - w.offset) <= 3 }) {
            best.append(w)
            if best.count == wanted { break }
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

/// Peaks (a track's or a query's) indexed by frame: the peaks of frame f are `bins[first(f)..<first(f + 1)]`, for
/// the frames the index covers (all of them, or a window of a track around the place being verified).
struct PeakIndex {
    var bins: [UInt16]
    /// `start[f - base]` is the index in `bins` of frame `f`'s first peak. 32 bits: its size is memory traffic.
    var start: [UInt32]
    /// The first frame covered; `first(f)` holds for f in base..<base + start.count.
    var base: Int
    /// Frames of the whole track or query (its last peak's frame + 1), whatever the window.
    var frameCount: Int
    /// `peaks` in frame order, every frame covered (0...frameCount + 1).
    init(_ peaks: [(frame: UInt32, bin: UInt16)]) {
        self.init(peaks, frames: 0...(Int(peaks.last?.frame ?? 0) + 2))
    }

    /// `peaks` in frame order, covering frames `window` (clamped to 0...frameCount + 1): a candidate is verified
    /// over the clip's length, so indexing a few hundred frames of it, not the whole track, is all that is needed.
    init(_ peaks: [(frame: UInt32, bin: UInt16)], frames window: ClosedRange<Int>) {
        frameCount = Int(peaks.last?.frame ?? 0) + 1
        let a = min(max(0, window.lowerBound), frameCount + 1), b = max(a, min(frameCount + 1, window.upperBound))
        // Peaks before frame a and before frame b (peaks are in frame order: binary searches).
        func before(_ f: Int) -> Int {
            var lo = 0, hi = peaks.count
            while lo < hi {
                let mid = (lo + hi) / 2
                if Int(peaks[mid].frame) < f { lo = mid + 1 } else { hi = mid }
            }
            return lo
        }
        let k0 = before(a), k1 = before(b)
        base = a
        bins = peaks[k0..<k1].map(\.bin)
        start = [UInt32](repeating: 0, count: b - a + 1)
        for p in peaks[k0..<k1] { start[Int(p.frame) - a + 1] += 1 }
        for i in start.indices.dropFirst() { start[i] += start[i - 1] }
    }

    /// Index in `bins` of frame `f`'s first peak (`f` inside the window).
    @inline(__always) func first(_ f: Int) -> Int { Int(start[f - base]) }

    /// A signature's peaks, which need not come in frame order.
    init(sortingByFrame peaks: [Peak]) {
        self.init(peaks.sorted { $0.frame < $1.frame }.map { ($0.frame, $0.bin) })
    }
}

struct Hit {
    var key: UInt64
    var qframe: UInt32
    var hash: UInt32

    /// Sorts by key, then hash, stably: an LSD radix sort in 11-bit digits on the key's varying bits only
    /// (the tracks and offsets of one search span far fewer than the key's 64 bits: at 100 hours about 11
    /// and 18, so three passes where the bytes that vary took five or six), then insertion sort by hash
    /// inside each run of equal keys, which is short.
    static func sort(_ hits: inout [Hit]) {
        let n = hits.count
        guard n > 1 else { return }
        var tMin = UInt32.max, tMax = UInt32(0), oMin = UInt32.max, oMax = UInt32(0)
        for h in hits {
            let t = UInt32(truncatingIfNeeded: h.key >> 32), o = UInt32(truncatingIfNeeded: h.key)
            tMin = min(tMin, t); tMax = max(tMax, t); oMin = min(oMin, o); oMax = max(oMax, o)
        }
        let oBits = 32 - (oMax - oMin).leadingZeroBitCount, tBits = 32 - (tMax - tMin).leadingZeroBitCount
        // Order-preserving: (track, offset) less their minima, packed into oBits + tBits bits.
        @inline(__always) func packed(_ key: UInt64) -> UInt64 {
            UInt64(UInt32(truncatingIfNeeded: key >> 32) &- tMin) << UInt64(oBits) | UInt64(UInt32(truncatingIfNeeded: key) &- oMin)
        }
        let digit = 11, passes = (oBits + tBits + digit - 1) / digit
        var other = [Hit](unsafeUninitializedCapacity: n) { _, count in count = n }
        var inOther = false
        hits.withUnsafeMutableBufferPointer { a in
            other.withUnsafeMutableBufferPointer { b in
                var counts = [Int](repeating: 0, count: 1 << digit)
                counts.withUnsafeMutableBufferPointer { c in
                    let mask = UInt64((1 << digit) - 1)
                    for pass in 0..<passes {
                        let shift = UInt64(pass * digit)
                        let (src, dst) = inOther ? (b, a) : (a, b)
                        for i in c.indices { c[i] = 0 }
                        for h in src { c[Int(truncatingIfNeeded: (packed(h.key) >> shift) & mask)] += 1 }
                        if c.contains(n) { continue }
                        var sum = 0
                        for i in c.indices { let k = c[i]; c[i] = sum; sum += k }
                        for h in src {
                            let d = Int(truncatingIfNeeded: (packed(h.key) >> shift) & mask)
                            dst[c[d]] = h
                            c[d] += 1
                        }
                        inOther.toggle()
                    }
                }
                let s = inOther ? b : a
                var i = 1
                while i < n {
                    if s[i].key == s[i - 1].key, s[i].hash < s[i - 1].hash {
                        let x = s[i]
                        var j = i
                        while j > 0, s[j - 1].key == x.key, s[j - 1].hash > x.hash {
                            s[j] = s[j - 1]
                            j -= 1
                        }
                        s[j] = x
                    }
                    i += 1
                }
            }
        }
        if inOther { swap(&hits, &other) }
    }
    /// Removes the hits of tracks with fewer than `floor` hits, keeping the others in order. Tracks are counted in
    /// `counts` (a power-of-two count of slots, all zero, and zero again on return) by their id's low bits: tracks
    /// that share a slot add up, so a sparse track may stay, but a track with `floor` hits or more always does.
    static func dropSparseTracks(_ hits: inout [Hit], floor: Int, counts: inout [UInt8]) {
        guard floor > 1, floor < 256, hits.count >= floor else { return }
        let mask = UInt64(counts.count - 1)
        precondition(counts.count & Int(mask) == 0)
        var kept = 0
        counts.withUnsafeMutableBufferPointer { c in
            hits.withUnsafeMutableBufferPointer { a in
                for h in a {
                    let s = Int(truncatingIfNeeded: (h.key >> 32) & mask)
                    if c[s] < 255 { c[s] += 1 }
                }
                // A dropped track's slot is cleared at its first hit (its count is below the floor, and 0 still is);
                // a kept one's once the compaction is done. So only the slots this search used are written,
                // not the whole table (a no-match query at 10,000 h runs about 90 searches).
                for i in a.indices {
                    let s = Int(truncatingIfNeeded: (a[i].key >> 32) & mask)
                    if Int(c[s]) >= floor {
                        a[kept] = a[i]
                        kept += 1
                    } else {
                        c[s] = 0
                    }
                }
                for i in 0..<kept { c[Int(truncatingIfNeeded: (a[i].key >> 32) & mask)] = 0 }
            }
        }
        hits.removeLast(hits.count - kept)
    }
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
    /// Further offset cells of the same track (repetitive music); verification picks among them.
    var alternatives: [(offset: Int, hits: Int)]
}

/// Hash → a range of postings, for the lookups of one query: open addressing with linear probing on a
/// multiplicative hash. The memo is asked twice for every hash of every skew trial, and a `Dictionary`
/// (SipHash, generic buckets) spent about a tenth of a no-match query there.
struct HashRanges {
    private var keys: [UInt32] = []
    /// start << 32 | end; `HashRanges.empty` marks a free slot.
    private var values: [UInt64] = []
    private var shift: UInt32 = 32
    private(set) var count = 0
    private static let empty = UInt64.max

    @inline(__always) private func slot(_ key: UInt32) -> Int { Int((key &* 0x9E37_79B1) >> shift) }

    func find(_ key: UInt32) -> Range<Int>? {
        guard count > 0 else { return nil }
        let mask = values.count - 1
        var i = slot(key)
        while values[i] != HashRanges.empty {
            if keys[i] == key { return Int(values[i] >> 32)..<Int(values[i] & 0xFFFF_FFFF) }
            i = (i + 1) & mask
        }
        return nil
    }

    /// Sets the range of `key` (`range` within 0..<2³²).
    mutating func insert(_ key: UInt32, _ range: Range<Int>) {
        precondition(range.lowerBound >= 0 && range.upperBound < Int(UInt32.max))
        if 2 * (count + 1) > values.count { grow() }
        let mask = values.count - 1
        var i = slot(key)
        while values[i] != HashRanges.empty, keys[i] != key { i = (i + 1) & mask }
        if values[i] == HashRanges.empty { count += 1 }
        keys[i] = key
        values[i] = UInt64(range.lowerBound) << 32 | UInt64(range.upperBound)
    }

    private mutating func grow() {
        let capacity = max(1024, 2 * values.count)
        let (oldKeys, oldValues) = (keys, values)
        keys = [UInt32](repeating: 0, count: capacity)
        values = [UInt64](repeating: HashRanges.empty, count: capacity)
        shift = UInt32(32 - capacity.trailingZeroBitCount)
        let mask = capacity - 1
        for (k, v) in zip(oldKeys, oldValues) where v != HashRanges.empty {
            var i = slot(k)
            while values[i] != HashRanges.empty { i = (i + 1) & mask }
            keys[i] = k
            values[i] = v
        }
    }
}
