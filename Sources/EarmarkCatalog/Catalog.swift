import CSQLite3
import EarmarkSignature
import Foundation

/// A custom catalog of reference tracks: one SQLite file (WAL mode) with the tracks, their peak
/// constellations and analyses, and, once it holds more than ``inFilePostings`` landmarks (about 7 hours
/// of audio), beside it the hash index: a folder of immutable segment files (`NAME.earcat-index/`, see
/// ``PostingIndex``).
///
/// Adding a track writes it and its landmarks (as a pending row) in one SQLite transaction. Pending
/// landmarks move into a new index segment when a writer flushes (``flushIndex()``): when it has added
/// ``flushPostings`` of them, and when it closes with more than ``inFilePostings`` pending. So a small
/// catalog is one file, and a writer that stops early loses nothing: the next flush picks its pending
/// rows up. Readers see pending tracks through the pending rows, which they hold in memory.
///
/// An instance owns one connection and is not thread-safe; open one per task. Several processes
/// may use one file: readers never block, writers wait for the lock up to `busyTimeout`.
public final class Catalog: CatalogStore {
    /// The schema version this build writes; older catalogs are migrated when opened for writing.
    public static let schemaVersion = 3
    /// The layout version of the hash index's segment files (their magic is `EARMKIX` and this digit).
    public static let indexFormat = 2
    /// `PRAGMA application_id` of Earmark catalogs ("ERMK").
    static let applicationID: Int32 = 0x4552_4D4B

    /// Whether `header`, the first bytes of a file (at least 72 of them), is the header of an Earmark catalog:
    /// an SQLite database with Earmark's application id. It tells a catalog from other files without opening
    /// them; whether the rest of the file is whole is for ``check()`` to say.
    public static func hasCatalogHeader(_ header: [UInt8]) -> Bool {
        // SQLite's file header: the magic string, and at offset 68 the application id, big-endian.
        guard header.count >= 72, header.starts(with: Array("SQLite format 3\u{0}".utf8)) else { return false }
        let id = header[68..<72].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        return id == UInt32(bitPattern: applicationID)
    }

    /// Pending postings that make a writer flush them into a segment (and the size of the batches
    /// ``flushIndex()``, ``export(to:)`` and migration work in). Default 16 million (about 200 MB of memory).
    public var flushPostings = 16_000_000
    /// Pending postings a catalog keeps in its file when a writer closes (see ``close()``): below this, a catalog
    /// is one file and readers load its whole index from it (about 50 ms). Default 1 million (about 7 h of audio).
    public var inFilePostings = 1_000_000

    public let path: String
    public var location: String { path }
    /// The signature algorithm of the catalog: the one asked for, or, when the default was asked for, whichever
    /// released version the catalog was built with.
    public private(set) var configuration: SignatureConfiguration
    private let db: SQLiteConnection
    /// Schema version of the file as opened (an older catalog opened read-only is not migrated).
    private var schemaOnDisk = Catalog.schemaVersion
    private let busyTimeout: Double
    private let readOnly: Bool
    /// The segment index, opened at the first lookup or write.
    private var segmentIndex: PostingIndex?

    /// Bytes of the hash index this connection maps at most; lookups past it read with `pread` (docs/catalog.md).
    /// nil: no bound. Default `EARMARK_INDEX_MEMORY_MB`, else nil. A process that makes a few queries and exits
    /// is faster bounded: each first touch of a mapped page costs a fault that maps its whole 64-KB window,
    /// which only queries to come would repay.
    public var indexMemoryLimit: Int? = PostingIndex.defaultResidentBudget == .max ? nil : PostingIndex.defaultResidentBudget {
        didSet { segmentIndex?.residentBudget = indexMemoryLimit ?? .max }
    }

