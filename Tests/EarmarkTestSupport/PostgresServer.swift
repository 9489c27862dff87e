import Foundation

/// A throwaway PostgreSQL 15 server for one test: `initdb` in a temporary folder, the server on a free loopback port
/// (its unix socket in the same folder), trust authentication, one database. ``stop()`` (also on release, and at
/// process exit for servers still running) stops it and deletes the folder. As root, initdb and the server run as the
/// `postgres` system user (`runuser`, `setpriv`), since PostgreSQL refuses to run as root. Each server has its own port and
/// folder, so tests may run them in parallel.
public final class PostgresServer: @unchecked Sendable {
    /// Debian's postgresql-15 (tools/setup.sh installs it).
    public static let binaries = "/usr/lib/postgresql/15/bin"

    /// Whether PostgreSQL 15's server programs are installed.
    public static var isInstalled: Bool {
        FileManager.default.isExecutableFile(atPath: binaries + "/initdb") && FileManager.default.isExecutableFile(atPath: binaries + "/pg_ctl")
    }

    /// Whether the PostgreSQL tests run: when PostgreSQL is installed, and always in CI (`CI=true`), where a missing
    /// PostgreSQL fails them with a clear message instead of skipping.
    public static var testsEnabled: Bool {
        isInstalled || ["true", "1"].contains(ProcessInfo.processInfo.environment["CI"]?.lowercased() ?? "")
    }

    public let folder: String
    public let port: Int
    public let database: String
    private let lock = NSLock()
    private var running = true
    /// The server, a child of this process: started in the foreground, not by `pg_ctl start`, whose daemon would keep
    /// the descriptor Foundation watches to see the child end (and `pg_ctl` would never be seen to exit).
    private let process: Process

    /// `postgres://postgres@127.0.0.1:PORT/DATABASE?sslmode=disable`.
    public var url: String { "postgres://postgres@127.0.0.1:\(port)/\(database)?sslmode=disable" }
    /// The same database through the server's unix socket.
    public var socketURL: String { "postgres://postgres@/\(database)?host=\(folder)&port=\(port)" }
    /// The server's log (for failure messages).
    public var log: String { (try? String(contentsOfFile: folder + "/server.log", encoding: .utf8)) ?? "" }

    private static let asRoot = geteuid() == 0

    /// Creates the cluster and starts the server, with `database` created in it.
    public convenience init(database: String = "earmark") throws {
        try self.init(database: database) { folder in
            try PostgresServer.asServerUser("initdb", ["-D", folder + "/data", "-A", "trust", "-U", "postgres", "-E", "UTF8",
                                                        "--locale=C", "--no-sync", "--no-instructions"])
        }
        do {
            try sql("CREATE DATABASE \(database)", database: "postgres")
        } catch {
            stop()
            throw error
        }
    }

    /// A hot standby of `primary`: a base backup of it (`pg_basebackup -R`), started as a server of its own that
    /// streams and replays the primary's changes. Its catalogs open read-only; ``promote()`` makes it a primary.
    public convenience init(standbyOf primary: PostgresServer) throws {
        try self.init(database: primary.database) { folder in
            try PostgresServer.asServerUser("pg_basebackup", ["-D", folder + "/data", "-h", primary.folder, "-p", String(primary.port),
                                                               "-U", "postgres", "-R", "-X", "stream", "-c", "fast", "--no-sync"])
        }
    }

