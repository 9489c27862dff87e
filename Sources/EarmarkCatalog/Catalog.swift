import CSQLite3
import EarmarkSignature
import Foundation

/// A custom catalog of reference tracks, stored in one SQLite file (WAL mode).
///
/// The hash index is an inverted file: the 21-bit landmark hash space is split into 2¹⁸
/// buckets (the hash's top 18 bits); each bucket is one row whose blob lists, for every posting,
/// the track id and `frame << 3 | low 3 hash bits` as varints. Adding a track appends to the blobs
/// of the buckets it touches, in one transaction.
///
/// An instance owns one connection and is not thread-safe; open one per task. Several processes
/// may use one file: readers never block, writers wait for the lock up to `busyTimeout`.
public final class Catalog {
    /// The schema version this build writes; older catalogs are migrated when opened for writing.
    public static let schemaVersion = 2
    /// `PRAGMA application_id` of Earmark catalogs ("ERMK").
    static let applicationID: Int32 = 0x4552_4D4B
    static let lowBits: UInt32 = 3
    /// Rows of the hash index: one per value of a hash's top bits.
    static let bucketCount = 1 << (Landmarks.hashBits - Int(lowBits))

    public let path: String
    public let configuration: SignatureConfiguration
    private let db: SQLiteConnection
    /// Schema version of the file as opened (an older catalog opened read-only is not migrated).
    private var schemaOnDisk = Catalog.schemaVersion
    private let busyTimeout: Double
    /// The hash index copied into memory by ``preloadIndex(maximumBytes:)``: bucket b's blob is
    /// `data[offsets[b]..<offsets[b + 1]]`, as of `dataVersion`; `stale` once this connection writes postings.
    private struct MemoryIndex {
        var offsets: [UInt32]
        var data: [UInt8]
        var dataVersion: Int64
        var maximumBytes: Int
        var stale = false
    }
    private var memoryIndex: MemoryIndex?

    /// The catalog used when no `--catalog` is given: `$EARMARK_CATALOG`, else
    /// `$XDG_DATA_HOME/earmark/catalog.earcat`, else `~/.local/share/earmark/catalog.earcat`.
    public static var defaultPath: String {
        let env = ProcessInfo.processInfo.environment
        if let p = env["EARMARK_CATALOG"], !p.isEmpty { return p }
        let base = env["XDG_DATA_HOME"].flatMap { $0.isEmpty ? nil : $0 }
            ?? (FileManager.default.homeDirectoryForCurrentUser.path + "/.local/share")
        return base + "/earmark/catalog.earcat"
    }

