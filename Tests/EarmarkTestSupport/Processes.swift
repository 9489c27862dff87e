import Foundation

/// What a finished child process left behind.
public struct ProcessOutput: Sendable, CustomStringConvertible {
    public var status: Int32
    public var stdout: Data
    public var stderr: Data
    /// True when the process was killed because it ran past its time limit.
    public var timedOut: Bool

    public var stdoutText: String { String(decoding: stdout, as: UTF8.self) }
    public var stderrText: String { String(decoding: stderr, as: UTF8.self) }

    public var description: String {
        "exit \(status)\(timedOut ? " (timed out)" : "")\n--- stdout ---\n\(stdoutText.prefix(4000))\n--- stderr ---\n\(stderrText.prefix(4000))"
    }
}

/// Runs programs for the tests. Output goes to temporary files, so a chatty child can never
/// block on a full pipe.
public enum Run {
    /// Absolute path of `name`, searched on PATH when it holds no slash.
    public static func which(_ name: String) -> String? {
        if name.contains("/") { return FileManager.default.isExecutableFile(atPath: name) ? name : nil }
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        for dir in path.split(separator: ":") where !dir.isEmpty {
            let candidate = "\(dir)/\(name)"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return nil
    }

    /// Runs `executable` to completion.
    /// - Parameters:
    ///   - environment: variables set (or, with a nil value, removed) on top of this process's environment.
    ///   - stdin: bytes for standard input; /dev/null when nil.
    ///   - timeout: seconds after which the child is killed (and `timedOut` is set).
    public static func process(_ executable: String, _ arguments: [String], environment: [String: String?] = [:],
                               currentDirectory: URL? = nil, stdin: Data? = nil,
                               timeout: Double = 300) throws -> ProcessOutput {
        guard let exe = which(executable) else { throw TestSupportError("program not found: \(executable)") }
        let tmp = try TemporaryDirectory("proc")
        let outURL = tmp.file("stdout"), errURL = tmp.file("stderr"), inURL = tmp.file("stdin")
        _ = FileManager.default.createFile(atPath: outURL.path, contents: nil)
        _ = FileManager.default.createFile(atPath: errURL.path, contents: nil)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: exe)
        p.arguments = arguments
        var env = ProcessInfo.processInfo.environment
        for (k, v) in environment { env[k] = v }
        p.environment = env
        if let currentDirectory { p.currentDirectoryURL = currentDirectory }
        let outHandle = try FileHandle(forWritingTo: outURL)
        let errHandle = try FileHandle(forWritingTo: errURL)
        defer {
            try? outHandle.close()
            try? errHandle.close()
        }
        p.standardOutput = outHandle
        p.standardError = errHandle
        var inHandle: FileHandle?
        if let stdin {
            try stdin.write(to: inURL)
            inHandle = try FileHandle(forReadingFrom: inURL)
            p.standardInput = inHandle
        } else {
            p.standardInput = FileHandle.nullDevice
        }
        defer { try? inHandle?.close() }

        let done = DispatchSemaphore(value: 0)
        p.terminationHandler = { _ in done.signal() }
        try p.run()
        var timedOut = false
        if done.wait(timeout: .now() + timeout) == .timedOut {
            timedOut = true
            kill(p.processIdentifier, SIGKILL)
            done.wait()
        }
        p.waitUntilExit()
        return ProcessOutput(status: p.terminationStatus, stdout: try Data(contentsOf: outURL),
                             stderr: try Data(contentsOf: errURL), timedOut: timedOut)
    }

    /// Runs a tool that must succeed; throws with its output otherwise.
    @discardableResult
    public static func checked(_ executable: String, _ arguments: [String], environment: [String: String?] = [:],
                               timeout: Double = 300) throws -> ProcessOutput {
        let out = try process(executable, arguments, environment: environment, timeout: timeout)
        guard out.status == 0, !out.timedOut else {
            throw TestSupportError("\(executable) \(arguments.joined(separator: " ")) failed: \(out)")
        }
        return out
    }

    /// `sox ARGS` (must succeed).
    public static func sox(_ arguments: [String]) throws {
        try checked("sox", ["--no-show-progress"] + arguments)
    }

