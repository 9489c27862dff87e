// Load the issue of catalogs beyond one machine asks about: queries from several clients at once, ingest by several
// writers at once, and catalogs sharded over several PostgreSQL servers.
import EarmarkCatalogPostgres
import EarmarkKit
import EarmarkSynthetic
import Foundation

// MARK: - Throughput (hidden subcommand)

/// What the throughput child measured for one number of clients.
struct ThroughputRun: Codable {
    var clients: Int
    var queries: Int
    var errors: Int
    var seconds: Double
    /// Each query's wall time, in ms.
    var ms: [Double]
    /// Each query's CPU time on its thread, in ms.
    var cpuMs: [Double] = []
    var perSecond: Double { Double(queries) / max(seconds, 1e-9) }
}

/// Results of several threads, gathered under a lock.
final class Gathered<T: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [T] = []
    func append(_ item: T) { lock.withLock { items.append(item) } }
    var all: [T] { lock.withLock { items } }
}

/// A queue of indices 0, 1, 2, … that several threads take from.
final class Tickets: @unchecked Sendable {
    private let lock = NSLock()
    private var next = 0
    func take() -> Int { lock.withLock { defer { next += 1 }; return next } }
}

/// Values that several threads read and none writes after they are made.
final class Shared<T>: @unchecked Sendable {
    let items: [T]
    init(_ items: [T]) { self.items = items }
}

/// Starts `body(i)` on `count` threads; the group is left when each has ended.
func startThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) -> DispatchGroup {
    let done = DispatchGroup()
    for i in 0..<count {
        done.enter()
        let thread = Thread {
            body(i)
            done.leave()
        }
        thread.stackSize = 8 << 20
        thread.start()
    }
    return done
}

/// `__throughput CATALOG LIST OUT CLIENTS [MATCH OPTIONS…]` (CLIENTS: counts separated by commas): for each count,
/// that many threads, each with its own connection to the catalog (its own store and matcher, as each `serve` worker
/// has), take the listed signatures from one queue until every one is matched once; writes a ThroughputRun per count
/// as JSON. The signatures are read before; each thread matches one clip untimed first (connections and caches warm),
/// and the clock starts when all are ready.
func runThroughputChild(catalogPath: String, list: String, out: String, clients: [Int], matchOptions: [String]) throws {
    let box = Shared(try readTSV(list).map { try Fingerprinter.readSignatureFile(path: $0["path"]!) })
    guard !box.items.isEmpty else { throw CatalogError(.invalidArgument, "no clips listed", path: list) }
    var runs: [ThroughputRun] = []
    for n in clients {
        let times = Gathered<Double>(), cpuTimes = Gathered<Double>(), failures = Gathered<String>(), queue = Tickets()
        let ready = DispatchGroup(), go = DispatchSemaphore(value: 0)
        for _ in 0..<n { ready.enter() }
        let clock = ContinuousClock()
        let done = startThreads(n) { i in
            var matcher: Matcher?
            do {
                let m = Matcher(catalog: try CatalogStores.open(catalogPath, access: .read))
                for o in matchOptions { _ = m.options.override(o) }
                _ = try m.match(box.items[i % box.items.count])
                matcher = m
            } catch {
                failures.append("client \(i): \(error)")
            }
            ready.leave()
            go.wait()
            guard let matcher else { return }
            while true {
                let k = queue.take()
                guard k < box.items.count else { break }
                let t = clock.now, cpu = threadCPUSeconds()
                do { _ = try matcher.match(box.items[k]) } catch { failures.append("\(error)"); continue }
                times.append(seconds(clock.now - t) * 1000)
                cpuTimes.append((threadCPUSeconds() - cpu) * 1000)
            }
        }
        ready.wait()
        let t0 = clock.now
        for _ in 0..<n { go.signal() }
        done.wait()
        let wall = seconds(clock.now - t0)
        if let first = failures.all.first { note("  \(n) clients: \(failures.all.count) failures, e.g. \(first)") }
        runs.append(ThroughputRun(clients: n, queries: times.all.count, errors: failures.all.count, seconds: wall, ms: times.all, cpuMs: cpuTimes.all))
    }
    try JSONEncoder().encode(runs).write(to: URL(fileURLWithPath: out))
}

// MARK: - Shards

/// The server URL `server` (postgres://user@host:port) with the database `name`.
func databaseURL(_ server: String, _ name: String) -> String { server + "/" + name }

/// Runs a PostgreSQL client program (createdb, dropdb, psql) against the server `server` names (nil: the one PGHOST
/// and PGPORT name); its status.
@discardableResult
func pgTool(_ program: String, _ server: String?, _ arguments: [String]) -> Int32 {
    var argv = ["/usr/lib/postgresql/15/bin/" + program]
    if let server, let u = try? PostgresURL(server + "/postgres") {
        switch u.host {
        case .tcp(let h): argv += ["-h", h]
        case .socket(let folder): argv += ["-h", folder]
        }
        argv += ["-p", String(u.port), "-U", u.user]
    }
    return spawn(argv + arguments, quiet: true).status
}