    /// Opens (or creates) a catalog.
    /// - Parameters:
    ///   - create: create the file (and its folder) when missing; otherwise a missing file is ``CatalogError/Code/notFound``.
    ///   - readOnly: open without write access (matching).
    ///   - busyTimeout: seconds to wait for another writer's lock.
    public init(path: String, create: Bool = false, readOnly: Bool = false, busyTimeout: Double = 10,
                configuration: SignatureConfiguration = .current) throws {
        self.path = path
        self.configuration = configuration
        self.busyTimeout = max(0, min(busyTimeout, 86_400))
        if let scheme = Catalog.urlScheme(path) {
            throw CatalogError(.invalidArgument, "a \(scheme):// URL; this build keeps a catalog in one SQLite file only, so give a file path", path: path)
        }
        var isFolder: ObjCBool = false
        let exists = FileManager.default.fileExists(atPath: path, isDirectory: &isFolder)
        if isFolder.boolValue {
            throw CatalogError(.invalidArgument, "is a folder, not a catalog file (a catalog is one file, e.g. \((path as NSString).appendingPathComponent("catalog.earcat")))", path: path)
        }
        if !exists {
            guard create, !readOnly else {
                throw CatalogError(.notFound, "no catalog here; build one with `earmark catalog add`", path: path)
            }
            // (URL, not NSString: swift-corelibs-foundation's NSString path methods trap on paths such as "//Ҩ".)
            let dir = URL(fileURLWithPath: path).deletingLastPathComponent().path
            if !dir.isEmpty {
                do { try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true) } catch {
                    throw CatalogError(.readOnly, "cannot create folder \(dir): \(error.localizedDescription)", path: path)
                }
            }
        }
        db = try SQLiteConnection(path: path, readOnly: readOnly, create: create,
                                  busyTimeoutMs: Int32(max(0, min(busyTimeout, 86_400)) * 1000),
                                  immutable: readOnly && exists && Catalog.onReadOnlyStorage(path))
        if !readOnly && db.isReadOnly {
            throw CatalogError(.readOnly, "catalog file is read-only", path: path)
        }
        try openSchema(fresh: !exists, readOnly: readOnly)
    }

    /// `postgres` for `postgres://host/db`: a path that is a URL.
    static func urlScheme(_ path: String) -> String? {
        guard let r = path.range(of: "://") else { return nil }
        let scheme = path[..<r.lowerBound]
        guard let first = scheme.unicodeScalars.first, CharacterSet.letters.contains(first),
              scheme.unicodeScalars.allSatisfy({ CharacterSet.alphanumerics.contains($0) || "+-.".unicodeScalars.contains($0) })
        else { return nil }
        return String(scheme)
    }

    /// Whether a catalog must be read as immutable: its folder cannot be written (a read-only mount, a
    /// container layer, a CD), so SQLite could not create the WAL index a WAL-mode file needs, and no
    /// write-ahead log holds changes that only a normal open would see.
    static func onReadOnlyStorage(_ path: String) -> Bool {
        guard access(URL(fileURLWithPath: path).deletingLastPathComponent().path, W_OK) != 0 else { return false }
        let wal = (try? FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? Int) ?? 0
        return wal == 0
    }

    private func openSchema(fresh: Bool, readOnly: Bool) throws {
        // One statement, so one snapshot: read one by one, a catalog that another process is creating
        // could show its application id from before that process's first migration and its tables after.
        let s = try db.prepare("""
            SELECT (SELECT application_id FROM pragma_application_id), (SELECT user_version FROM pragma_user_version),
                   (SELECT count(*) FROM sqlite_master)
            """)
        guard try s.step() else { throw CatalogError(.damaged, "cannot read the catalog's header", path: path) }
        let (appID, version, objects) = (Int(s.int64(0)), Int(s.int64(1)), Int(s.int64(2)))
        s.reset()
        if fresh || (appID == 0 && version == 0 && objects == 0) {
            guard !readOnly else { throw CatalogError(.damaged, "empty file is not a catalog", path: path) }
            try enableWAL()
            try migrate(from: 0)
            return
        }
        guard appID == Int(Catalog.applicationID) else {
            throw CatalogError(.damaged, "not an Earmark catalog (SQLite application id \(appID))", path: path)
        }
        guard version <= Catalog.schemaVersion else {
            throw CatalogError(.versionMismatch, "catalog schema \(version) is newer than this build (\(Catalog.schemaVersion)); upgrade Earmark", path: path)
        }
        if !readOnly {
            // Writing into a damaged file spreads the damage (and hides it behind a success), so a catalog
            // opened for writing must pass SQLite's quick check first: one read of every page, about as
            // long as reading the file.
            try refuseWritesIfDamaged()
            try enableWAL()
        }
        if version < Catalog.schemaVersion {
            // Later migrations only add optional tables, so an older catalog can still be read as it is.
            if !readOnly { try migrate(from: version) }
        }
        schemaOnDisk = readOnly ? version : Catalog.schemaVersion
        try setPragmas()
        let sigVersion = try info("signature_version").flatMap(Int.init) ?? -1
        guard sigVersion == Int(configuration.version) else {
            throw CatalogError(.versionMismatch,
                               "catalog was built with signature algorithm \(sigVersion); this build uses \(configuration.version). Build a new catalog from the source files",
                               path: path)
        }
    }

    private func refuseWritesIfDamaged() throws {
        var problems: [String] = []
        do {
            let s = try db.prepare("PRAGMA quick_check(3)")
            while try s.step() { if let m = s.string(0), m != "ok" { problems.append(m) } }
        } catch let e as CatalogError where e.code == .damaged {
            problems.append(e.message)
        }
        guard problems.isEmpty else {
            throw CatalogError(.damaged, "catalog file is damaged (\(problems.joined(separator: "; "))); nothing was written to it. "
                               + "Run `earmark catalog check` for details, and rebuild it or restore a copy", path: path)
        }
    }

    /// Switches to WAL unless already there. The switch needs a moment without other connections, and
    /// SQLite does not wait for that on its own, so a busy answer is retried within the busy timeout.
    private func enableWAL() throws {
        let deadline = Date().addingTimeInterval(busyTimeout)
        while true {
            do {
                let s = try db.prepare("PRAGMA journal_mode")
                let mode = try s.step() ? s.string(0)?.lowercased() : nil
                s.reset()
                if mode == "wal" { return }
                try db.execute("PRAGMA journal_mode=WAL")
                return
            } catch let e as CatalogError where e.code == .locked && Date() < deadline {
                Thread.sleep(forTimeInterval: 0.02)
            }
        }
    }

    private func setPragmas() throws {
        try db.execute("PRAGMA synchronous=NORMAL; PRAGMA cache_size=-65536; PRAGMA temp_store=MEMORY")
    }

    /// Numbered migrations; each runs in its own transaction and bumps `user_version`.
    private func migrate(from version: Int) throws {
        let migrations: [(Int, String)] = [
            (1, """
            CREATE TABLE catalog_info(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
            CREATE TABLE tracks(
              id INTEGER PRIMARY KEY AUTOINCREMENT,
              title TEXT, artist TEXT, album TEXT,
              metadata TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(metadata)),
              duration REAL NOT NULL,
              source_path TEXT, source_size INTEGER, source_mtime REAL,
              content_hash TEXT NOT NULL UNIQUE,
              landmark_count INTEGER NOT NULL,
              added_at TEXT NOT NULL);
            CREATE INDEX tracks_source ON tracks(source_path);
            CREATE TABLE postings(bucket INTEGER PRIMARY KEY, data BLOB NOT NULL);
            CREATE TABLE track_peaks(track_id INTEGER PRIMARY KEY, data BLOB NOT NULL);
            """),
            (2, """
            CREATE TABLE track_analysis(
              track_id INTEGER NOT NULL, kind TEXT NOT NULL, version INTEGER NOT NULL,
              data TEXT NOT NULL CHECK (json_valid(data)),
              PRIMARY KEY (track_id, kind)) WITHOUT ROWID;
            """),
        ]
        try setPragmas()
        for (target, sql) in migrations where target > version {
            try db.writeTransaction {
                // Another process may have migrated while this one waited for the write lock.
                guard try scalarInt("PRAGMA user_version") < target else { return }
                try db.execute(sql)
                if target == 1 {
                    try db.execute("PRAGMA application_id=\(Catalog.applicationID)")
                    try setInfo("signature_version", String(configuration.version))
                    try setInfo("created_at", Catalog.now())
                    try setInfo("format", "earmark-catalog")
                }
                try db.execute("PRAGMA user_version=\(target)")
            }
        }
    }

    static func now() -> String {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime]
        return f.string(from: Date())
    }

    private func scalarInt(_ sql: String) throws -> Int {
        let s = try db.prepare(sql)
        guard try s.step() else { return 0 }
        return Int(s.int64(0))
    }

    private func info(_ key: String) throws -> String? {
        let s = try db.prepare("SELECT value FROM catalog_info WHERE key = ?1")
        s.bind(1, key)
        return try s.step() ? s.string(0) : nil
    }

    private func setInfo(_ key: String, _ value: String) throws {
        let s = try db.prepare("INSERT OR REPLACE INTO catalog_info(key, value) VALUES (?1, ?2)")
        s.bind(1, key)
        s.bind(2, value)
        try s.run()
    }

    // MARK: Tracks

    private static let trackColumns =
        "id, title, artist, album, metadata, duration, source_path, content_hash, landmark_count, added_at"

    private func readTrack(_ s: SQLiteStatement) -> Track {
        let metaText = s.string(4) ?? "{}"
        let meta = (try? JSONDecoder().decode([String: JSONValue].self, from: Data(metaText.utf8))) ?? [:]
        return Track(id: s.int64(0), title: s.string(1), artist: s.string(2), album: s.string(3), metadata: meta,
                     duration: s.double(5), sourcePath: s.string(6), contentHash: s.string(7) ?? "",
                     landmarkCount: Int(s.int64(8)), addedAt: s.string(9) ?? "")
    }

    /// All tracks, by id.
    public func tracks() throws -> [Track] {
        let s = try db.prepare("SELECT \(Catalog.trackColumns) FROM tracks ORDER BY id")
        var out: [Track] = []
        while try s.step() { out.append(readTrack(s)) }
        return out
    }

    /// The track with `id`, or nil.
    public func track(id: Int64) throws -> Track? {
        let s = try db.cached("SELECT \(Catalog.trackColumns) FROM tracks WHERE id = ?1")
        defer { s.reset() }
        s.bind(1, id)
        return try s.step() ? readTrack(s) : nil
    }

    /// Tracks with the given ids (missing ids are skipped), keyed by id.
    public func tracks(ids: some Collection<Int64>) throws -> [Int64: Track] {
        var out: [Int64: Track] = [:]
        for id in ids { if let t = try track(id: id) { out[id] = t } }
        return out
    }

    /// The track holding identical audio, or nil.
    public func track(contentHash: String) throws -> Track? {
        let s = try db.prepare("SELECT \(Catalog.trackColumns) FROM tracks WHERE content_hash = ?1")
        s.bind(1, contentHash)
        return try s.step() ? readTrack(s) : nil
    }

    /// The track added from `path` if the file's size and modification time are unchanged since.
    public func unchangedTrack(sourcePath: String, size: Int64, modified: Double) throws -> Track? {
        let s = try db.prepare("SELECT \(Catalog.trackColumns) FROM tracks WHERE source_path = ?1 AND source_size = ?2 AND source_mtime = ?3")
        s.bind(1, sourcePath)
        s.bind(2, size)
        s.bind(3, modified)
        return try s.step() ? readTrack(s) : nil
    }

    /// Result of ``add(_:landmarks:)``.
    public enum AddResult: Sendable, Equatable {
        case added(Track)
        /// Identical audio was already there; nothing changed.
        case duplicate(Track)
    }

    /// Adds a track, its reference landmarks, its peak constellation (used to verify candidate
    /// matches) and its analysis results in one transaction. Identical audio (same content hash) is a no-op that returns the existing track.
    /// Throws ``CatalogError/Code/invalidArgument`` (writing nothing) for data that no signature of the track's
    /// duration can hold: ``check()`` would report it as damage.
    public func add(_ new: NewTrack, landmarks: [Landmark], peaks: [Peak], analyses: [TrackAnalysis] = []) throws -> AddResult {
        guard new.duration.isFinite, new.duration >= 0, new.duration <= Signature.maximumDuration else {
            throw CatalogError(.invalidArgument, "invalid track duration \(new.duration) s", path: path)
        }
        let lastFrame = configuration.lastFrame(duration: new.duration)
        var previous: UInt32 = 0
        for p in peaks {
            guard p.frame >= previous, Int(p.frame) <= lastFrame, Int(p.bin) >= configuration.minBin, Int(p.bin) < configuration.maxBin else {
                throw CatalogError(.invalidArgument, "peak at frame \(p.frame), bin \(p.bin) does not fit a \(new.duration)-s track in frame order", path: path)
            }
            previous = p.frame
        }
        if let l = landmarks.first(where: { $0.hash >= 1 << Landmarks.hashBits || Int($0.frame) > lastFrame }) {
            throw CatalogError(.invalidArgument, "landmark (hash \(l.hash), frame \(l.frame)) does not fit a \(new.duration)-s track", path: path)
        }
        let metaJSON = String(decoding: try JSONEncoder().encode(new.metadata), as: UTF8.self)
        return try db.writeTransaction {
            if let existing = try track(contentHash: new.contentHash) { return .duplicate(existing) }
            let ins = try db.prepare("""
                INSERT INTO tracks(title, artist, album, metadata, duration, source_path, source_size, source_mtime,
                                   content_hash, landmark_count, added_at)
                VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
                """)
            ins.bind(1, new.title)
            ins.bind(2, new.artist)
            ins.bind(3, new.album)
            ins.bind(4, metaJSON)
            ins.bind(5, new.duration)
            ins.bind(6, new.sourcePath)
            if let size = new.sourceSize { ins.bind(7, size) }
            if let m = new.sourceModified { ins.bind(8, m) }
            ins.bind(9, new.contentHash)
            let unique = Catalog.uniqueSorted(landmarks)
            ins.bind(10, Int64(unique.count))
            ins.bind(11, Catalog.now())
            try ins.run()
            let id = db.lastInsertRowID
            try appendPostings(trackID: id, landmarks: unique)
            let pk = try db.prepare("INSERT INTO track_peaks(track_id, data) VALUES (?1, ?2)")
            pk.bind(1, id)
            Catalog.encodePeaks(peaks, configuration: configuration).withUnsafeBytes { pk.bind(2, blob: $0) }
            try pk.run()
            for a in analyses { try storeAnalysis(a, trackID: id) }
            guard let t = try track(id: id) else { throw CatalogError(.ioError, "track vanished", path: path) }
            return .added(t)
        }
    }

    static func uniqueSorted(_ landmarks: [Landmark]) -> [Landmark] {
        var sorted = landmarks.sorted { ($0.hash, $0.frame) < ($1.hash, $1.frame) }
        var w = 0
        for i in sorted.indices where i == 0 || sorted[i] != sorted[w - 1] {
            sorted[w] = sorted[i]
            w += 1
        }
        sorted.removeLast(sorted.count - w)
        return sorted
    }

    private func appendPostings(trackID: Int64, landmarks: [Landmark]) throws {
        memoryIndex?.stale = true
        let upsert = try db.prepare("""
            INSERT INTO postings(bucket, data) VALUES (?1, ?2)
            ON CONFLICT(bucket) DO UPDATE SET data = data || excluded.data
            """)
        var blob: [UInt8] = []
        var i = 0
        while i < landmarks.count {
            let bucket = landmarks[i].hash >> Catalog.lowBits
            blob.removeAll(keepingCapacity: true)
            while i < landmarks.count, landmarks[i].hash >> Catalog.lowBits == bucket {
                let l = landmarks[i]
                Varint.append(UInt64(trackID), to: &blob)
                Varint.append(UInt64(l.frame) << UInt64(Catalog.lowBits) | UInt64(l.hash & 7), to: &blob)
                i += 1
            }
            upsert.bind(1, Int64(bucket))
            blob.withUnsafeBytes { upsert.bind(2, blob: $0) }
            try upsert.run()
        }
    }

    /// Changes a track's descriptive fields; nil leaves a field as it is. `metadata` adds or replaces keys;
    /// `removingKeys` deletes keys, each of which must exist (``CatalogError/Code/invalidArgument`` otherwise,
    /// changing nothing).
    public func update(id: Int64, title: String? = nil, artist: String? = nil, album: String? = nil,
                       metadata: [String: JSONValue]? = nil, removingKeys: Set<String> = []) throws -> Track {
        try db.writeTransaction {
            guard let t = try track(id: id) else { throw CatalogError(.noSuchTrack, "no track with id \(id)", path: path) }
            if let missing = removingKeys.sorted().first(where: { t.metadata[$0] == nil }) {
                throw CatalogError(.invalidArgument, "track \(id) has no metadata key '\(missing)'", path: path)
            }
            let s = try db.prepare("UPDATE tracks SET title = ?2, artist = ?3, album = ?4, metadata = ?5 WHERE id = ?1")
            s.bind(1, id)
            s.bind(2, title ?? t.title)
            s.bind(3, artist ?? t.artist)
            s.bind(4, album ?? t.album)
            var meta = metadata.map { t.metadata.merging($0) { _, new in new } } ?? t.metadata
            for key in removingKeys { meta[key] = nil }
            s.bind(5, String(decoding: try JSONEncoder().encode(meta), as: UTF8.self))
            try s.run()
            return try track(id: id)!
        }
    }

    /// Copies every track of `source` (same signature algorithm) into this catalog: its postings, stored peaks,
    /// analyses, descriptions and source file. Tracks get new ids here (the result maps them); a track whose
    /// content hash is already here is not copied (`.duplicate`, with the track it duplicates). Each track is
    /// its own transaction, as with ``add(_:landmarks:peaks:analyses:)``. The source's hash index is read
    /// once per batch of tracks holding up to `batchPostings` postings, which bounds the memory used.
    public func merge(from source: Catalog, batchPostings: Int = 16_000_000,
                      progress: (_ done: Int, _ total: Int, _ sourceTrack: Track, _ result: AddResult) -> Void = { _, _, _, _ in })
        throws -> [(source: Track, result: AddResult)] {
        guard source.configuration.version == configuration.version else {
            throw CatalogError(.versionMismatch, "cannot merge a catalog of signature algorithm \(source.configuration.version) into one of \(configuration.version)", path: source.path)
        }
        let tracks = try source.tracks()
        var out: [(source: Track, result: AddResult)] = []
        var start = 0
        while start < tracks.count {
            var end = start, budget = 0
            while end < tracks.count, end == start || budget + tracks[end].landmarkCount <= batchPostings {
                budget += tracks[end].landmarkCount
                end += 1
            }
            let batch = tracks[start..<end]
            let wanted = Set(batch.map(\.id))
            var landmarks: [Int64: [Landmark]] = [:]
            let scan = try source.db.prepare("SELECT bucket, data FROM postings ORDER BY bucket")
            while try scan.step() {
                let bucket = UInt32(truncatingIfNeeded: scan.int64(0))
                let whole = scan.withBlob(1) { raw in
                    Catalog.decodePostings(bucket: bucket, raw) { hash, track, frame in
                        if wanted.contains(track) { landmarks[track, default: []].append(Landmark(hash: hash, frame: frame)) }
                    }
                }
                guard whole else { throw source.damaged("the hash index's bucket \(bucket) is cut short") }
            }
            for t in batch {
                let peaks = try source.peaks(trackID: t.id).map { Peak(frame: $0.frame, bin: $0.bin, rank: 0, level: 0) }
                let stamp = try source.db.cached("SELECT source_size, source_mtime FROM tracks WHERE id = ?1")
                stamp.bind(1, t.id)
                let hasStamp = try stamp.step() && !stamp.isNull(0)
                let new = NewTrack(title: t.title, artist: t.artist, album: t.album, metadata: t.metadata, duration: t.duration,
                                   sourcePath: t.sourcePath, sourceSize: hasStamp ? stamp.int64(0) : nil,
                                   sourceModified: hasStamp && !stamp.isNull(1) ? stamp.double(1) : nil, contentHash: t.contentHash)
                stamp.reset()
                let result = try add(new, landmarks: landmarks.removeValue(forKey: t.id) ?? [], peaks: peaks,
                                     analyses: try source.analyses(trackID: t.id))
                out.append((t, result))
                progress(out.count, tracks.count, t, result)
            }
            start = end
        }
        return out
    }

    /// Points a track at the file it now lives in (the same audio, moved or renamed), so that the next
    /// add of that file finds it unchanged instead of decoding it again.
    public func relink(id: Int64, sourcePath: String, size: Int64?, modified: Double?) throws -> Track {
        try db.writeTransaction {
            let s = try db.prepare("UPDATE tracks SET source_path = ?2, source_size = ?3, source_mtime = ?4 WHERE id = ?1")
            s.bind(1, id)
            s.bind(2, sourcePath)
            if let size { s.bind(3, size) }
            if let modified { s.bind(4, modified) }
            try s.run()
            guard db.changes == 1, let t = try track(id: id) else { throw CatalogError(.noSuchTrack, "no track with id \(id)", path: path) }
            return t
        }
    }

    /// Removes tracks and all their postings in one transaction; throws ``CatalogError/Code/noSuchTrack``
    /// (removing nothing) when any id is unknown.
    public func remove(ids: [Int64]) throws {
        let doomed = Set(ids)
        guard !doomed.isEmpty else { return }
        try db.writeTransaction {
            for id in doomed where try track(id: id) == nil {
                throw CatalogError(.noSuchTrack, "no track with id \(id)", path: path)
            }
            memoryIndex?.stale = true
            let scan = try db.prepare("SELECT bucket, data FROM postings")
            let update = try db.prepare("UPDATE postings SET data = ?2 WHERE bucket = ?1")
            let delete = try db.prepare("DELETE FROM postings WHERE bucket = ?1")
            var changed: [(Int64, [UInt8])] = []
            while try scan.step() {
                let bucket = scan.int64(0)
                scan.withBlob(1) { raw in
                    var kept: [UInt8] = []
                    var removedAny = false
                    var r = VarintReader(raw)
                    while let track = r.next(), let value = r.next() {
                        if doomed.contains(Int64(track)) { removedAny = true; continue }
                        Varint.append(track, to: &kept)
                        Varint.append(value, to: &kept)
                    }
                    if removedAny { changed.append((bucket, kept)) }
                }
            }
            for (bucket, kept) in changed {
                if kept.isEmpty {
                    delete.bind(1, bucket)
                    try delete.run()
                } else {
                    update.bind(1, bucket)
                    kept.withUnsafeBytes { update.bind(2, blob: $0) }
                    try update.run()
                }
            }
            let d = try db.prepare("DELETE FROM tracks WHERE id = ?1")
            let dp = try db.prepare("DELETE FROM track_peaks WHERE track_id = ?1")
            let da = try db.prepare("DELETE FROM track_analysis WHERE track_id = ?1")
            for id in doomed {
                d.bind(1, id)
                try d.run()
                dp.bind(1, id)
                try dp.run()
                da.bind(1, id)
                try da.run()
            }
        }
    }

    // MARK: Analysis

    private func storeAnalysis(_ a: TrackAnalysis, trackID: Int64) throws {
        let s = try db.prepare("INSERT OR REPLACE INTO track_analysis(track_id, kind, version, data) VALUES (?1, ?2, ?3, ?4)")
        s.bind(1, trackID)
        s.bind(2, a.kind)
        s.bind(3, Int64(a.version))
        s.bind(4, String(decoding: a.json, as: UTF8.self))
        try s.run()
    }

    /// Stores (or replaces) one analysis result of a track.
    public func setAnalysis(_ a: TrackAnalysis, trackID: Int64) throws {
        try db.writeTransaction {
            guard try track(id: trackID) != nil else { throw CatalogError(.noSuchTrack, "no track \(trackID)", path: path) }
            try storeAnalysis(a, trackID: trackID)
        }
    }

    /// The analysis results stored for a track, by kind (empty for a catalog made before they existed).
    public func analyses(trackID: Int64) throws -> [TrackAnalysis] {
        guard schemaOnDisk >= 2 else { return [] }
        let s = try db.prepare("SELECT kind, version, data FROM track_analysis WHERE track_id = ?1 ORDER BY kind")
        s.bind(1, trackID)
        var out: [TrackAnalysis] = []
        while try s.step() {
            out.append(TrackAnalysis(kind: s.string(0) ?? "", version: Int(s.int64(1)), json: Data((s.string(2) ?? "null").utf8)))
        }
        return out
    }

    // MARK: Lookup

    /// Calls `body(hash, trackID, frame)` for every stored posting in the buckets of `hashes`
    /// (hashes sharing their top 18 bits); the caller filters the exact hash.
    public func lookup(hashes: [UInt32], _ body: (UInt32, Int64, UInt32) -> Void) throws {
        guard !hashes.isEmpty else { return }
        var buckets = hashes.map { $0 >> Catalog.lowBits }
        buckets.sort()
        if let index = try currentMemoryIndex() {
            try index.data.withUnsafeBytes { data in
                var last = UInt32.max
                for b in buckets where b != last {
                    last = b
                    guard Int(b) + 1 < index.offsets.count else { continue }
                    let lo = Int(index.offsets[Int(b)]), hi = Int(index.offsets[Int(b) + 1])
                    guard hi > lo else { continue }
                    guard Catalog.decodePostings(bucket: b, UnsafeRawBufferPointer(rebasing: data[lo..<hi]), body) else {
                        throw damaged("the hash index's bucket \(b) is cut short")
                    }
                }
            }
            return
        }
        let s = try db.cached("SELECT bucket, data FROM postings WHERE bucket IN (SELECT value FROM json_each(?1))")
        var json = ""
        json.reserveCapacity(buckets.count * 8)
        var start = 0
        while start < buckets.count {
            json = "["
            var n = 0
            var last = UInt32.max
            while start < buckets.count, n < 4000 {
                let b = buckets[start]
                start += 1
                if b == last { continue }
                if n > 0 { json += "," }
                json += String(b)
                last = b
                n += 1
            }
            json += "]"
            s.reset()
            s.bind(1, json)
            defer { s.reset() }
            while try s.step() {
                let bucket = UInt32(truncatingIfNeeded: s.int64(0))
                guard s.withBlob(1, { Catalog.decodePostings(bucket: bucket, $0, body) }) else {
                    throw damaged("the hash index's bucket \(bucket) is cut short")
                }
            }
        }
    }

    /// Calls `body` for each posting of one bucket's blob; false when the blob ends inside a posting.
    /// Stored values are taken modulo their field's width, so damaged bytes can name a track or frame that
    /// does not exist but cannot trap; the caller finds no such track.
    @inline(__always)
    private static func decodePostings(bucket: UInt32, _ raw: UnsafeRawBufferPointer, _ body: (UInt32, Int64, UInt32) -> Void) -> Bool {
        var r = VarintReader(raw)
        while r.offset < raw.count {
            guard let track = r.next(), let value = r.next() else { return false }
            body(bucket << Catalog.lowBits | UInt32(value & 7), Int64(truncatingIfNeeded: track), UInt32(truncatingIfNeeded: value >> 3))
        }
        return true
    }

    /// The error for stored data that cannot be what this build wrote.
    func damaged(_ what: String) -> CatalogError {
        CatalogError(.damaged, "damaged catalog: \(what); run `earmark catalog check`", path: path)
    }

    /// Copies the hash index into memory, so ``lookup(hashes:_:)`` reads no pages: worth it when one
    /// connection answers many queries (batch matching, live sessions). The copy costs about as much
    /// memory as the index takes on disk (about 1 MB per hour of audio); catalogs whose file is larger
    /// than `maximumBytes` are left on disk and false is returned. Writes through this connection and
    /// commits by other connections (seen through `PRAGMA data_version`) make the next lookup reload it.
    @discardableResult
    public func preloadIndex(maximumBytes: Int = 512 << 20) throws -> Bool {
        let bytes = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? Int.max
        guard bytes <= maximumBytes else {
            memoryIndex = nil
            return false
        }
        let version = try dataVersion()
        let count = Catalog.bucketCount
        var offsets = [UInt32](repeating: 0, count: count + 1)
        var data: [UInt8] = []
        data.reserveCapacity(bytes)
        let s = try db.prepare("SELECT bucket, data FROM postings ORDER BY bucket")
        var next = 0
        while try s.step() {
            let bucket = Int(s.int64(0))
            guard bucket >= 0, bucket < count, bucket >= next else {
                throw CatalogError(.damaged, "hash index holds an invalid bucket \(bucket)", path: path)
            }
            while next <= bucket { offsets[next] = UInt32(data.count); next += 1 }
            s.withBlob(1) { data.append(contentsOf: $0) }
            guard data.count < Int(UInt32.max) else { memoryIndex = nil; return false }
        }
        while next <= count { offsets[next] = UInt32(data.count); next += 1 }
        memoryIndex = MemoryIndex(offsets: offsets, data: data, dataVersion: version, maximumBytes: maximumBytes)
        return true
    }

    /// The in-memory index, reloaded when stale; nil when none was preloaded.
    private func currentMemoryIndex() throws -> MemoryIndex? {
        guard let index = memoryIndex else { return nil }
        let version = try dataVersion()
        if index.stale || version != index.dataVersion {
            memoryIndex = nil
            guard try preloadIndex(maximumBytes: index.maximumBytes) else { return nil }
        }
        return memoryIndex
    }

    /// Changes whenever another connection commits to the file.
    private func dataVersion() throws -> Int64 {
        let s = try db.cached("PRAGMA data_version")
        defer { s.reset() }
        return try s.step() ? s.int64(0) : 0
    }

    /// Peak constellation blob: per peak of rank below ``SignatureConfiguration/queryRankLimit`` (the
    /// deep-pass peaks of a signature are never verified against), varint(frame − previous frame) and
    /// one byte (bin − minBin).
    static func encodePeaks(_ peaks: [Peak], configuration: SignatureConfiguration) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(peaks.count * 2 + 16)
        var last: UInt32 = 0
        for p in peaks where Int(p.rank) < configuration.queryRankLimit {
            Varint.append(UInt64(p.frame - last), to: &out)
            out.append(UInt8(clamping: Int(p.bin) - configuration.minBin))
            last = p.frame
        }
        return out
    }

    /// The stored peaks of a track as (frame, bin), ordered by frame; empty when unknown. Throws
    /// ``CatalogError/Code/damaged`` for a blob this build cannot have written.
    public func peaks(trackID: Int64) throws -> [(frame: UInt32, bin: UInt16)] {
        let s = try db.cached("SELECT p.data, t.duration FROM track_peaks p JOIN tracks t ON t.id = p.track_id WHERE p.track_id = ?1")
        defer { s.reset() }
        s.bind(1, trackID)
        guard try s.step() else { return [] }
        let lastFrame = lastStoredFrame(duration: s.double(1))
        return try s.withBlob(0) { raw in
            guard let peaks = Catalog.decodePeaks(raw, lastFrame: lastFrame, configuration: configuration) else {
                throw damaged("track \(trackID)'s stored peaks are invalid")
            }
            return peaks
        }
    }

    /// The last frame a stored peak or posting of a track of `duration` s can have (a damaged duration is clamped).
    private func lastStoredFrame(duration: Double) -> Int {
        configuration.lastFrame(duration: min(max(0, duration), Signature.maximumDuration))
    }

    /// Decodes a peak blob (see ``encodePeaks(_:configuration:)``); nil unless it ends on a whole peak, every
    /// bin lies in the band and every frame at or before `lastFrame`.
    static func decodePeaks(_ raw: UnsafeRawBufferPointer, lastFrame: Int, configuration: SignatureConfiguration)
        -> [(frame: UInt32, bin: UInt16)]? {
        var out: [(frame: UInt32, bin: UInt16)] = []
        out.reserveCapacity(raw.count / 2)
        let band = configuration.maxBin - configuration.minBin
        var r = VarintReader(raw)
        var frame = 0
        while r.offset < raw.count {
            guard let d = r.next(), r.offset < raw.count, d <= UInt64(lastFrame - frame) else { return nil }
            frame += Int(d)
            let b = Int(raw[r.offset])
            guard b < band else { return nil }
            out.append((UInt32(frame), UInt16(b + configuration.minBin)))
            r.offset += 1
        }
        return out
    }

    // MARK: Stats and export

    /// Totals of the catalog.
    public func stats() throws -> CatalogStats {
        let s = try db.prepare("SELECT count(*), coalesce(sum(duration), 0), coalesce(sum(landmark_count), 0) FROM tracks")
        _ = try s.step()
        let pages = try scalarInt("PRAGMA page_count"), pageSize = try scalarInt("PRAGMA page_size")
        let free = try scalarInt("PRAGMA freelist_count")
        let bytes = Int64((pages - free) * pageSize)
        let hours = s.double(1) / 3600
        return CatalogStats(path: path, schemaVersion: try scalarInt("PRAGMA user_version"),
                            signatureVersion: Int(configuration.version), trackCount: Int(s.int64(0)),
                            totalDuration: s.double(1), landmarkCount: Int(s.int64(2)), fileBytes: bytes,
                            bytesPerHour: hours > 0 ? Double(bytes) / hours : 0)
    }

    /// Writes a compact, self-contained copy of the catalog to `destination` (which must not exist).
    public func export(to destination: String) throws {
        guard !FileManager.default.fileExists(atPath: destination) else {
            throw CatalogError(.invalidArgument, "\(destination) already exists", path: path)
        }
        let s = try db.prepare("VACUUM INTO ?1")
        s.bind(1, destination)
        try s.run()
    }

    /// Rewrites the file without free pages (after large removals or many adds).
    public func compact() throws {
        try db.execute("VACUUM")
    }

    /// Runs SQLite's integrity check, then checks what SQLite sees as opaque bytes: every track's stored
    /// peaks and every posting of the hash index decode, name existing tracks and frames within their
    /// duration, and each track's postings add up to its landmark count. Returns the problems found
    /// (empty when healthy; at most about 100).
    public func check() throws -> [String] {
        var out: [String] = []
        do {
            let s = try db.prepare("PRAGMA integrity_check")
            while try s.step() { if let m = s.string(0), m != "ok" { out.append(m) } }
        } catch let e as CatalogError where e.code == .damaged {
            // So damaged that SQLite's own check cannot finish: that is the finding.
            return [e.message]
        }
        guard out.isEmpty else { return out }
        let limit = 100
        func problem(_ text: String) { if out.count < limit { out.append(text) } }

        var lastFrames: [Int64: Int] = [:], landmarkCounts: [Int64: Int] = [:]
        let t = try db.prepare("SELECT id, duration, landmark_count FROM tracks")
        while try t.step() {
            let duration = t.double(1)
            if !(duration >= 0 && duration <= Signature.maximumDuration) { problem("track \(t.int64(0)): invalid duration \(duration)") }
            lastFrames[t.int64(0)] = lastStoredFrame(duration: duration)
            landmarkCounts[t.int64(0)] = Int(t.int64(2))
        }
        var withPeaks = Set<Int64>()
        let p = try db.prepare("SELECT track_id, data FROM track_peaks")
        while try p.step() {
            let id = p.int64(0)
            withPeaks.insert(id)
            guard let last = lastFrames[id] else { problem("stored peaks of track \(id), which does not exist"); continue }
            if p.withBlob(1, { Catalog.decodePeaks($0, lastFrame: last, configuration: configuration) }) == nil {
                problem("track \(id): stored peaks are invalid (cut short, a bin outside the band or a frame past its end)")
            }
        }
        for id in lastFrames.keys.sorted() where !withPeaks.contains(id) { problem("track \(id) has no stored peaks") }

        var postings: [Int64: Int] = [:]
        var badTracks = Set<Int64>(), lateFrames = Set<Int64>()
        let q = try db.prepare("SELECT bucket, data FROM postings")
        while try q.step() {
            let bucket = q.int64(0)
            guard bucket >= 0, bucket < Catalog.bucketCount else { problem("hash index: invalid bucket \(bucket)"); continue }
            let whole = q.withBlob(1) { raw in
                Catalog.decodePostings(bucket: UInt32(bucket), raw) { _, track, frame in
                    guard let last = lastFrames[track] else { badTracks.insert(track); return }
                    postings[track, default: 0] += 1
                    if Int(frame) > last { lateFrames.insert(track) }
                }
            }
            if !whole { problem("hash index: bucket \(bucket) is cut short") }
        }
        for id in badTracks.sorted() { problem("hash index: postings of track \(id), which does not exist") }
        for id in lateFrames.sorted() { problem("hash index: postings of track \(id) past the track's end") }
        for (id, count) in landmarkCounts.sorted(by: { $0.key < $1.key }) where postings[id, default: 0] != count {
            problem("track \(id): \(postings[id, default: 0]) postings in the hash index, \(count) recorded")
        }
        return out
    }
}

enum Varint {
    @inline(__always)
    static func append(_ value: UInt64, to out: inout [UInt8]) {
        var v = value
        while v >= 0x80 {
            out.append(UInt8(v & 0x7F) | 0x80)
            v >>= 7
        }
        out.append(UInt8(v))
    }
}

struct VarintReader {
    let raw: UnsafeRawBufferPointer
    var offset = 0
    init(_ raw: UnsafeRawBufferPointer) { self.raw = raw }
    @inline(__always)
    mutating func next() -> UInt64? {
        var v: UInt64 = 0
        var shift: UInt64 = 0
        while offset < raw.count {
            let b = raw[offset]
            offset += 1
            v |= UInt64(b & 0x7F) << shift
            if b < 0x80 { return v }
            shift += 7
            if shift > 63 { return nil }
        }
        return nil
    }
}