    /// `ffmpeg -nostdin -y ARGS` (must succeed).
    public static func ffmpeg(_ arguments: [String]) throws {
        try checked("ffmpeg", ["-nostdin", "-hide_banner", "-loglevel", "error", "-y"] + arguments)
    }

    /// `sqlite3 DB SQL` (must succeed); returns standard output.
    @discardableResult
    public static func sqlite(_ database: String, _ sql: String) throws -> String {
        try checked("sqlite3", [database, sql]).stdoutText
    }
}

/// A `sqlite3` shell kept running beside the test, to hold locks the way another process would.
public final class SQLiteShell: @unchecked Sendable {
    private let process = Process()
    private let input = Pipe()
    private let output = Pipe()
    private var closed = false

    public init(database: String) throws {
        guard let exe = Run.which("sqlite3") else { throw TestSupportError("sqlite3 not found (run tools/setup.sh)") }
        process.executableURL = URL(fileURLWithPath: exe)
        process.arguments = ["-batch", database]
        process.standardInput = input
        process.standardOutput = output
        process.standardError = output
        try process.run()
    }

    deinit { close() }

    /// Sends `sql`, then waits until the shell has executed it (it echoes a marker afterwards).
    /// Returns what the shell printed on the way.
    @discardableResult
    public func execute(_ sql: String, timeout: Double = 30) throws -> String {
        let marker = "__done_\(UUID().uuidString.prefix(8))__"
        input.fileHandleForWriting.write(Data("\(sql)\n.print \(marker)\n".utf8))
        var text = ""
        let deadline = Date().addingTimeInterval(timeout)
        while !text.contains(marker) {
            guard Date() < deadline else { throw TestSupportError("sqlite3 did not answer; got: \(text)") }
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { throw TestSupportError("sqlite3 exited; got: \(text)") }
            text += String(decoding: chunk, as: UTF8.self)
        }
        return text.replacingOccurrences(of: marker + "\n", with: "")
    }

    /// Ends the shell (an open transaction is rolled back by SQLite).
    public func close() {
        guard !closed else { return }
        closed = true
        try? input.fileHandleForWriting.close()
        process.waitUntilExit()
    }
}

/// Runs the `earmark` command-line tool built next to the test bundle.
public enum EarmarkCLI {
    /// The built `earmark` executable: `$EARMARK_BIN`, else the `earmark` beside this test
    /// process's executable (SwiftPM puts products and the test bundle in one folder).
    public static func executable() throws -> String {
        let fm = FileManager.default
        if let forced = ProcessInfo.processInfo.environment["EARMARK_BIN"], !forced.isEmpty {
            guard fm.isExecutableFile(atPath: forced) else { throw TestSupportError("EARMARK_BIN=\(forced) is not executable") }
            return forced
        }
        var folders: [URL] = []
        if let exe = try? fm.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
            folders.append(URL(fileURLWithPath: exe).deletingLastPathComponent())
        }
        if let exe = Bundle.main.executableURL { folders.append(exe.resolvingSymlinksInPath().deletingLastPathComponent()) }
        if let arg0 = CommandLine.arguments.first, arg0.contains("/") {
            folders.append(URL(fileURLWithPath: arg0).resolvingSymlinksInPath().deletingLastPathComponent())
        }
        for folder in folders {
            // On Linux the test bundle is an executable in the products folder; on macOS it is a
            // bundle (…/EarmarkPackageTests.xctest/Contents/MacOS/…) inside that folder.
            var dir = folder
            for _ in 0..<4 {
                let candidate = dir.appendingPathComponent("earmark").path
                var isDir: ObjCBool = false
                if fm.fileExists(atPath: candidate, isDirectory: &isDir), !isDir.boolValue, fm.isExecutableFile(atPath: candidate) {
                    return candidate
                }
                dir = dir.deletingLastPathComponent()
            }
        }
        throw TestSupportError("the earmark binary was not found beside the test bundle (looked in \(folders.map(\.path))); build it with `swift build` or set EARMARK_BIN")
    }

    /// Runs `earmark ARGS`. The environment points the default catalog at a path that does not
    /// exist, so a test can never touch the user's real catalog by accident.
    public static func run(_ arguments: [String], environment: [String: String?] = [:], stdin: Data? = nil,
                           timeout: Double = 180) throws -> ProcessOutput {
        try Run.process(try executable(), arguments, environment: safeEnvironment(environment), stdin: stdin, timeout: timeout)
    }

    /// `extra` on top of a default catalog path that does not exist.
    static func safeEnvironment(_ extra: [String: String?]) -> [String: String?] {
        var env: [String: String?] = ["EARMARK_CATALOG": TestPaths.scratchRoot.appendingPathComponent("no-default-catalog.earcat").path]
        for (k, v) in extra { env[k] = v }
        return env
    }
}

