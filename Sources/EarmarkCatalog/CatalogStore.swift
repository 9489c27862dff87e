import EarmarkSignature

/// Result of adding a track to a catalog store.
public enum CatalogAddResult: Sendable, Equatable {
    case added(Track)
    /// Identical audio was already there; nothing changed.
    case duplicate(Track)
}

/// When a track's source file was last seen: its size in bytes and modification time (seconds since 1970).
public struct SourceStamp: Sendable, Equatable {
    public var size: Int64
    public var modified: Double?
    public init(size: Int64, modified: Double?) {
        self.size = size
        self.modified = modified
    }
}

/// A change to a track's descriptive fields: nil leaves a field as it is; `metadata` adds or replaces keys;
/// `removingKeys` deletes keys.
public struct TrackChange: Sendable, Equatable {
    public var title: String?
    public var artist: String?
    public var album: String?
    public var metadata: [String: JSONValue]?
    public var removingKeys: Set<String>
    public init(title: String? = nil, artist: String? = nil, album: String? = nil, metadata: [String: JSONValue]? = nil,
                removingKeys: Set<String> = []) {
        self.title = title
        self.artist = artist
        self.album = album
        self.metadata = metadata
        self.removingKeys = removingKeys
    }
}

/// A custom catalog, whatever keeps it: what the matcher, the ingestor, streaming sessions, the server and the
/// command line need of one. ``Catalog`` (one SQLite file and its index folder) is the embedded store; other
/// backends keep the same data with the same meaning, so every command answers alike on each.
///
/// An instance is one connection: not thread-safe, so open one per task. Every method leaves the catalog as it
/// was when it throws a ``CatalogError``.
public protocol CatalogStore: AnyObject {
    /// Where the catalog is, as the user named it (a file path, or a URL without its password).
    var location: String { get }
    /// The signature algorithm of the catalog's landmarks; queries must be made with it.
    var configuration: SignatureConfiguration { get }

    // MARK: Reading

    /// The number of tracks (the matcher asks on every query, so a store answers from a cache while nothing changed).
    func trackCount() throws -> Int
    /// All tracks, by id.
    func tracks() throws -> [Track]
    /// The track with `id`, or nil.
    func track(id: Int64) throws -> Track?
    /// Tracks with the given ids (missing ids are skipped), keyed by id.
    func tracks(ids: some Collection<Int64>) throws -> [Int64: Track]
    /// The track holding identical audio, or nil.
    func track(contentHash: String) throws -> Track?
    /// The track added from `sourcePath` if the file's size and modification time are unchanged since.
    func unchangedTrack(sourcePath: String, size: Int64, modified: Double) throws -> Track?
    /// The size and modification time of the file a track was added from, when known.
    func sourceStamp(trackID: Int64) throws -> SourceStamp?
    /// Calls `body(i, trackID, frame)` for every posting of each hash `hashes[i]` (distinct hashes). `commonHashes`:
    /// skip a hash with more than this many times the index's mean postings per hash (and more than 64), so common
    /// it says little about which track is playing; nil: skip none.
    func lookup(hashes: [UInt32], commonHashes: Double?, _ body: (Int, Int64, UInt32) -> Void) throws
    /// Whether each ``lookup(hashes:commonHashes:_:)`` is a round trip to a server, whose wait outweighs the work of
    /// finding the postings: a query then asks for the hashes of several searches at once.
    var lookupsAreRemote: Bool { get }
    /// The stored peaks of a track as (frame, bin), ordered by frame; empty when unknown.
    func peaks(trackID: Int64) throws -> [(frame: UInt32, bin: UInt16)]
    /// The landmarks of the tracks with ids in `ids` (for copying tracks between catalogs).
    func landmarks(ofTracks ids: Set<Int64>) throws -> [Int64: [Landmark]]
    /// The analysis results stored for a track, by kind.
    func analyses(trackID: Int64) throws -> [TrackAnalysis]
    /// Totals of the catalog.
    func stats() throws -> CatalogStats
    /// How the hash index is laid out now: its segments, the postings in them, and the postings still pending
    /// (a lookup reads every segment, so many segments after a bulk add are worth compacting).
    func indexLayout() throws -> (segments: Int, postings: Int, pending: Int)
    /// Checks that everything stored can be what Earmark wrote; returns the problems found (empty when healthy).
    func check() throws -> [String]
    /// Writes a self-contained copy of the catalog to `destination` (which must not exist): one SQLite catalog file
    /// that needs nothing beside it (see ``Catalog/export(to:)``; any store can make one with
    /// ``Catalog/create(copyOf:at:)``).
    func export(to destination: String) throws