    /// Starts a server on a data folder that `prepare` makes in the new temporary folder it is given.
    private init(database: String, prepare: (String) throws -> Void) throws {
        guard PostgresServer.isInstalled else {
            throw TestSupportError("PostgreSQL 15 is not installed (\(PostgresServer.binaries)/initdb is missing): run `bash tools/setup.sh` as root, which installs Debian's postgresql-15")
        }
        self.database = database
        var template = Array((FileManager.default.temporaryDirectory.path + "/earmark-pg-XXXXXX").utf8CString)
        guard let made = mkdtemp(&template) else { throw TestSupportError("cannot create a temporary folder for PostgreSQL") }
        let folder = String(cString: made)
        self.folder = folder
        chmod(folder, 0o755)
        if PostgresServer.asRoot {
            guard let pw = getpwnam("postgres") else {
                try? FileManager.default.removeItem(atPath: folder)
                throw TestSupportError("there is no `postgres` system user to run PostgreSQL as (install postgresql-15: `bash tools/setup.sh`)")
            }
            chown(folder, pw.pointee.pw_uid, pw.pointee.pw_gid)
        }
        do {
            try prepare(folder)
            // A free port can be taken by another test between choosing and binding it: try a few.
            var started: (port: Int, process: Process)?
            var lastError = ""
            for _ in 0..<5 {
                let candidate = try PostgresServer.freePort()
                let process = try PostgresServer.launchServer(folder: folder, port: candidate)
                if PostgresServer.waitUntilReady(process, folder: folder, port: candidate) { started = (candidate, process); break }
                lastError = (try? String(contentsOfFile: folder + "/server.log", encoding: .utf8)) ?? ""
                if process.isRunning { kill(process.processIdentifier, SIGKILL) }
                process.waitUntilExit()
            }
            guard let started else { throw TestSupportError("PostgreSQL did not start; its log:\n\(lastError)") }
            self.port = started.port
            self.process = started.process
        } catch {
            try? FileManager.default.removeItem(atPath: folder)
            throw error
        }
        PostgresServer.register(self)
    }

    deinit { stop() }

    /// Ends a standby's recovery (`pg_ctl promote`, waiting for it): it then accepts writes.
    public func promote() throws {
        try PostgresServer.asServerUser("pg_ctl", ["-D", folder + "/data", "-w", "-t", "60", "promote"])
    }

    /// Waits (up to 60 s) until this standby has replayed everything `primary` had written when called.
    public func waitForReplay(of primary: PostgresServer) throws {
        let lsn = try primary.sql("SELECT pg_current_wal_lsn()")
        for _ in 0..<600 {
            if try sql("SELECT pg_last_wal_replay_lsn() >= '\(lsn)'::pg_lsn") == "t" { return }
            usleep(100_000)
        }
        throw TestSupportError("the standby on port \(port) did not replay up to \(lsn) within 60 s; its log:\n\(log)")
    }