/// Creates the database `name` on the server PGHOST names and on each of `shards` (left as they are when they exist)
/// and a catalog of `design` in it: sharded over `shards` when given. Returns the coordinator's URL. A catalog that is
/// already there is kept (a copy into it resumes).
func preparePostgresCatalog(_ name: String, shards: [String], design: SignatureConfiguration) throws -> String {
    let url = "postgres:///\(name)"
    pgTool("createdb", nil, [name])
    for s in shards { pgTool("createdb", s, [name]) }
    if (try? CatalogStores.open(url, access: .read)) == nil {
        let made: any CatalogStore = shards.isEmpty
            ? try CatalogStores.open(url, access: .create, configuration: design)
            : try PostgresCatalog.create(url: url, shards: shards.map { databaseURL($0, name) }, configuration: design)
        try made.close()
    }
    return url
}

/// Bytes of the database `name` on each shard (`pg_database_size`), summed: what the coordinator's statistics do not
/// count (its foreign tables hold nothing locally).
func shardBytes(_ name: String, shards: [String]) -> Int64 {
    shards.reduce(Int64(0)) { sum, s in
        sum + (psqlValue(s, name, "SELECT pg_database_size(current_database())").flatMap { Int64($0) } ?? 0)
    }
}

/// One value from `sql` run by psql on database `name` of `server` (nil: PGHOST's).
func psqlValue(_ server: String?, _ name: String, _ sql: String) -> String? {
    let out = NSTemporaryDirectory() + "earmark-scale-psql-\(getpid())"
    defer { try? FileManager.default.removeItem(atPath: out) }
    guard pgTool("psql", server, ["-X", "-At", "-d", name, "-c", sql, "-o", out]) == 0 else { return nil }
    return (try? String(contentsOfFile: out, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines)
}

// MARK: - Ingest

/// What one ingest run measured.
struct IngestRun {
    var writers: Int
    var tracks: Int
    var audioSeconds: Double
    /// Adding every track, then one last flush of the hash index (what is pending), in seconds.
    var seconds: Double
    var realTime: Double { audioSeconds / max(seconds, 1e-9) }
}

/// Ingest speed with each number of `writers`: a new, empty catalog (a database of its own on the server, sharded over
/// `shards` when given, or a file in `folder`) gets the first synthetic tracks of `generator` up to `hours` of audio,
/// prepared (landmarks extracted) before the clock starts, from that many threads at once, each with its own connection
/// and taking every `writers`-th track, as that many `catalog add` processes would; then one flush of the index.
func measureIngest(writers: [Int], hours: Double, postgres: Bool, shards: [String], folder: String,
                   generator: SyntheticTrackGenerator, design: SignatureConfiguration, workers: Int) async throws -> [IngestRun] {
    var prepared: [PreparedTrack] = []
    var audio = 0.0, next = 0
    while audio < hours * 3600 {
        let batch = await withTaskGroup(of: PreparedTrack.self) { group in
            for i in next..<next + 4 * workers { group.addTask { await prepareSynthetic(generator, index: i, configuration: design) } }
            var out: [PreparedTrack] = []
            for await p in group { out.append(p) }
            return out.sorted { $0.index < $1.index }
        }
        next += batch.count
        for p in batch where audio < hours * 3600 {
            guard let new = p.new else { continue }
            prepared.append(p)
            audio += new.duration
        }
    }
    let tracks = Shared(prepared)
    say("")
    say("ingest: \(prepared.count) synthetic tracks, \(fmt(audio / 3600, 2)) h, into a new \(postgres ? shards.isEmpty ? "database" : "catalog sharded over \(shards.count) servers" : "file") with "
        + writers.map(String.init).joined(separator: ", then ") + " writers at once")
    var runs: [IngestRun] = []
    for w in writers {
        let location: String
        if postgres {
            let name = "scale_ingest_w\(w)" + (shards.isEmpty ? "" : "_s\(shards.count)")
            pgTool("dropdb", nil, ["--if-exists", name])
            for s in shards { pgTool("dropdb", s, ["--if-exists", name]) }
            location = try preparePostgresCatalog(name, shards: shards, design: design)
        } else {
            location = folder + "/ingest-w\(w).earcat"
            removeCatalog(location)
            try CatalogStores.open(location, access: .create, configuration: design).close()
        }
        let failures = Gathered<String>()
        let clock = ContinuousClock()
        let t0 = clock.now
        startThreads(w) { k in
            do {
                let store = try CatalogStores.open(location, access: .write, busyTimeout: 600)
                for i in stride(from: k, to: tracks.items.count, by: w) {
                    let p = tracks.items[i]
                    _ = try store.add(p.new!, landmarks: p.landmarks, peaks: p.peaks, analyses: [])
                }
                try store.close()
            } catch {
                failures.append("writer \(k): \(error)")
            }
        }.wait()
        let store = try CatalogStores.open(location, access: .write, busyTimeout: 600)
        if let file = store as? Catalog { try finishWrites(file) } else if let server = store as? PostgresCatalog { try server.flushIndex() }
        let took = seconds(clock.now - t0)
        let count = try store.trackCount()
        try store.close()
        if let f = failures.all.first { say("  \(w) writers: \(failures.all.count) failed, e.g. \(f)") }
        let run = IngestRun(writers: w, tracks: count, audioSeconds: audio, seconds: took)
        runs.append(run)
        say("  \(w) writer\(w == 1 ? "" : "s"): \(count) of \(prepared.count) tracks in \(fmt(took, 1)) s = \(fmt(Double(count) / took, 1)) tracks/s, "
            + "\(fmt(run.realTime, 0))× real time" + (runs.count > 1 ? " (\(fmt(run.realTime / runs[0].realTime, 2))× the \(runs[0].writers)-writer rate)" : ""))
        if !postgres { removeCatalog(location) }
    }
    return runs
}