    // MARK: Writing

    /// Adds a track, its reference landmarks, its peak constellation and its analyses, all or nothing: a reader
    /// sees the whole track or none of it. Identical audio (same content hash) is a no-op that returns the
    /// existing track. Data that no signature of the track's duration can hold is
    /// ``CatalogError/Code/invalidArgument``, writing nothing.
    func add(_ new: NewTrack, landmarks: [Landmark], peaks: [Peak], analyses: [TrackAnalysis]) throws -> CatalogAddResult
    /// Changes a track's descriptive fields as `change` says; ``CatalogError/Code/invalidArgument`` (changing
    /// nothing) when it removes a metadata key the track does not have.
    func update(id: Int64, _ change: TrackChange) throws -> Track
    /// Points a track at the file it now lives in (the same audio, moved or renamed).
    func relink(id: Int64, sourcePath: String, size: Int64?, modified: Double?) throws -> Track
    /// Removes tracks and everything stored with them, all or nothing; ``CatalogError/Code/noSuchTrack`` (removing
    /// nothing) when any id is unknown.
    func remove(ids: [Int64]) throws
    /// Stores (or replaces) one analysis result of a track.
    func setAnalysis(_ a: TrackAnalysis, trackID: Int64) throws
    /// Ends a connection's writing (a store may finish deferred work here). Errors lose nothing already added.
    func close() throws
}

extension CatalogStore {
    /// Refuses, with ``CatalogError/Code/invalidArgument``, a track that no signature of its duration can hold
    /// (``check()`` would report it as damage): every store runs this before ``add(_:landmarks:peaks:analyses:)`` writes.
    package func validateAddition(_ new: NewTrack, landmarks: [Landmark], peaks: [Peak]) throws {
        guard new.duration.isFinite, new.duration >= 0, new.duration <= Signature.maximumDuration else {
            throw CatalogError(.invalidArgument, "invalid track duration \(new.duration) s", path: location)
        }
        let lastFrame = configuration.lastFrame(duration: new.duration)
        var previous: UInt32 = 0
        for p in peaks {
            guard p.frame >= previous, Int(p.frame) <= lastFrame, Int(p.bin) >= configuration.minBin, Int(p.bin) < configuration.maxBin else {
                throw CatalogError(.invalidArgument, "peak at frame \(p.frame), bin \(p.bin) does not fit a \(new.duration)-s track in frame order", path: location)
            }
            previous = p.frame
        }
        if let l = landmarks.first(where: { UInt64($0.hash) >= 1 << UInt64(configuration.hashBits) || Int($0.frame) > lastFrame }) {
            throw CatalogError(.invalidArgument, "landmark (hash \(l.hash), frame \(l.frame)) does not fit a \(new.duration)-s track", path: location)
        }
    }

    /// An embedded store: a lookup costs what finding its postings costs.
    public var lookupsAreRemote: Bool { false }

    /// ``lookup(hashes:commonHashes:_:)`` skipping no hash.
    public func lookup(hashes: [UInt32], _ body: (Int, Int64, UInt32) -> Void) throws {
        try lookup(hashes: hashes, commonHashes: nil, body)
    }

    /// ``add(_:landmarks:peaks:analyses:)`` without analyses.
    public func add(_ new: NewTrack, landmarks: [Landmark], peaks: [Peak]) throws -> CatalogAddResult {
        try add(new, landmarks: landmarks, peaks: peaks, analyses: [])
    }

    /// Changes a track's descriptive fields; nil leaves a field as it is. `metadata` adds or replaces keys;
    /// `removingKeys` deletes keys, each of which must exist (``CatalogError/Code/invalidArgument`` otherwise,
    /// changing nothing).
    public func update(id: Int64, title: String? = nil, artist: String? = nil, album: String? = nil,
                       metadata: [String: JSONValue]? = nil, removingKeys: Set<String> = []) throws -> Track {
        try update(id: id, TrackChange(title: title, artist: artist, album: album, metadata: metadata, removingKeys: removingKeys))
    }