    /// Runs SQL through `psql` against `database` (default: the server's database) and returns its unaligned output.
    @discardableResult
    public func sql(_ statements: String, database: String? = nil) throws -> String {
        let out = try Run.process(PostgresServer.binaries + "/psql", [
            "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", folder, "-p", String(port), "-U", "postgres",
            "-d", database ?? self.database, "-c", statements,
        ], timeout: 120)
        guard out.status == 0 else { throw TestSupportError("psql failed: \(out)") }
        return out.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Stops the server (immediately) and deletes its folder; a no-op the second time.
    public func stop() {
        let wasRunning = lock.withLock { () -> Bool in
            defer { running = false }
            return running
        }
        guard wasRunning else { return }
        halt()
        try? FileManager.default.removeItem(atPath: folder)
        PostgresServer.unregister(self)
    }

    /// Suspends (SIGSTOP) or resumes (SIGCONT) the server and every backend it runs: a machine that hangs without
    /// closing its connections. Resume before ``stop()``.
    public func freeze(_ frozen: Bool) throws {
        let pidFile = try String(contentsOfFile: folder + "/data/postmaster.pid", encoding: .utf8)
        guard let first = pidFile.split(separator: "\n").first, let postmaster = Int32(first) else {
            throw TestSupportError("no server pid in \(folder)/data/postmaster.pid")
        }
        let children = (try? String(contentsOfFile: "/proc/\(postmaster)/task/\(postmaster)/children", encoding: .utf8)) ?? ""
        for pid in [postmaster] + children.split(separator: " ").compactMap({ Int32($0) }) {
            kill(pid, frozen ? SIGSTOP : SIGCONT)
        }
    }

    /// Stops the server (immediate shutdown) without deleting its folder: what clients see when the server is gone.
    public func halt() {
        if process.isRunning {
            _ = try? PostgresServer.runAsServerUser("pg_ctl", ["-D", folder + "/data", "-m", "immediate", "-w", "-t", "60", "stop"])
            for _ in 0..<300 where process.isRunning { usleep(100_000) }
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        }
        process.waitUntilExit()
    }

    /// Starts `postgres` in the foreground (as the `postgres` user when root) with its log in the folder.
    private static func launchServer(folder: String, port: Int) throws -> Process {
        let exe = binaries + "/postgres"
        let serverArguments = ["-D", folder + "/data", "-p", String(port), "-k", folder, "-c", "listen_addresses=127.0.0.1",
                               "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
                               "-c", "shared_buffers=16MB", "-c", "max_connections=30"]
        let p = Process()
        if asRoot {
            // setpriv execs the server in place (runuser would stay between as its parent).
            p.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
            p.arguments = ["--reuid=postgres", "--regid=postgres", "--init-groups", "--", exe] + serverArguments
        } else {
            p.executableURL = URL(fileURLWithPath: exe)
            p.arguments = serverArguments
        }
        var env = ProcessInfo.processInfo.environment
        env["LC_ALL"] = "C"
        env["PGDATA"] = nil
        p.environment = env
        p.currentDirectoryURL = URL(fileURLWithPath: "/")
        let logPath = folder + "/server.log"
        _ = FileManager.default.createFile(atPath: logPath, contents: nil)
        if asRoot, let pw = getpwnam("postgres") { chown(logPath, pw.pointee.pw_uid, pw.pointee.pw_gid) }
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        defer { try? log.close() }
        p.standardOutput = log
        p.standardError = log
        p.standardInput = FileHandle.nullDevice
        try p.run()
        return p
    }

    /// Waits (up to 120 s) until the server accepts connections; false when it exited (its port taken?) or never did.
    private static func waitUntilReady(_ process: Process, folder: String, port: Int) -> Bool {
        for _ in 0..<1200 {
            guard process.isRunning else { return false }
            if let out = try? Run.process(binaries + "/pg_isready", ["-q", "-h", folder, "-p", String(port), "-U", "postgres", "-d", "postgres"], timeout: 30),
               out.status == 0 { return true }
            usleep(100_000)
        }
        return false
    }

    private static func runAsServerUser(_ program: String, _ arguments: [String]) throws -> ProcessOutput {
        let exe = binaries + "/" + program
        // pg_ctl's server inherits the environment: no LC_* surprises, and no PGDATA of the caller's.
        if asRoot {
            return try Run.process("/usr/sbin/runuser", ["-u", "postgres", "--", exe] + arguments, environment: ["LC_ALL": "C"],
                                   currentDirectory: URL(fileURLWithPath: "/"), timeout: 180)
        }
        return try Run.process(exe, arguments, environment: ["LC_ALL": "C"], currentDirectory: URL(fileURLWithPath: "/"), timeout: 180)
    }

    private static func asServerUser(_ program: String, _ arguments: [String]) throws {
        let out = try runAsServerUser(program, arguments)
        guard out.status == 0 else { throw TestSupportError("\(program) \(arguments.joined(separator: " ")) failed: \(out)") }
    }

    /// A loopback port nobody listens on right now (the kernel's choice for port 0).
    private static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw TestSupportError("socket() failed") }
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = 0
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) } }
        guard bound == 0 else { throw TestSupportError("bind() failed") }
        let named = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
        guard named == 0 else { throw TestSupportError("getsockname() failed") }
        return Int(UInt16(bigEndian: addr.sin_port))
    }

    // Servers still running when the process exits are stopped then (a test that crashed past its cleanup).
    private static let registry = ServerRegistry()

    private static func register(_ server: PostgresServer) { registry.add(server) }
    private static func unregister(_ server: PostgresServer) { registry.remove(server) }
}

private final class ServerRegistry: @unchecked Sendable {
    private let lock = NSLock()
    private var servers: [ObjectIdentifier: (folder: String, stop: @Sendable () -> Void)] = [:]
    private var hooked = false

    func add(_ server: PostgresServer) {
        lock.withLock {
            let folder = server.folder
            servers[ObjectIdentifier(server)] = (folder, { [weak server] in server?.stop() })
            if !hooked {
                hooked = true
                atexit { stopAllServers() }
            }
        }
    }

    func remove(_ server: PostgresServer) {
        _ = lock.withLock { servers.removeValue(forKey: ObjectIdentifier(server)) }
    }

    func stopAll() {
        let all = lock.withLock { Array(servers.values) }
        for s in all { s.stop() }
    }
}

private func stopAllServers() {
    PostgresServer.stopRemaining()
}

extension PostgresServer {
    static func stopRemaining() { registry.stopAll() }
}
