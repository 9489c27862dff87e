import Foundation

/// Every tunable of the signature algorithm, in one versioned value.
///
/// Changing a field that shapes what a catalog holds (peaks, ranks up to ``queryRankLimit``, reference
/// landmarks) is a new ``version``: a catalog records the version it was built with and refuses
/// signatures of another. The deep-query fields only add weaker peaks to signatures and query pairs,
/// which catalogs never store.
public struct SignatureConfiguration: Sendable, Equatable, Codable {
    /// Algorithm version stored in catalogs and signature files.
    public var version: UInt16
    /// Input sample rate in Hz (audio is converted to this first). Default 44,100.
    public var sampleRate: Double
    /// STFT length in samples (Hann window). Default 2048 (46 ms).
    public var fftSize: Int
    /// STFT hop in samples. Default 441 (10 ms): one frame is the time unit of peaks and offsets.
    public var hop: Int
    /// Lowest FFT bin searched for peaks. Default 12 (≈ 258 Hz: survives telephone band-pass).
    public var minBin: Int
    /// One past the highest FFT bin searched. Default 187 (≈ 4 kHz).
    public var maxBin: Int
    /// A peak is the maximum of a (2·peakTimeRadius+1) × (2·peakBinRadius+1) neighbourhood. Frames; default 4.
    public var peakTimeRadius: Int
    /// Bins; default 3 (≈ ±65 Hz).
    public var peakBinRadius: Int
    /// Peaks quieter than this (dB of |X|², a full-scale sine is ≈ 54 dB) are ignored. Default −50 (≈ −104 dBFS):
    /// digital silence yields no peaks, while very quiet audio (a phase-inverted stereo pair mixed to mono) still does.
    public var levelFloor: Float
    /// A peak's rank is the number of stronger peaks within ±rankRadius frames. Default 50 (a 1-s window).
    public var rankRadius: Int
    /// Reference (catalog) peaks: rank below this. Default 14, ≈ 14 peaks per second.
    public var referenceRankLimit: Int
    /// Query peaks: rank below this; a superset of the reference peaks. Catalogs store each track's
    /// peaks up to this rank for verification. Default 36.
    public var queryRankLimit: Int
    /// Signatures keep peaks up to this rank, for the deep query pass: under loud speech the music's
    /// peaks survive but rank behind the voices' (most fall between 36 and 100). Default 100.
    public var deepRankLimit: Int
    /// Landmark pairs join an anchor with targets 1…maxPairFrames frames later. Default 63 (0.63 s).
    public var maxPairFrames: Int
    /// … and at most maxPairBins bins above or below it. Default 63.
    public var maxPairBins: Int
    /// Reference anchors pair with their strongest `referenceFanout` targets. Default 3.
    public var referenceFanout: Int
    /// Query anchors pair with up to `queryFanout` targets (strongest first). Default 24.
    public var queryFanout: Int
    /// Deep-pass query anchors pair with up to this many targets. Default 48.
    public var deepFanout: Int
    /// Reference landmarks repeating an identical hash within this many frames are dropped. Default 100 (1 s).
    public var repeatSuppressionFrames: Int
    /// How peaks combine into landmarks: pairs (21-bit hashes; version 1) or triplets (32-bit).
    public var landmarkShape: LandmarkShape = .pairs

    /// The algorithm this build produces and reads: version 1, pair landmarks.
    public static let current = SignatureConfiguration(
        version: 1, sampleRate: 44_100, fftSize: 2048, hop: 441, minBin: 12, maxBin: 187,
        peakTimeRadius: 4, peakBinRadius: 3, levelFloor: -50, rankRadius: 50,
        referenceRankLimit: 14, queryRankLimit: 36, deepRankLimit: 100, maxPairFrames: 63, maxPairBins: 63,
        referenceFanout: 3, queryFanout: 24, deepFanout: 48, repeatSuppressionFrames: 100, landmarkShape: .pairs)

    /// Experimental: the same peaks made into triplet landmarks (32-bit keys), for catalogs at scale, where a
    /// pair key returns the postings of hundreds of tracks. With ``MatchOptions/defaults(for:)`` it finds 296 of
    /// the 6.5-h benchmark's quick draw of 308 clips where pairs find 304 (short clips under noise or babble lose
    /// their third peaks), and 202 of 204 speed, tempo and pitch clips; so it is not the default, and no catalog
    /// is built with it unless asked (`--landmarks triplets` of `earmark catalog add`, `earmark-bench` and
    /// `earmark-scale-bench`).
    public static let experimentalTriplets: SignatureConfiguration = {
        var c = current
        c.version = 2
        c.landmarkShape = .triplets
        c.queryFanout = 12
        c.deepFanout = 16
        return c
    }()