    /// Copies every track of `source` (same signature algorithm) into this catalog: its landmarks, stored peaks,
    /// analyses, descriptions and source file. Tracks get new ids here (the result maps them); a track whose
    /// content hash is already here is not copied (`.duplicate`, with the track it duplicates). Each track is
    /// added on its own, so a copy that stops can be run again and goes on where it stopped. The source's
    /// landmarks are read in batches of tracks holding up to `batchPostings` of them, which bounds the memory used.
    /// Ends with ``close()``.
    public func merge(from source: any CatalogStore, batchPostings: Int = 16_000_000,
                      progress: (_ done: Int, _ total: Int, _ sourceTrack: Track, _ result: CatalogAddResult) -> Void = { _, _, _, _ in })
        throws -> [(source: Track, result: CatalogAddResult)] {
        guard source.configuration.version == configuration.version else {
            throw CatalogError(.versionMismatch, "cannot merge a catalog of signature algorithm \(source.configuration.version) into one of \(configuration.version)", path: source.location)
        }
        let tracks = try source.tracks()
        var out: [(source: Track, result: CatalogAddResult)] = []
        var start = 0
        while start < tracks.count {
            var end = start, budget = 0
            while end < tracks.count, end == start || budget + tracks[end].landmarkCount <= batchPostings {
                budget += tracks[end].landmarkCount
                end += 1
            }
            let batch = tracks[start..<end]
            var landmarks = try source.landmarks(ofTracks: Set(batch.map(\.id)))
            for t in batch {
                let peaks = try source.peaks(trackID: t.id).map { Peak(frame: $0.frame, bin: $0.bin, rank: 0, level: 0) }
                let stamp = try source.sourceStamp(trackID: t.id)
                let new = NewTrack(title: t.title, artist: t.artist, album: t.album, metadata: t.metadata, duration: t.duration,
                                   sourcePath: t.sourcePath, sourceSize: stamp?.size, sourceModified: stamp?.modified,
                                   contentHash: t.contentHash)
                let result = try add(new, landmarks: landmarks.removeValue(forKey: t.id) ?? [], peaks: peaks,
                                     analyses: try source.analyses(trackID: t.id))
                out.append((t, result))
                progress(out.count, tracks.count, t, result)
            }
            start = end
        }
        try close()
        return out
    }
}

/// What ``CatalogStore/verifyCopy(_:from:sample:)`` found.
public struct CopyVerification: Sendable, Equatable {
    /// Tracks whose every landmark was looked up in the copy.
    public var tracks = 0
    /// Landmarks looked up and found.
    public var landmarks = 0
    /// Differences between the source and the copy (empty when the copy is whole).
    public var problems: [String] = []
}

extension CatalogStore {
    /// Checks a copy made by ``merge(from:batchPostings:progress:)`` from `source` into this store: every source
    /// track's counterpart is here with the same duration and landmark count, and for `sample` tracks spread over
    /// the source, every landmark looked up here finds the counterpart at the same frame.
    public func verifyCopy(_ merged: [(source: Track, result: CatalogAddResult)], from source: any CatalogStore,
                           sample: Int) throws -> CopyVerification {
        var out = CopyVerification()
        func problem(_ text: String) { if out.problems.count < 100 { out.problems.append(text) } }
        func counterpart(_ r: CatalogAddResult) -> Track {
            switch r { case .added(let t), .duplicate(let t): return t }
        }
        let here = try tracks(ids: merged.map { counterpart($0.result).id })
        for (s, r) in merged {
            let c = counterpart(r)
            guard let t = here[c.id] else { problem("track \(s.id) of the source: its copy #\(c.id) is missing"); continue }
            if t.landmarkCount != s.landmarkCount || t.duration != s.duration {
                problem("track \(s.id) of the source: \(s.landmarkCount) landmarks over \(s.duration) s, its copy #\(t.id) \(t.landmarkCount) over \(t.duration) s")
            }
        }
        guard sample > 0, !merged.isEmpty else { return out }
        let picks = Set((0..<min(sample, merged.count)).map { $0 * merged.count / min(sample, merged.count) })
        for i in picks.sorted() {
            let (s, r) = merged[i]
            let copy = counterpart(r).id
            let landmarks = try source.landmarks(ofTracks: [s.id])[s.id] ?? []
            let hashes = Array(Set(landmarks.map(\.hash))).sorted()
            var found = Set<UInt64>()
            try lookup(hashes: hashes, commonHashes: nil) { k, track, frame in
                if track == copy { found.insert(UInt64(hashes[k]) << 32 | UInt64(frame)) }
            }
            let missing = landmarks.filter { !found.contains(UInt64($0.hash) << 32 | UInt64($0.frame)) }.count
            if missing > 0 { problem("track \(s.id) of the source: \(missing) of its \(landmarks.count) landmarks are not found for its copy #\(copy)") }
            out.tracks += 1
            out.landmarks += landmarks.count - missing
        }
        return out
    }
}