/// A child process started without waiting for it; ``finished()`` suspends (without blocking a thread)
/// until it exits.
public final class RunningProcess: @unchecked Sendable {
    // `process` is only read after start; the continuation is guarded by `lock`.
    private let process = Process()
    private let lock = NSLock()
    private var exited = false
    private var waiters: [CheckedContinuation<Void, Never>] = []
    private let folder: TemporaryDirectory
    private let outURL: URL, errURL: URL

    /// Starts `executable ARGS` with the environment changes given, standard input from /dev/null.
    public init(_ executable: String, _ arguments: [String], environment: [String: String?] = [:]) throws {
        guard let exe = Run.which(executable) else { throw TestSupportError("program not found: \(executable)") }
        folder = try TemporaryDirectory("running")
        outURL = folder.file("stdout")
        errURL = folder.file("stderr")
        _ = FileManager.default.createFile(atPath: outURL.path, contents: nil)
        _ = FileManager.default.createFile(atPath: errURL.path, contents: nil)
        process.executableURL = URL(fileURLWithPath: exe)
        process.arguments = arguments
        var env = ProcessInfo.processInfo.environment
        for (k, v) in environment { env[k] = v }
        process.environment = env
        process.standardOutput = try FileHandle(forWritingTo: outURL)
        process.standardError = try FileHandle(forWritingTo: errURL)
        process.standardInput = FileHandle.nullDevice
        process.terminationHandler = { [weak self] _ in self?.markExited() }
        try process.run()
    }

    private func markExited() {
        lock.lock()
        exited = true
        let w = waiters
        waiters = []
        lock.unlock()
        for c in w { c.resume() }
    }

    /// The process id.
    public var pid: Int32 { process.processIdentifier }

    /// What the process has written to standard output so far.
    public func standardOutputSoFar() throws -> String {
        String(decoding: try Data(contentsOf: outURL), as: UTF8.self)
    }

    /// Sends a signal (SIGINT, SIGTERM, …) to the process.
    public func signal(_ sig: Int32) { kill(process.processIdentifier, sig) }

    /// Waits for the process to exit, killing it after `timeout` seconds, and returns its output.
    public func finished(timeout: Double = 120) async throws -> ProcessOutput {
        let killer = Task { [weak self] in
            try await Task.sleep(for: .seconds(timeout))
            self?.signal(SIGKILL)
        }
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            lock.lock()
            if exited {
                lock.unlock()
                c.resume()
            } else {
                waiters.append(c)
                lock.unlock()
            }
        }
        killer.cancel()
        process.waitUntilExit()
        return ProcessOutput(status: process.terminationStatus, stdout: try Data(contentsOf: outURL),
                             stderr: try Data(contentsOf: errURL), timedOut: process.terminationReason == .uncaughtSignal)
    }
}

extension EarmarkCLI {
    /// Starts `earmark ARGS` without waiting (same environment rules as ``run(_:environment:timeout:)``).
    public static func start(_ arguments: [String], environment: [String: String?] = [:]) throws -> RunningProcess {
        try RunningProcess(try executable(), arguments, environment: safeEnvironment(environment))
    }
}