    /// Bytes of the index this connection has mapped so far (in 64-KB windows).
    var indexMappedBytes: Int { segmentIndex?.segments.reduce(0) { $0 + $1.residentBytes } ?? 0 }
    /// Postings this connection added and has not flushed.
    private var unflushed = 0
    /// Pending rows (tracks added but not yet in a segment) held in memory for lookups, sorted by key,
    /// as of the SQLite data version `version`.
    private var pendingOverlay: (postings: [Posting], version: Int64, tracks: Int)?
    /// ``trackCount()``'s answer and the data version it was counted at.
    private var countedTracks: (count: Int, version: Int64)?

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
        self.readOnly = readOnly
        if let scheme = Catalog.urlScheme(path) {
            throw CatalogError(.invalidArgument, "a \(scheme):// URL; a catalog is a file path or a postgres:// URL", path: path)
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

    /// The scheme of a location that is a URL (`postgres` for `postgres://host/db`); nil for a file path.
    public static func urlScheme(_ path: String) -> String? {
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
            // Before the first table: lets a flush give back the pages its pending rows held (see flushIndex).
            try db.execute("PRAGMA auto_vacuum=INCREMENTAL")
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
            if !readOnly { try migrate(from: version) } else if version < 3 {
                throw CatalogError(.versionMismatch,
                                   "catalog schema \(version) keeps its hash index inside the file; this build keeps it in segment files beside it. Convert it once with `earmark catalog migrate`",
                                   path: path)
            }
        }
        schemaOnDisk = readOnly ? version : Catalog.schemaVersion
        try setPragmas()
        let sigVersion = try info("signature_version").flatMap(Int.init) ?? -1
        if sigVersion != Int(configuration.version), configuration == .current,
           let released = UInt16(exactly: sigVersion).flatMap(SignatureConfiguration.released(version:)) {
            configuration = released
        }
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
            // The hash index moves to segment files beside the catalog (written by migrateIndexOutOfFile);
            // landmarks of tracks not yet in a segment wait in pending_postings.
            (3, """
            CREATE TABLE pending_postings(track_id INTEGER PRIMARY KEY, data BLOB NOT NULL);
            """),
        ]
        try setPragmas()
        for (target, sql) in migrations where target > version {
            try db.writeTransaction {
                // Another process may have migrated while this one waited for the write lock.
                guard try scalarInt("PRAGMA user_version") < target else { return }
                try db.execute(sql)
                if target == 3 { try migrateIndexOutOfFile(fresh: version == 0) }
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

    public typealias AddResult = CatalogAddResult

    /// Adds a track, its reference landmarks, its peak constellation (used to verify candidate
    /// matches) and its analysis results in one transaction. Identical audio (same content hash) is a no-op that returns the existing track.
    /// Throws ``CatalogError/Code/invalidArgument`` (writing nothing) for data that no signature of the track's
    /// duration can hold: ``check()`` would report it as damage.
    public func add(_ new: NewTrack, landmarks: [Landmark], peaks: [Peak], analyses: [TrackAnalysis]) throws -> AddResult {
        try validateAddition(new, landmarks: landmarks, peaks: peaks)
        let metaJSON = String(decoding: try JSONEncoder().encode(new.metadata), as: UTF8.self)
        let result: AddResult = try db.writeTransaction {
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
            let pp = try db.cached("INSERT INTO pending_postings(track_id, data) VALUES (?1, ?2)")
            pp.bind(1, id)
            Catalog.encodeLandmarks(unique).withUnsafeBytes { pp.bind(2, blob: $0) }
            try pp.run()
            let pk = try db.prepare("INSERT INTO track_peaks(track_id, data) VALUES (?1, ?2)")
            pk.bind(1, id)
            Catalog.encodePeaks(peaks, configuration: configuration).withUnsafeBytes { pk.bind(2, blob: $0) }
            try pk.run()
            for a in analyses { try storeAnalysis(a, trackID: id) }
            guard let t = try track(id: id) else { throw CatalogError(.ioError, "track vanished", path: path) }
            return .added(t)
        }
        if case .added(let t) = result {
            pendingOverlay = nil
            countedTracks = nil
            unflushed += t.landmarkCount + 1
            if unflushed >= flushPostings { try flushIndex() }
        }
        return result
    }

    package static func uniqueSorted(_ landmarks: [Landmark]) -> [Landmark] {
        var sorted = landmarks.sorted { ($0.hash, $0.frame) < ($1.hash, $1.frame) }
        var w = 0
        for i in sorted.indices where i == 0 || sorted[i] != sorted[w - 1] {
            sorted[w] = sorted[i]
            w += 1
        }
        sorted.removeLast(sorted.count - w)
        return sorted
    }

    /// A pending row's blob: the landmarks sorted by (hash, frame), each as varint(hash − previous hash) and
    /// varint(frame).
    package static func encodeLandmarks(_ sorted: [Landmark]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(sorted.count * 4)
        var last: UInt32 = 0
        for l in sorted {
            Varint.append(UInt64(l.hash &- last), to: &out)
            Varint.append(UInt64(l.frame), to: &out)
            last = l.hash
        }
        return out
    }

    /// Decodes a pending row's blob; nil unless it ends on a whole landmark, hashes ascend within the hash width
    /// and every frame is at or before `lastFrame`.
    package static func decodeLandmarks(_ raw: UnsafeRawBufferPointer, lastFrame: Int, hashBits: Int, _ body: (UInt32, UInt32) -> Void) -> Bool {
        var r = VarintReader(raw)
        var hash: UInt64 = 0
        while r.offset < raw.count {
            guard let d = r.next(), let frame = r.next(), frame <= UInt64(max(0, lastFrame)) else { return false }
            // A damaged delta can be any 64-bit number: the sum must not wrap (fuzz-catalog found it trapping).
            let (sum, overflow) = hash.addingReportingOverflow(d)
            guard !overflow, sum < 1 << UInt64(hashBits) else { return false }
            hash = sum
            body(UInt32(hash), UInt32(frame))
        }
        return true
    }

    public func update(id: Int64, _ change: TrackChange) throws -> Track {
        try db.writeTransaction {
            guard let t = try track(id: id) else { throw CatalogError(.noSuchTrack, "no track with id \(id)", path: path) }
            if let missing = change.removingKeys.sorted().first(where: { t.metadata[$0] == nil }) {
                throw CatalogError(.invalidArgument, "track \(id) has no metadata key '\(missing)'", path: path)
            }
            let s = try db.prepare("UPDATE tracks SET title = ?2, artist = ?3, album = ?4, metadata = ?5 WHERE id = ?1")
            s.bind(1, id)
            s.bind(2, change.title ?? t.title)
            s.bind(3, change.artist ?? t.artist)
            s.bind(4, change.album ?? t.album)
            var meta = change.metadata.map { t.metadata.merging($0) { _, new in new } } ?? t.metadata
            for key in change.removingKeys { meta[key] = nil }
            s.bind(5, String(decoding: try JSONEncoder().encode(meta), as: UTF8.self))
            try s.run()
            return try track(id: id)!
        }
    }

    public func sourceStamp(trackID: Int64) throws -> SourceStamp? {
        let s = try db.cached("SELECT source_size, source_mtime FROM tracks WHERE id = ?1")
        defer { s.reset() }
        s.bind(1, trackID)
        guard try s.step(), !s.isNull(0) else { return nil }
        return SourceStamp(size: s.int64(0), modified: s.isNull(1) ? nil : s.double(1))
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
    /// (removing nothing) when any id is unknown. Postings already in index segments are skipped by lookups
    /// from then on and dropped when their segment is next merged (``compact()`` merges them all).
    public func remove(ids: [Int64]) throws {
        let doomed = Set(ids)
        guard !doomed.isEmpty else { return }
        try db.writeTransaction {
            for id in doomed where try track(id: id) == nil {
                throw CatalogError(.noSuchTrack, "no track with id \(id)", path: path)
            }
            for table in ["tracks WHERE id", "track_peaks WHERE track_id", "track_analysis WHERE track_id", "pending_postings WHERE track_id"] {
                let d = try db.prepare("DELETE FROM \(table) = ?1")
                for id in doomed {
                    d.bind(1, id)
                    try d.run()
                }
            }
        }
        pendingOverlay = nil
        countedTracks = nil
        // Once the tracks are gone from the file, postings left in a segment name tracks that do not exist, which the
        // matcher drops when it fetches its candidates; the removed list keeps them out of the candidates at all
        // (a stop before it is written loses nothing, and the next merge drops those postings either way).
        let index = try self.index()
        let covered = doomed.compactMap { UInt32(exactly: $0) }.filter(index.covers)
        guard !covered.isEmpty else { return }
        try index.acquireLock(timeout: busyTimeout)
        defer { index.releaseLock() }
        try index.markRemoved(covered)
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

    // MARK: Hash index

    /// The landmark design this catalog's index keys come from; an index of another design is refused.
    var keyDesign: String { configuration.keyDesign }

    /// The segment index, opened (and its manifest re-read when another process changed it). A connection
    /// that can write first indexes pending rows that no writer is about to flush (a writer that stopped
    /// early); any connection refuses an index that lacks tracks the file holds.
    private func index() throws -> PostingIndex {
        if let i = segmentIndex {
            try i.refresh()
            return i
        }
        guard let id = try info("index_id") else { throw damaged("the catalog has no index id") }
        let i = try openIndex(folder: PostingIndex.folder(forCatalog: path), id: id)
        i.residentBudget = indexMemoryLimit ?? .max
        segmentIndex = i
        let total = try scalarInt("SELECT count(*) FROM tracks")
        let pending = try scalarInt("SELECT count(*) FROM pending_postings")
        var covered = 0
        for r in i.manifest.covered where r.count == 2 {
            covered += try scalarInt("SELECT count(*) FROM tracks WHERE id BETWEEN \(r[0]) AND \(r[1])")
        }
        if total - covered > pending {
            throw CatalogError(.damaged, "the hash index \(URL(fileURLWithPath: i.folder).lastPathComponent) lacks \(total - covered - pending) of the catalog's \(total) tracks (deleted, or from another copy of the catalog): restore it beside the catalog file, or rebuild the catalog; `earmark catalog check` lists them", path: path)
        }
        return i
    }

    /// Moves the landmarks of tracks added but not yet indexed (pending rows: this connection's, another's, or
    /// those of a writer that stopped early) into new index segments, then merges segments of similar size.
    /// ``add(_:landmarks:peaks:analyses:)`` calls it every ``flushPostings`` postings and ``close()`` with
    /// `ifLargerThanFile`: then only when more than ``inFilePostings`` landmarks are pending.
    public func flushIndex(ifLargerThanFile: Bool = false) throws {
        guard !readOnly else { return }
        if ifLargerThanFile {
            let pending = try scalarInt("SELECT coalesce(sum(t.landmark_count), 0) FROM pending_postings p JOIN tracks t ON t.id = p.track_id")
            guard pending > inFilePostings else { return }
        }
        let index = try self.index()
        try index.acquireLock(timeout: busyTimeout)
        defer { index.releaseLock() }
        let live = try liveTracks()
        let select = try db.prepare("""
            SELECT p.track_id, p.data, t.duration FROM pending_postings p LEFT JOIN tracks t ON t.id = p.track_id
            WHERE p.track_id > ?1 ORDER BY p.track_id
            """)
        var after: Int64 = 0
        while true {
            // One batch of rows, ending at a track boundary.
            var postings: [Posting] = []
            var ids: [UInt32] = []
            var last: Int64 = after
            select.bind(1, after)
            while postings.count < flushPostings, try select.step() {
                let id = select.int64(0)
                last = id
                guard let tid = try decodePendingRow(select, index, { postings.append(Posting(key: $0, track: $1, frame: $2)) })
                else { continue }
                ids.append(tid)
            }
            select.reset()
            guard last > after else { break }
            try index.addSegment(&postings, tracks: ids, live: { Catalog.contains(live, $0) })
            let delete = try db.prepare("DELETE FROM pending_postings WHERE track_id > ?1 AND track_id <= ?2")
            delete.bind(1, after)
            delete.bind(2, last)
            try db.writeTransaction { try delete.run() }
            after = last
        }
        unflushed = 0
        pendingOverlay = nil
        // The pending rows were most of the file: give their pages back (a no-op in catalogs made before
        // auto_vacuum was set; `catalog compact` converts those).
        try db.execute("PRAGMA incremental_vacuum")
    }

    /// Ends a connection's writing: when more than ``inFilePostings`` landmarks are pending, they move into an
    /// index segment (``flushIndex()``). Errors here lose nothing: the landmarks stay pending in the file, and
    /// the next writer indexes them.
    public func close() throws {
        guard !readOnly, unflushed > 0 else { return }
        unflushed = 0
        try flushIndex(ifLargerThanFile: true)
    }

    deinit { try? close() }

    /// The ids of the catalog's tracks, as a bitmap.
    private func liveTracks() throws -> [UInt64] {
        var bits: [UInt64] = []
        let s = try db.prepare("SELECT id FROM tracks")
        while try s.step() {
            guard let id = UInt32(exactly: s.int64(0)) else { continue }
            let w = Int(id >> 6)
            if w >= bits.count { bits += [UInt64](repeating: 0, count: w + 1 - bits.count) }
            bits[w] |= 1 << UInt64(id & 63)
        }
        return bits
    }

    static func contains(_ bits: [UInt64], _ id: UInt32) -> Bool {
        let w = Int(id >> 6)
        return w < bits.count && bits[w] & (1 << UInt64(id & 63)) != 0
    }

    /// Schema 3: the postings of a schema-2 catalog go into segments (in the migration's transaction, so a
    /// failure leaves the file as it was; the half-built index folder is removed first).
    private func migrateIndexOutOfFile(fresh: Bool) throws {
        let folder = PostingIndex.folder(forCatalog: path)
        PostingIndex.removeFolder(folder)
        let id = UUID().uuidString.lowercased()
        try setInfo("index_id", id)
        guard !fresh else { return }
        if try scalarInt("SELECT coalesce(sum(landmark_count), 0) FROM tracks") <= inFilePostings {
            try migratePostingsToPendingRows()
        } else {
            try migratePostingsToSegments(folder: folder, id: id)
        }
        try db.execute("DROP TABLE postings")
    }

    /// A schema-2 catalog's postings as decoded postings of live tracks, bucket by bucket; `body` may return
    /// false to stop.
    private func scanSchema2Postings(_ body: (Posting) throws -> Void) throws {
        var lastFrames: [Int64: Int] = [:]
        let t = try db.prepare("SELECT id, duration FROM tracks")
        while try t.step() { lastFrames[t.int64(0)] = lastStoredFrame(duration: t.double(1)) }
        let scan = try db.prepare("SELECT bucket, data FROM postings ORDER BY bucket")
        while try scan.step() {
            let bucket = scan.int64(0)
            guard bucket >= 0, bucket < 1 << 18 else { throw damaged("the hash index holds an invalid bucket \(bucket)") }
            var batch: [Posting] = []
            let whole = scan.withBlob(1) { raw -> Bool in
                var r = VarintReader(raw)
                while r.offset < raw.count {
                    guard let track = r.next(), let value = r.next() else { return false }
                    // Postings of tracks that are gone (or damaged ones) are not carried over.
                    guard let last = lastFrames[Int64(truncatingIfNeeded: track)], value >> 3 <= UInt64(last) else { continue }
                    batch.append(Posting(key: UInt32(bucket) << 3 | UInt32(value & 7), track: UInt32(track), frame: UInt32(value >> 3)))
                }
                return true
            }
            guard whole else { throw damaged("the hash index's bucket \(bucket) is cut short") }
            for p in batch { try body(p) }
        }
    }

    private func migratePostingsToPendingRows() throws {
        var byTrack: [UInt32: [Landmark]] = [:]
        try scanSchema2Postings { byTrack[$0.track, default: []].append(Landmark(hash: $0.key, frame: $0.frame)) }
        let ins = try db.prepare("INSERT INTO pending_postings(track_id, data) VALUES (?1, ?2)")
        let ids = try db.prepare("SELECT id FROM tracks")
        while try ids.step() {
            let id = ids.int64(0)
            ins.bind(1, id)
            Catalog.encodeLandmarks(Catalog.uniqueSorted(UInt32(exactly: id).flatMap { byTrack[$0] } ?? [])).withUnsafeBytes { ins.bind(2, blob: $0) }
            try ins.run()
        }
    }

    private func migratePostingsToSegments(folder: String, id: String) throws {
        let index = try openIndex(folder: folder, id: id)
        try index.acquireLock(timeout: busyTimeout)
        defer { index.releaseLock() }
        let live = try liveTracks()
        var ids: [UInt32] = []
        let t = try db.prepare("SELECT id FROM tracks")
        while try t.step() { if let id = UInt32(exactly: t.int64(0)) { ids.append(id) } }
        var postings: [Posting] = []
        try scanSchema2Postings { p in
            postings.append(p)
            if postings.count >= flushPostings {
                try index.addSegment(&postings, tracks: ids, live: { Catalog.contains(live, $0) })
                postings = []
                ids = []
            }
        }
        try index.addSegment(&postings, tracks: ids, live: { Catalog.contains(live, $0) })
    }

    /// Calls `body(i, trackID, frame)` for every posting of each hash `hashes[i]` (distinct hashes): from the
    /// index segments, and from tracks still pending. `commonHashes`: skip a hash with more than this many times
    /// the index's mean postings per hash (and more than 64; each segment judges by its share): so common it says little
    /// about which track is playing, while its postings are most of a lookup's hits. nil: skip none.
    public func lookup(hashes: [UInt32], commonHashes: Double?, _ body: (Int, Int64, UInt32) -> Void) throws {
        guard !hashes.isEmpty else { return }
        let index = try self.index()
        try index.lookup(keys: hashes, commonKeys: commonHashes) { i, track, frame in body(i, Int64(track), frame) }
        PostingIndex.lookup(sorted: try currentPendingOverlay(index), keys: hashes) { i, track, frame in body(i, Int64(track), frame) }
    }

    /// Most pending postings a connection holds in memory for lookups.
    static let pendingOverlayLimit = 64_000_000

    /// The postings of pending rows not yet in a segment, sorted by key; reloaded when the file changed.
    private func currentPendingOverlay(_ index: PostingIndex) throws -> [Posting] {
        let version = try dataVersion()
        if let o = pendingOverlay, o.version == version { return o.postings }
        var postings: [Posting] = []
        let s = try db.prepare("""
            SELECT p.track_id, p.data, t.duration FROM pending_postings p JOIN tracks t ON t.id = p.track_id ORDER BY p.track_id
            """)
        var tracks = 0
        while try s.step() {
            guard try decodePendingRow(s, index, { postings.append(Posting(key: $0, track: $1, frame: $2)) }) != nil else { continue }
            tracks += 1
            guard postings.count <= Catalog.pendingOverlayLimit else {
                throw CatalogError(.invalidArgument, "\(tracks)+ tracks of this catalog are not in its hash index yet (an exported copy?); open it for writing once to index them: `earmark catalog migrate`", path: path)
            }
        }
        PostingIndex.radixSort(&postings) { $0.key }
        pendingOverlay = (postings, version, tracks)
        return postings
    }

    /// The landmarks of the tracks with ids in `ids`, read from the index segments and pending rows.
    public func landmarks(ofTracks ids: Set<Int64>) throws -> [Int64: [Landmark]] {
        var out: [Int64: [Landmark]] = [:]
        guard !ids.isEmpty else { return out }
        let index = try self.index()
        for segment in index.segments {
            try segment.forEach { p in
                let t = Int64(p.track)
                if ids.contains(t), !index.isRemoved(p.track) { out[t, default: []].append(Landmark(hash: p.key, frame: p.frame)) }
            }
        }
        let s = try db.prepare("SELECT p.track_id, p.data, t.duration FROM pending_postings p JOIN tracks t ON t.id = p.track_id")
        while try s.step() {
            guard ids.contains(s.int64(0)) else { continue }
            _ = try decodePendingRow(s, index) { hash, track, frame in out[Int64(track), default: []].append(Landmark(hash: hash, frame: frame)) }
        }
        return out
    }

    /// The hash index in `folder` of the catalog with index id `id`, for this catalog's landmark design.
    private func openIndex(folder: String, id: String) throws -> PostingIndex {
        try PostingIndex(folder: folder, catalogID: id, keys: keyDesign, keyBits: configuration.hashBits)
    }

    /// Decodes the pending row `s` is on (columns: track id, landmarks blob, the track's duration), calling
    /// `body(hash, track, frame)` for each landmark, and returns the track; nil, decoding nothing, when the track
    /// is gone (a null duration) or already in a segment (a row a flush had not deleted yet).
    private func decodePendingRow(_ s: SQLiteStatement, _ index: PostingIndex, _ body: (UInt32, UInt32, UInt32) -> Void) throws -> UInt32? {
        let id = s.int64(0)
        guard let tid = UInt32(exactly: id), !s.isNull(2), !index.covers(tid) else { return nil }
        let lastFrame = lastStoredFrame(duration: s.double(2))
        let whole = s.withBlob(1) { raw in
            Catalog.decodeLandmarks(raw, lastFrame: lastFrame, hashBits: configuration.hashBits) { body($0, tid, $1) }
        }
        guard whole else { throw damaged("track \(id)'s pending landmarks are invalid") }
        return tid
    }

    /// How the hash index is laid out now: segment files, the postings in them, and the postings still pending
    /// in the catalog file.
    public func indexLayout() throws -> (segments: Int, postings: Int, pending: Int) {
        let index = try self.index()
        var pending = 0
        let s = try db.prepare("SELECT p.track_id, t.landmark_count FROM pending_postings p JOIN tracks t ON t.id = p.track_id")
        while try s.step() {
            if !(UInt32(exactly: s.int64(0)).map(index.covers) ?? false) { pending += Int(s.int64(1)) }
        }
        return (index.segments.count, index.postingCount, pending)
    }

    /// The error for stored data that cannot be what this build wrote.
    func damaged(_ what: String) -> CatalogError {
        CatalogError(.damaged, "damaged catalog: \(what); run `earmark catalog check`", path: path)
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
    package static func encodePeaks(_ peaks: [Peak], configuration: SignatureConfiguration) -> [UInt8] {
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
    package static func decodePeaks(_ raw: UnsafeRawBufferPointer, lastFrame: Int, configuration: SignatureConfiguration)
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

    /// The number of tracks, counted again only when the catalog changed (the matcher asks on every query).
    public func trackCount() throws -> Int {
        let version = try dataVersion()
        if let c = countedTracks, c.version == version { return c.count }
        let n = try scalarInt("SELECT count(*) FROM tracks")
        countedTracks = (n, version)
        return n
    }

    /// Totals of the catalog.
    public func stats() throws -> CatalogStats {
        let s = try db.prepare("SELECT count(*), coalesce(sum(duration), 0), coalesce(sum(landmark_count), 0) FROM tracks")
        _ = try s.step()
        let pages = try scalarInt("PRAGMA page_count"), pageSize = try scalarInt("PRAGMA page_size")
        let free = try scalarInt("PRAGMA freelist_count")
        let bytes = Int64((pages - free) * pageSize) + Catalog.folderBytes(PostingIndex.folder(forCatalog: path))
        let hours = s.double(1) / 3600
        return CatalogStats(path: path, schemaVersion: try scalarInt("PRAGMA user_version"),
                            signatureVersion: Int(configuration.version), trackCount: Int(s.int64(0)),
                            totalDuration: s.double(1), landmarkCount: Int(s.int64(2)), fileBytes: bytes,
                            bytesPerHour: hours > 0 ? Double(bytes) / hours : 0)
    }

    /// Bytes of the files in `folder` (0 when there is none).
    static func folderBytes(_ folder: String) -> Int64 {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
        return names.reduce(0) { sum, name in
            sum + Int64((try? FileManager.default.attributesOfItem(atPath: folder + "/" + name)[.size] as? Int) ?? 0)
        }
    }

    /// Writes a compact, self-contained copy of the catalog to `destination` (which must not exist): one SQLite
    /// file in which every track's landmarks are pending rows, so it needs no index folder. The first connection
    /// that opens it for writing indexes them.
    public func export(to destination: String) throws {
        guard !FileManager.default.fileExists(atPath: destination) else {
            throw CatalogError(.invalidArgument, "\(destination) already exists", path: path)
        }
        let s = try db.prepare("VACUUM INTO ?1")
        s.bind(1, destination)
        try s.run()
        do {
            let out = try SQLiteConnection(path: destination, readOnly: false, create: false, busyTimeoutMs: 1000, immutable: false)
            // A fresh index for the copy: it must not adopt this catalog's folder by name.
            try out.execute("UPDATE catalog_info SET value = '\(UUID().uuidString.lowercased())' WHERE key = 'index_id'")
            // Tracks in batches of about `flushPostings` landmarks, each batch one read of the segments.
            var batch: [Int64] = []
            var budget = 0
            func write() throws {
                let landmarks = try self.landmarks(ofTracks: Set(batch))
                try out.writeTransaction {
                    let ins = try out.prepare("INSERT OR REPLACE INTO pending_postings(track_id, data) VALUES (?1, ?2)")
                    for id in batch {
                        ins.bind(1, id)
                        Catalog.encodeLandmarks(Catalog.uniqueSorted(landmarks[id] ?? [])).withUnsafeBytes { ins.bind(2, blob: $0) }
                        try ins.run()
                    }
                }
                batch = []
                budget = 0
            }
            let t = try db.prepare("SELECT id, landmark_count FROM tracks ORDER BY id")
            while try t.step() {
                batch.append(t.int64(0))
                budget += Int(t.int64(1))
                if budget >= flushPostings { try write() }
            }
            if !batch.isEmpty { try write() }
        } catch {
            for suffix in ["", "-wal", "-shm"] { unlink(destination + suffix) }
            throw error
        }
    }

    /// Writes every track of `source` into a new catalog file at `destination` (which must not exist), all of them
    /// as pending rows, so that the file needs no index folder: an export of a catalog that another store keeps.
    /// A failure removes the file.
    public static func create(copyOf source: any CatalogStore, at destination: String) throws {
        guard !FileManager.default.fileExists(atPath: destination) else {
            throw CatalogError(.invalidArgument, "\(destination) already exists", path: source.location)
        }
        do {
            let out = try Catalog(path: destination, create: true, configuration: source.configuration)
            out.flushPostings = .max
            out.inFilePostings = .max
            _ = try out.merge(from: source)
        } catch {
            for suffix in ["", "-wal", "-shm"] { unlink(destination + suffix) }
            PostingIndex.removeFolder(PostingIndex.folder(forCatalog: destination))
            throw error
        }
    }

    /// Rewrites the file without free pages and merges the index into one segment, dropping the postings of
    /// removed tracks (after large removals or many adds).
    public func compact() throws {
        try flushIndex(ifLargerThanFile: true)
        try db.execute("PRAGMA auto_vacuum=INCREMENTAL")
        try db.execute("VACUUM")
        let index = try self.index()
        try index.acquireLock(timeout: busyTimeout)
        defer { index.releaseLock() }
        let live = try liveTracks()
        try index.mergeAll(live: { Catalog.contains(live, $0) })
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
        let index: PostingIndex
        do {
            if let i = segmentIndex { try i.refresh(); index = i } else {
                guard let id = try info("index_id") else { problem("the catalog has no index id"); return out }
                index = try openIndex(folder: PostingIndex.folder(forCatalog: path), id: id)
            }
        } catch let e as CatalogError {
            problem(e.message)
            return out
        }
        for segment in index.segments {
            do {
                try segment.forEach { p in
                    let track = Int64(p.track)
                    guard let last = lastFrames[track] else {
                        if !index.isRemoved(p.track) { badTracks.insert(track) }
                        return
                    }
                    postings[track, default: 0] += 1
                    if Int(p.frame) > last { lateFrames.insert(track) }
                }
            } catch let e as CatalogError {
                problem(e.message)
            }
        }
        var pending = Set<Int64>()
        let q = try db.prepare("SELECT track_id, data FROM pending_postings")
        while try q.step() {
            let id = q.int64(0)
            guard let last = lastFrames[id] else { problem("pending landmarks of track \(id), which does not exist"); continue }
            guard let tid = UInt32(exactly: id), !index.covers(tid) else { continue }
            pending.insert(id)
            var n = 0
            if !q.withBlob(1, { Catalog.decodeLandmarks($0, lastFrame: last, hashBits: configuration.hashBits) { _, _ in n += 1 } }) {
                problem("track \(id): pending landmarks are invalid (cut short, out of order or past its end)")
            }
            postings[id, default: 0] += n
        }
        for id in lastFrames.keys.sorted() where !pending.contains(id) && !(UInt32(exactly: id).map(index.covers) ?? false) {
            problem("track \(id) is not in the hash index (its segment is missing)")
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
