import CSQLite3
import EarmarkCatalog
import EarmarkSignature
import Foundation

/// Catalog exports: the bytes are written to a file and opened as `catalog import` opens one
/// (read-only), integrity-checked, then every reader runs: tracks, analyses, peaks, statistics,
/// and hash lookups, which decode the file's pending landmarks.
enum CatalogFuzzing {
    /// Where the files go: shared memory when there is some.
    static let folder = FileManager.default.fileExists(atPath: "/dev/shm") ? "/dev/shm" : NSTemporaryDirectory()

    static func run(_ bytes: UnsafeRawBufferPointer) {
        // A file per call: the replay tests may run several at once.
        let path = (folder as NSString).appendingPathComponent("earmark-fuzz-\(getpid())-\(UUID().uuidString).earcat")
        defer { removeFiles(path) }
        guard FileManager.default.createFile(atPath: path, contents: Data(bytes)) else {
            fatalError("cannot write \(path)")
        }
        guard let catalog = try? Catalog(path: path, readOnly: true, busyTimeout: 0) else { return }
        _ = try? catalog.check()
        _ = try? catalog.stats()
        var ids = Set(((try? catalog.tracks()) ?? []).prefix(16).map(\.id))
        ids.formUnion(column(path, "SELECT track_id FROM track_peaks LIMIT 16"))
        for id in ids.sorted() {
            _ = try? catalog.track(id: id)
            _ = try? catalog.peaks(trackID: id)
            _ = try? catalog.analyses(trackID: id)
        }
        // Hashes spread over the whole hash space.
        let shift = UInt32(catalog.configuration.hashBits - 8)
        let hashes: [UInt32] = (0..<256).map { (i: UInt32) -> UInt32 in i << shift | (i & 7) }
        var postings = 0
        try? catalog.lookup(hashes: hashes) { _, _, _ in postings += 1 }
    }

    /// The first column of `sql` over the file, read with SQLite directly (empty on any error).
    static func column(_ path: String, _ sql: String) -> [Int64] {
        var db: OpaquePointer?
        defer { sqlite3_close_v2(db) }
        guard sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, nil) == SQLITE_OK else { return [] }
        var statement: OpaquePointer?
        defer { sqlite3_finalize(statement) }
        guard sqlite3_prepare_v2(db, sql, -1, &statement, nil) == SQLITE_OK else { return [] }
        var out: [Int64] = []
        while sqlite3_step(statement) == SQLITE_ROW { out.append(sqlite3_column_int64(statement, 0)) }
        return out
    }

    static func removeFiles(_ path: String) {
        for suffix in ["", "-wal", "-shm", "-journal"] { unlink(path + suffix) }
        try? FileManager.default.removeItem(atPath: path + "-index")
    }
}