/// Catalog files as earlier builds wrote them, for migration tests.
public enum LegacyCatalog {
    /// One track of a legacy catalog: its landmarks (hash, frame) and stored peaks (frame, bin), frame-ordered.
    public struct Track {
        public var title: String
        public var duration: Double
        public var contentHash: String
        public var landmarks: [(hash: UInt32, frame: UInt32)]
        public var peaks: [(frame: UInt32, bin: UInt16)]
        public init(title: String, duration: Double, contentHash: String, landmarks: [(hash: UInt32, frame: UInt32)],
                    peaks: [(frame: UInt32, bin: UInt16)]) {
            self.title = title
            self.duration = duration
            self.contentHash = contentHash
            self.landmarks = landmarks
            self.peaks = peaks
        }
    }

    /// Writes a schema-2 catalog (builds before 2026-11-25): the hash index inside the file, one row per 18-bit
    /// bucket of 21-bit hashes, each posting varint(track id), varint(frame << 3 | low 3 hash bits).
    public static func writeSchema2(path: String, signatureVersion: Int, minBin: Int, tracks: [Track]) throws {
        func varint(_ value: UInt64, _ out: inout [UInt8]) {
            var v = value
            while v >= 0x80 { out.append(UInt8(v & 0x7F) | 0x80); v >>= 7 }
            out.append(UInt8(v))
        }
        func hex(_ bytes: [UInt8]) -> String { "x'" + bytes.map { String(format: "%02x", $0) }.joined() + "'" }
        var sql = """
            PRAGMA application_id=\(0x4552_4D4B); PRAGMA user_version=2; PRAGMA journal_mode=WAL;
            CREATE TABLE catalog_info(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
            INSERT INTO catalog_info VALUES ('signature_version', '\(signatureVersion)'), ('format', 'earmark-catalog'), ('created_at', '2026-11-20T00:00:00Z');
            CREATE TABLE tracks(id INTEGER PRIMARY KEY AUTOINCREMENT, title TEXT, artist TEXT, album TEXT,
              metadata TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(metadata)), duration REAL NOT NULL,
              source_path TEXT, source_size INTEGER, source_mtime REAL, content_hash TEXT NOT NULL UNIQUE,
              landmark_count INTEGER NOT NULL, added_at TEXT NOT NULL);
            CREATE INDEX tracks_source ON tracks(source_path);
            CREATE TABLE postings(bucket INTEGER PRIMARY KEY, data BLOB NOT NULL);
            CREATE TABLE track_peaks(track_id INTEGER PRIMARY KEY, data BLOB NOT NULL);
            CREATE TABLE track_analysis(track_id INTEGER NOT NULL, kind TEXT NOT NULL, version INTEGER NOT NULL,
              data TEXT NOT NULL CHECK (json_valid(data)), PRIMARY KEY (track_id, kind)) WITHOUT ROWID;

            """
        var buckets: [UInt32: [UInt8]] = [:]
        for (i, t) in tracks.enumerated() {
            let id = UInt64(i + 1)
            var unique = Set<UInt64>()
            for l in t.landmarks.sorted(by: { ($0.hash, $0.frame) < ($1.hash, $1.frame) })
            where unique.insert(UInt64(l.hash) << 32 | UInt64(l.frame)).inserted {
                varint(id, &buckets[l.hash >> 3, default: []])
                varint(UInt64(l.frame) << 3 | UInt64(l.hash & 7), &buckets[l.hash >> 3, default: []])
            }
            var peaks: [UInt8] = []
            var last: UInt32 = 0
            for p in t.peaks {
                varint(UInt64(p.frame - last), &peaks)
                peaks.append(UInt8(Int(p.bin) - minBin))
                last = p.frame
            }
            let title = t.title.replacingOccurrences(of: "'", with: "''")
            sql += "INSERT INTO tracks(id, title, duration, content_hash, landmark_count, added_at) VALUES (\(id), '\(title)', \(t.duration), '\(t.contentHash)', \(unique.count), '2026-11-20T00:00:00Z');\n"
            sql += "INSERT INTO track_peaks VALUES (\(id), \(hex(peaks)));\n"
        }
        for (b, blob) in buckets.sorted(by: { $0.key < $1.key }) { sql += "INSERT INTO postings VALUES (\(b), \(hex(blob)));\n" }
        let file = path + ".sql"
        try sql.write(toFile: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: file) }
        _ = try Run.checked("sqlite3", [path, ".read \(file)"])
    }
}