    /// The configuration of algorithm `version` that this build knows, or nil (an experimental one included,
    /// so that a catalog built with it can be opened again).
    public static func released(version: UInt16) -> SignatureConfiguration? {
        [current, experimentalTriplets].first { $0.version == version }
    }

    /// Whether signatures of `other` have the same peaks as this configuration's (they differ only in how peaks
    /// make landmarks), so that one can be matched against a catalog of the other.
    public func hasSamePeaks(as other: SignatureConfiguration) -> Bool {
        var a = self, b = other
        (a.version, a.landmarkShape, a.queryFanout, a.deepFanout, a.referenceFanout) = (0, .pairs, 0, 0, 0)
        (b.version, b.landmarkShape, b.queryFanout, b.deepFanout, b.referenceFanout) = (0, .pairs, 0, 0, 0)
        return a == b
    }

    /// Bits a landmark hash can use: 21 for pairs, 32 for triplets.
    public var hashBits: Int { landmarkShape == .pairs ? 21 : 32 }

    /// Names the hash layout; a catalog's index records it and refuses another.
    public var keyDesign: String { "sig\(version)-\(landmarkShape == .pairs ? "pairs21" : "triplets32")" }

    /// This configuration for indexing: the same algorithm (and version), without the deep-pass peaks,
    /// which catalogs never store (less memory and ranking work on long files).
    public var forCatalog: SignatureConfiguration {
        var c = self
        c.deepRankLimit = queryRankLimit
        return c
    }

    /// The tilt (dB) added to bin `bin`'s power before peaks are picked: +3 dB per octave, 0 at 1 kHz, so that the
    /// usual downward slope of music spectra does not put every peak in the bass. Peak levels include it, so a
    /// peak of bin `bin` is at least `levelFloor + tiltDecibels(bin:)`.
    public func tiltDecibels(bin: Int) -> Double {
        10 * log10(Double(bin) / (1000 * Double(fftSize) / sampleRate))
    }

    /// Seconds per STFT frame.
    public var frameDuration: Double { Double(hop) / sampleRate }

    /// The last frame a peak of `duration` seconds of audio can fall on (the final, zero-padded frames included).
    public func lastFrame(duration: Double) -> Int {
        Int(duration * sampleRate) / hop + fftSize / hop + 1
    }

    /// Checks the invariants the hash layout relies on.
    public func validate() throws {
        guard fftSize >= 256, fftSize & (fftSize - 1) == 0, hop > 0, hop <= fftSize,
              minBin >= 1, maxBin > minBin, maxBin <= fftSize / 2, maxBin - minBin <= 256,
              maxPairFrames >= 1, maxPairFrames <= 63, maxPairBins >= 0, maxPairBins <= 63,
              referenceRankLimit >= 1, queryRankLimit >= referenceRankLimit, deepRankLimit >= queryRankLimit,
              deepRankLimit <= 65_535, referenceFanout >= 1, queryFanout >= referenceFanout, deepFanout >= queryFanout
        else { throw SignatureError(.invalidConfiguration, "signature configuration \(version) is inconsistent") }
    }
}

/// How a signature's peaks are combined into landmark hashes.
public enum LandmarkShape: String, Sendable, Codable {
    /// An anchor and one target: anchor bin, bin difference and frame difference (21 bits).
    case pairs
    /// An anchor and two of its targets: anchor bin, both bin differences and both frame differences, folded
    /// into 32 bits. Random collisions fall with the catalog's size far faster than with pairs.
    case triplets
}

/// An error raised by signature generation or signature files.
public struct SignatureError: Error, CustomStringConvertible, Sendable, Equatable {
    public enum Code: String, Sendable {
        /// The audio produced no usable peaks: silence or near-silence.
        case signatureInvalid
        /// The audio is too short to match (less than about one second).
        case signatureDurationInvalid
        /// A signature file is damaged, truncated or not a signature file.
        case invalidFile
        /// The signature was made by another algorithm version.
        case versionMismatch
        case invalidConfiguration
    }
    public var code: Code
    public var message: String
    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }
    public var description: String { message }
}
