import CSQLite3
import Foundation

/// A single SQLite connection. Not thread-safe: one owner uses it at a time.
final class SQLiteConnection {
    let handle: OpaquePointer
    let path: String

    /// `immutable`: read a file that nothing can change (read-only storage) without the WAL index or locks,
    /// which SQLite would otherwise need to create beside it; implies `readOnly`.
    init(path: String, readOnly: Bool, create: Bool, busyTimeoutMs: Int32, immutable: Bool = false) throws {
        var db: OpaquePointer?
        var flags = readOnly || immutable ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE
        if create && !readOnly && !immutable { flags |= SQLITE_OPEN_CREATE }
        flags |= SQLITE_OPEN_NOMUTEX
        var name = path
        if immutable {
            flags |= SQLITE_OPEN_URI
            var escaped = ""
            for c in path.unicodeScalars {
                switch c {
                case "%": escaped += "%25"
                case "?": escaped += "%3f"
                case "#": escaped += "%23"
                default: escaped.unicodeScalars.append(c)
                }
            }
            name = "file:" + escaped + "?immutable=1"
        }
        let rc = sqlite3_open_v2(name, &db, flags, nil)
        guard rc == SQLITE_OK, let db else {
            let msg = db.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory"
            if let db { sqlite3_close(db) }
            throw CatalogError(rc == SQLITE_CANTOPEN ? .notFound : .damaged, "cannot open catalog: \(msg)", path: path)
        }
        handle = db
        self.path = path
        sqlite3_busy_timeout(db, busyTimeoutMs)
        sqlite3_extended_result_codes(db, 1)
    }

    deinit { sqlite3_close_v2(handle) }

    var isReadOnly: Bool { sqlite3_db_readonly(handle, "main") == 1 }

    func error(_ rc: Int32, _ context: String) -> CatalogError {
        let msg = String(cString: sqlite3_errmsg(handle))
        let primary = rc & 0xFF
        switch primary {
        case SQLITE_BUSY, SQLITE_LOCKED:
            return CatalogError(.locked, "catalog is locked by another process (\(msg)); try again when it has finished", path: path)
        case SQLITE_READONLY:
            return CatalogError(.readOnly, "catalog is read-only (\(msg))", path: path)
        case SQLITE_CORRUPT, SQLITE_NOTADB:
            return CatalogError(.damaged, "catalog file is damaged or not a catalog (\(msg))", path: path)
        case SQLITE_FULL:
            return CatalogError(.ioError, "disk full (\(msg))", path: path)
        case SQLITE_CANTOPEN:
            return CatalogError(.notFound, "cannot open catalog (\(msg))", path: path)
        default:
            return CatalogError(.ioError, "\(context): \(msg) (SQLite code \(rc))", path: path)
        }
    }

    func execute(_ sql: String) throws {
        var err: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(handle, sql, nil, nil, &err)
        if let err { sqlite3_free(err) }
        if rc != SQLITE_OK { throw error(rc, "executing \(sql.prefix(40))") }
    }

    func prepare(_ sql: String) throws -> SQLiteStatement {
        var stmt: OpaquePointer?
        let rc = sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &stmt, nil)
        guard rc == SQLITE_OK, let stmt else { throw error(rc, "preparing \(sql.prefix(60))") }
        return SQLiteStatement(handle: stmt, connection: self)
    }

    private var statementCache: [String: SQLiteStatement] = [:]

    /// The statement for `sql`, prepared once and kept for the connection's life (queries run often),
    /// reset and unbound. Callers reset it again when done, so it holds no read lock in between.
    func cached(_ sql: String) throws -> SQLiteStatement {
        if let s = statementCache[sql] {
            s.reset()
            return s
        }
        let s = try prepare(sql)
        statementCache[sql] = s
        return s
    }

    /// Runs `body` in a write transaction that takes the write lock up front (waits up to the busy timeout).
    func writeTransaction<T>(_ body: () throws -> T) throws -> T {
        try execute("BEGIN IMMEDIATE")
        do {
            let result = try body()
            try execute("COMMIT")
            return result
        } catch {
            try? execute("ROLLBACK")
            throw error
        }
    }

    var changes: Int { Int(sqlite3_changes(handle)) }
    var lastInsertRowID: Int64 { sqlite3_last_insert_rowid(handle) }
}

final class SQLiteStatement {
    let handle: OpaquePointer
    unowned let connection: SQLiteConnection

    init(handle: OpaquePointer, connection: SQLiteConnection) {
        self.handle = handle
        self.connection = connection
    }

    deinit { sqlite3_finalize(handle) }

    func reset() {
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
    }

    func bind(_ index: Int32, _ value: Int64) { sqlite3_bind_int64(handle, index, value) }
    func bind(_ index: Int32, _ value: Double) { sqlite3_bind_double(handle, index, value) }
    func bind(_ index: Int32, _ value: String?) {
        if let value { sqlite3_bind_text(handle, index, value, -1, csqlite3_transient()) } else { sqlite3_bind_null(handle, index) }
    }
    func bind(_ index: Int32, blob: UnsafeRawBufferPointer) {
        sqlite3_bind_blob(handle, index, blob.baseAddress, Int32(blob.count), csqlite3_transient())
    }

    /// Steps once; true when a row is available.
    func step() throws -> Bool {
        let rc = sqlite3_step(handle)
        if rc == SQLITE_ROW { return true }
        if rc == SQLITE_DONE { return false }
        throw connection.error(rc, "query")
    }

    /// Steps to completion (for statements without result rows) and resets.
    func run() throws {
        defer { sqlite3_reset(handle) }
        while try step() {}
    }

    func int64(_ col: Int32) -> Int64 { sqlite3_column_int64(handle, col) }
    func double(_ col: Int32) -> Double { sqlite3_column_double(handle, col) }
    func string(_ col: Int32) -> String? {
        guard let p = sqlite3_column_text(handle, col) else { return nil }
        return String(cString: p)
    }
    func isNull(_ col: Int32) -> Bool { sqlite3_column_type(handle, col) == SQLITE_NULL }
    /// Calls `body` with the column's bytes, valid only during the call.
    func withBlob<T>(_ col: Int32, _ body: (UnsafeRawBufferPointer) throws -> T) rethrows -> T {
        let p = sqlite3_column_blob(handle, col)
        let n = Int(sqlite3_column_bytes(handle, col))
        return try body(UnsafeRawBufferPointer(start: p, count: n))
    }
}
