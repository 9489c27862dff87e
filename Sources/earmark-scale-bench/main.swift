// earmark-scale-bench: matching against catalogs of 100 h, 1,000 h and 10,000 h of audio. Each catalog
// holds the real tracks of the public corpus, then synthetic tracks grown from their signatures
// (EarmarkSynthetic) up to the size; catalogs are cached, and a larger one continues a copy of the next
// smaller. The query set of earmark-bench is matched in a child process per size (its peak memory is a
// matching process's), then the real CLI is timed as a fresh process with the catalog cached and evicted.
// See tools/scale-bench.sh.
import EarmarkKit
import EarmarkSynthetic
import Foundation
#if canImport(Glibc)
import Glibc
#endif

struct Options {
    var corpus = ""
    var queries = ""
    var skewQueries: String?
    var sizes = [100, 1_000, 10_000]
    var seed: UInt64 = 1
    var cache = FileManager.default.homeDirectoryForCurrentUser.path + "/.cache/earmark-corpus/scale"
    var earmark: String?
    var coldSample = 10
    /// Time budget per size, in minutes (0: none): three quarters for the matching process, a quarter for the CLI runs.
    var minutes = 14.0
    var workers = ProcessInfo.processInfo.activeProcessorCount
    var triplets = false
    /// Whether a catalog of several index segments is compacted (`catalog migrate --compact`) before it is measured.
    var compact = true
    /// The share of synthetic stretches played backwards (``SyntheticTrackGenerator/reversedShare``). All of them by
    /// default: a forward stretch is a bin-shifted, time-scaled copy of a real track's audio, which a clip skewed the
    /// same way matches as well as the original (docs/benchmarks.md#large-catalogs).
    var reversedShare = 1.0
    /// Matcher options replaced in the matching process (`--match-option NAME=VALUE`), as ``MatchOptions/override(_:)`` takes them.
    var matchOptions: [String] = []
    /// Measure each catalog's copy on a PostgreSQL server (the one `PGHOST`, `PGPORT` and `PGUSER` name) instead of the file.
    var postgres = false
    /// Shard servers (postgres://user@host:port) each PostgreSQL copy is sharded over (`--shard`, repeatable).
    var shards: [String] = []
    /// Clients matching at once in the throughput measurement (0: not measured).
    var clients = 0
    /// Numbers of writers the ingest measurement runs with, one after the other (empty: not measured).
    var writers: [Int] = []
    /// Hours of synthetic tracks each ingest run adds.
    var ingestHours = 20.0
    /// Names catalogs of a generator other than the issue's (a quarter reversed) apart, in the cache.
    var variant: String {
        reversedShare == SyntheticTrackGenerator.reverseProbability ? "" : "-rev\(Int((reversedShare * 100).rounded()))"
    }
}

func usage(_ status: Int32) -> Never {
    FileHandle.standardError.write(Data("""
    usage: earmark-scale-bench --corpus DIR/corpus/public --queries DIR/queries/NAME [--skew-queries DIR/queries/NAME]
                               [--sizes 100,1000,10000] [--seed N] [--cache DIR] [--earmark PATH] [--cold-sample N] [--minutes M] [--workers N]
                               [--landmarks pairs|triplets] [--no-compact] [--reversed-share S] [--match-option NAME=VALUE]… [--postgres]
                               [--shard postgres://user@host:port]… [--clients N] [--writers 1,4] [--ingest-hours H]
      --sizes         catalog sizes in hours of audio, built (or taken from --cache) in increasing order
      --cache         where catalogs and clip signatures are kept (default ~/.cache/earmark-corpus/scale)
      --earmark       the CLI timed as a fresh process (default: earmark next to this executable)
      --cold-sample   positive and negative 10-s clips each timed through the CLI (default 10)
      --minutes       time budget per size (default 14; 0: none): 3/4 for matching the clips, which are taken in an
                      order that measures every degradation × length cell however far it gets, 1/4 for the CLI runs
      --landmarks     the landmark design of the catalogs: pairs (default) or triplets (experimental; cached apart)
      --no-compact    measure a catalog as its build left it (several index segments) instead of compacting it first
                      (as `earmark catalog migrate --compact` does; the cached catalog stays compacted)
      --reversed-share  the share of synthetic stretches played backwards, 0…1 (default 1: no synthetic stretch is
                      what a speed, tempo or pitch change makes of a real track's audio, so a skewed clip has no
                      copies of itself to be matched to; 0.25 is the generator of the large-catalog issue, whose
                      forward stretches are such copies; catalogs of a share other than 0.25 are cached as -revNN)
      --postgres      measure a copy of each catalog in a database of the PostgreSQL server that PGHOST, PGPORT and
                      PGUSER name (database scale_…, made with `earmark catalog copy` and `catalog migrate --compact`
                      once, kept while it holds as many tracks), instead of the file; its copy and compaction are timed
      --shard         (with --postgres) a shard server: each copy is a catalog sharded over these (postgres_fdw partitions;
                      the PGHOST server is the coordinator), database scale_…_sN on each; repeat per shard
      --clients       also the throughput of N matching threads at once (and of one, for the ratio), each with its own
                      connection, over the 10-s clips (each matched once per run)
      --writers       also the ingest speed into a new catalog (a new database with --postgres) by that many writer
                      threads at once, each with its own connection, one run per number (e.g. 1,4)
      --ingest-hours  hours of synthetic tracks each ingest run adds (default 20)
      --match-option  replaces one of the matching process's MatchOptions (the CLI runs keep the defaults), for
                      experiments: \(MatchOptions.overridable.joined(separator: ", "))
                      (e.g. candidates=32); repeatable. --explained-share X is --match-option explainedShare=X

    """.utf8))
    exit(status)
}

func parseOptions(_ arguments: [String]) -> Options {
    var o = Options()
    var probe = MatchOptions.default
    var args = arguments.makeIterator()
    while let a = args.next() {
        switch a {
        case "--corpus": o.corpus = args.next() ?? ""
        case "--queries": o.queries = args.next() ?? ""
        case "--skew-queries": o.skewQueries = args.next()
        case "--sizes":
            let sizes = (args.next() ?? "").split(separator: ",").map { Int($0.trimmingCharacters(in: .whitespaces)) }
            guard !sizes.isEmpty, sizes.allSatisfy({ ($0 ?? 0) > 0 }) else { usage(2) }
            o.sizes = Array(Set(sizes.map { $0! })).sorted()
        case "--seed": o.seed = UInt64(args.next() ?? "") ?? o.seed
        case "--cache": o.cache = args.next() ?? o.cache
        case "--earmark": o.earmark = args.next()
        case "--cold-sample": o.coldSample = max(0, Int(args.next() ?? "") ?? o.coldSample)
        case "--minutes": o.minutes = max(0, Double(args.next() ?? "") ?? o.minutes)
        case "--workers": o.workers = max(1, Int(args.next() ?? "") ?? o.workers)
        case "--landmarks":
            switch args.next() {
            case "pairs": o.triplets = false
            case "triplets": o.triplets = true
            default: usage(2)
            }
        case "--no-compact": o.compact = false
        case "--postgres": o.postgres = true
        case "--shard":
            guard let url = args.next(), PostgresURL.isPostgresURL(url) else { usage(2) }
            o.shards.append(url.hasSuffix("/") ? String(url.dropLast()) : url)
        case "--clients":
            guard let n = Int(args.next() ?? ""), n >= 1 else { usage(2) }
            o.clients = n
        case "--writers":
            let ns = (args.next() ?? "").split(separator: ",").map { Int($0) }
            guard !ns.isEmpty, ns.allSatisfy({ ($0 ?? 0) >= 1 }) else { usage(2) }
            o.writers = ns.map { $0! }
        case "--ingest-hours":
            guard let h = Double(args.next() ?? ""), h > 0 else { usage(2) }
            o.ingestHours = h
        case "--reversed-share":
            guard let share = Double(args.next() ?? ""), (0...1).contains(share) else { usage(2) }
            o.reversedShare = share
        case "--explained-share", "--match-option":
            let text = a == "--explained-share" ? "explainedShare=" + (args.next() ?? "") : args.next() ?? ""
            guard probe.override(text) else { usage(2) }
            o.matchOptions.append(text)
        case "--help", "-h": usage(0)
        default: usage(2)
        }
    }
    guard !o.corpus.isEmpty, !o.queries.isEmpty, o.shards.isEmpty || o.postgres else { usage(2) }
    return o
}

// MARK: - Small helpers (as in earmark-bench)

func readTSV(_ path: String) -> [[String: String]] {
    guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { say("cannot read \(path)"); exit(2) }
    let lines = text.split(separator: "\n").map { $0.split(separator: "\t", omittingEmptySubsequences: false).map(String.init) }
    guard let header = lines.first else { return [] }
    return lines.dropFirst().map { row in
        Dictionary(uniqueKeysWithValues: zip(header, row + Array(repeating: "", count: max(0, header.count - row.count))))
    }
}

func seconds(_ d: Duration) -> Double { Double(d.components.seconds) + Double(d.components.attoseconds) * 1e-18 }
func percentile(_ xs: [Double], _ p: Double) -> Double {
    guard !xs.isEmpty else { return .nan }
    let s = xs.sorted()
    return s[min(s.count - 1, Int((Double(s.count - 1) * p).rounded()))]
}
func pad(_ s: String, _ n: Int) -> String { s.count >= n ? s : s + String(repeating: " ", count: n - s.count) }
func lpad(_ s: String, _ n: Int) -> String { s.count >= n ? s : String(repeating: " ", count: n - s.count) + s }
func fmt(_ x: Double, _ d: Int = 1) -> String { x.isFinite ? String(format: "%.\(d)f", x) : "-" }
func percent(_ n: Int, _ of: Int) -> String { of == 0 ? "-" : fmt(100 * Double(n) / Double(of)) + "%" }
func mb(_ bytes: Int64) -> String { fmt(Double(bytes) / 1e6, 1) + " MB" }
/// A line on standard output, written at once (unbuffered even into a pipe: in step with the progress on
/// standard error and with the processes this one starts).
func say(_ text: String = "") { FileHandle.standardOutput.write(Data((text + "\n").utf8)) }
/// A progress line on standard error.
func note(_ text: String) { FileHandle.standardError.write(Data((text + "\n").utf8)) }

/// A fixed pseudo-random order of names for a seed (SplitMix64's finaliser over FNV-1a of the name).
func scrambled(_ name: String, seed: UInt64) -> UInt64 {
    var h: UInt64 = 0xCBF2_9CE4_8422_2325
    for b in name.utf8 { h = (h ^ UInt64(b)) &* 0x0000_0100_0000_01B3 }
    var z = h ^ (seed &* 0x9E37_79B9_7F4A_7C15)
    z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
    z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
    return z ^ (z >> 31)
}

// MARK: - Processes

struct Exit {
    var status: Int32
    var seconds: Double
    /// The process's peak RSS (VmHWM, sampled), in KB.
    var peakRSSKB: Int
}

/// Runs `argv` as a fresh process (posix_spawn, waited for with waitpid: no run-loop polling in the measured wall
/// time; its peak RSS sampled beside). Output goes to /dev/null when `quiet`, else to ours.
func spawn(_ argv: [String], quiet: Bool) -> Exit {
    let clock = ContinuousClock()
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    if quiet {
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
    }
    var cArgs: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) } + [nil]
    defer { for p in cArgs { free(p) } }
    var cEnv: [UnsafeMutablePointer<CChar>?] = ProcessInfo.processInfo.environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
    defer { for p in cEnv { free(p) } }
    var pid: pid_t = 0
    let start = clock.now
    let rc = posix_spawn(&pid, argv[0], &actions, nil, &cArgs, &cEnv)
    guard rc == 0 else { note("cannot run \(argv[0]): \(String(cString: strerror(rc)))"); return Exit(status: -1, seconds: 0, peakRSSKB: 0) }
    // VmHWM only grows, so sampled every 2 ms it misses at most the last moments' growth.
    let memory = StatusSampler(pid: pid, field: "VmHWM", interval: 2_000)
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    let wall = seconds(clock.now - start)
    // WIFEXITED / WEXITSTATUS, which Swift does not import.
    let exited = status & 0x7F == 0
    return Exit(status: exited ? (status >> 8) & 0xFF : 128 + (status & 0x7F), seconds: wall, peakRSSKB: memory.finish(sampleAgain: false))
}

// MARK: - Catalog files

/// The folder of the hash index that the redesigned storage keeps beside the catalog file (not there today).
/// The one place that knows its name.
func indexFolder(of path: String) -> String { path + "-index" }

/// Everything on disk a catalog consists of, of what exists: the file, its index folder, SQLite's write-ahead log.
func catalogEntries(_ path: String) -> [String] {
    [path, indexFolder(of: path), path + "-wal"].filter { FileManager.default.fileExists(atPath: $0) }
}

/// The regular files under `entries` (folders walked recursively).
func regularFiles(_ entries: [String]) -> [String] {
    var out: [String] = []
    for e in entries {
        var isFolder: ObjCBool = false
        guard FileManager.default.fileExists(atPath: e, isDirectory: &isFolder) else { continue }
        if !isFolder.boolValue { out.append(e); continue }
        guard let walk = FileManager.default.enumerator(atPath: e) else { continue }
        for case let rel as String in walk {
            let p = e + "/" + rel
            var sub: ObjCBool = false
            if FileManager.default.fileExists(atPath: p, isDirectory: &sub), !sub.boolValue { out.append(p) }
        }
    }
    return out
}

func fileSize(_ path: String) -> Int64 { (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int).map { Int64($0) } ?? 0 }

/// Bytes of the catalog file and of its index folder.
func catalogBytes(_ path: String) -> (file: Int64, index: Int64) {
    (fileSize(path), regularFiles([indexFolder(of: path)]).reduce(0) { $0 + fileSize($1) })
}

func removeCatalog(_ path: String) {
    for e in [path, indexFolder(of: path), path + "-wal", path + "-shm"] { try? FileManager.default.removeItem(atPath: e) }
}

func copyCatalog(from source: String, to destination: String) throws {
    removeCatalog(destination)
    for e in [indexFolder(of: source), source + "-wal"] where FileManager.default.fileExists(atPath: e) {
        try FileManager.default.copyItem(atPath: e, toPath: destination + e.dropFirst(source.count))
    }
    try FileManager.default.copyItem(atPath: source, toPath: destination)
}

/// Renames a closed catalog; the file goes last, so a catalog under `destination` is always complete.
func renameCatalog(from source: String, to destination: String) throws {
    removeCatalog(destination)
    try? FileManager.default.removeItem(atPath: source + "-shm")
    for e in [indexFolder(of: source), source + "-wal"] where FileManager.default.fileExists(atPath: e) {
        try FileManager.default.moveItem(atPath: e, toPath: destination + e.dropFirst(source.count))
    }
    try FileManager.default.moveItem(atPath: source, toPath: destination)
}

/// Every step a writer must take after a batch of adds, before the catalog is read or closed: called every
/// ``flushEvery`` tracks and at the end of a build.
func finishWrites(_ catalog: Catalog) throws {
    // Pending landmarks into index segments once there are over a million (the catalog flushes every 16 million itself).
    try catalog.close()
}
let flushEvery = 2_000

/// Drops the catalog's pages from the page cache (its files only; dirty pages are written first).
func evictFromPageCache(_ path: String) {
    for f in regularFiles(catalogEntries(path) + [path + "-shm"]) {
        let fd = open(f, O_RDONLY)
        guard fd >= 0 else { continue }
        fdatasync(fd)
        _ = posix_fadvise(fd, 0, 0, Int32(POSIX_FADV_DONTNEED))
        close(fd)
    }
}

/// Reads every file of the catalog once, so its pages are in the page cache (as far as memory allows).
func loadIntoPageCache(_ path: String) {
    let size = 4 << 20
    let buffer = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 4096)
    defer { buffer.deallocate() }
    for f in regularFiles(catalogEntries(path)) {
        let fd = open(f, O_RDONLY)
        guard fd >= 0 else { continue }
        while read(fd, buffer, size) > 0 {}
        close(fd)
    }
}

/// Bytes of the catalog's files now in the page cache (mincore over a read-only mapping).
func residentBytes(_ path: String) -> Int64 {
    let page = Int(sysconf(Int32(_SC_PAGESIZE)))
    var total: Int64 = 0
    for f in regularFiles(catalogEntries(path)) {
        let size = Int(fileSize(f))
        let fd = open(f, O_RDONLY)
        guard fd >= 0, size > 0 else { if fd >= 0 { close(fd) }; continue }
        defer { close(fd) }
        guard let map = mmap(nil, size, PROT_READ, MAP_SHARED, fd, 0), map != UnsafeMutableRawPointer(bitPattern: -1) else { continue }
        defer { munmap(map, size) }
        var vec = [UInt8](repeating: 0, count: (size + page - 1) / page)
        guard mincore(map, size, &vec) == 0 else { continue }
        total += Int64(vec.reduce(0) { $0 + Int($1 & 1) }) * Int64(page)
    }
    return total
}

// MARK: - Building catalogs

struct ScaleCatalog {
    var hours: Int
    var seed: UInt64
    var version: UInt16
    var folder: String
    /// ``Options/variant``.
    var variant = ""
    var name: String { "scale-\(hours)h-seed\(seed)\(variant)-sig\(version)-schema\(Catalog.schemaVersion)-ix\(Catalog.indexFormat)" }
    var path: String { folder + "/" + name + ".earcat" }
    /// Where it is built; renamed to ``path`` once complete.
    var buildingPath: String { folder + "/" + name + ".partial.earcat" }
    var recordPath: String { path + ".build.json" }
    var exists: Bool { FileManager.default.fileExists(atPath: path) }
}

/// How a cached catalog was built (kept beside it as NAME.earcat.build.json).
struct BuildRecord: Codable {
    var tracks: Int
    var realTracks: Int
    var audioSeconds: Double
    /// The smaller catalog it continues (copied), if any.
    var base: String?
    var copySeconds: Double
    /// What this build added and how long it took (the copy included).
    var addedTracks: Int
    var addedSeconds: Double
    var rejected: Int
    /// Of the wall time, seconds spent writing synthetic tracks (Catalog.add and finishWrites).
    var writeSeconds: Double
    var wallSeconds: Double
    var date: String
    /// Seconds `catalog migrate --compact` took after the build (``Catalog/compact()``: the file vacuumed and
    /// the index merged into one segment), nil before it ran.
    var compactSeconds: Double?
    /// Speeds of the adds alone (the copy left out).
    var tracksPerSecond: Double { addedTracks > 0 ? Double(addedTracks) / (wallSeconds - copySeconds) : .nan }

    /// Writes the record as pretty JSON with sorted keys (the NAME.earcat.build.json beside the catalog).
    func write(to path: String) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try encoder.encode(self).write(to: URL(fileURLWithPath: path))
    }
    var realTimeFactor: Double { addedSeconds > 0 ? addedSeconds / (wallSeconds - copySeconds) : .nan }
}

struct RealTrack: Sendable {
    var id: String
    var path: String
    var signature: Signature
    var contentHash: String
    var size: Int64?
    var modified: Double?
}

/// Full signature (all ranks) and audio digest of one corpus track, as `catalog add` would store them. Kept in
/// `folder` as ID.earsig and ID.stamp (path, size, modification time and digest): a track whose file has not
/// changed is read from there instead of decoded.
@concurrent func fingerprintReal(id: String, path: String, folder: String) async throws -> (track: RealTrack, cached: Bool) {
    let abs = URL(fileURLWithPath: path).standardizedFileURL.path
    let a = try FileManager.default.attributesOfItem(atPath: abs)
    let size = (a[.size] as? Int).map { Int64($0) }
    let modified = (a[.modificationDate] as? Date)?.timeIntervalSince1970
    let stamp = "\(abs)\t\(size ?? -1)\t\(modified ?? -1)\t"
    let (sigPath, stampPath) = (folder + "/" + id + ".earsig", folder + "/" + id + ".stamp")
    if let kept = try? String(contentsOfFile: stampPath, encoding: .utf8), kept.hasPrefix(stamp),
       let signature = try? Fingerprinter.readSignatureFile(path: sigPath) {
        return (RealTrack(id: id, path: abs, signature: signature, contentHash: String(kept.dropFirst(stamp.count)),
                          size: size, modified: modified), true)
    }
    let f = try Fingerprinter.fingerprint(path: path, digest: true)
    try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    try f.signature.dataRepresentation().write(to: URL(fileURLWithPath: sigPath), options: .atomic)
    try (stamp + f.contentHash).write(toFile: stampPath, atomically: true, encoding: .utf8)
    return (RealTrack(id: id, path: abs, signature: f.signature, contentHash: f.contentHash, size: size, modified: modified), false)
}

/// The corpus's tracks, in manifest order (the generator's source indices), fingerprinted or read from `cache`.
func loadRealTracks(_ manifest: [[String: String]], cache: String, workers: Int) async throws -> [RealTrack] {
    let clock = ContinuousClock()
    let t0 = clock.now
    let folder = cache + "/sources-sig\(SignatureConfiguration.current.version)"
    var out = [RealTrack?](repeating: nil, count: manifest.count)
    var cached = 0
    try await withThrowingTaskGroup(of: (Int, RealTrack, Bool).self) { group in
        var next = 0
        func launch() {
            guard next < manifest.count else { return }
            let (i, id, path) = (next, manifest[next]["id"]!, manifest[next]["path"]!)
            next += 1
            group.addTask {
                let r = try await fingerprintReal(id: id, path: path, folder: folder)
                return (i, r.track, r.cached)
            }
        }
        for _ in 0..<workers { launch() }
        while let (i, t, wasCached) = try await group.next() {
            out[i] = t
            if wasCached { cached += 1 }
            launch()
        }
    }
    let tracks = out.map { $0! }
    let audio = tracks.reduce(0) { $0 + $1.signature.duration }
    say("sources: \(tracks.count) real tracks, \(fmt(audio / 3600, 2)) h (\(tracks.count - cached) fingerprinted now, \(cached) kept in \(folder)) in \(fmt(seconds(clock.now - t0), 1)) s")
    return tracks
}

/// A synthetic track made ready for `Catalog.add`, as `catalog add` of its .earsig would: nil `new` when
/// the signature could not be matched (catalog add refuses such files).
struct PreparedTrack: Sendable {
    var index: Int
    var new: NewTrack?
    var landmarks: [Landmark]
    var peaks: [Peak]
}

@concurrent func prepareSynthetic(_ generator: SyntheticTrackGenerator, index: Int, configuration: SignatureConfiguration) async -> PreparedTrack {
    let track = generator.track(index)
    let sig = track.signature
    guard (try? sig.validateForMatching(configuration: configuration)) != nil else {
        return PreparedTrack(index: index, new: nil, landmarks: [], peaks: [])
    }
    return PreparedTrack(index: index, new: NewTrack(title: track.title, duration: sig.duration, contentHash: sig.contentIdentity),
                         landmarks: Landmarks.extract(from: sig, role: .reference, configuration: configuration), peaks: sig.peaks)
}

struct Growth {
    var added = 0
    var addedSeconds = 0.0
    var rejected = 0
    /// Wall time spent in `Catalog.add` and ``finishWrites(_:)``: near the whole build, the writer is the bottleneck;
    /// well below it, the workers are.
    var writeSeconds = 0.0
}

/// Adds synthetic tracks `first`, `first + 1`, … until the catalog holds `targetSeconds` of audio. Workers
/// generate tracks and their landmarks; this function, on the main thread, is the only writer and adds
/// them in index order, so the catalog is the same whatever the timing.
@MainActor
func grow(_ catalog: Catalog, generator: SyntheticTrackGenerator, from first: Int, audio start: Double, tracks startCount: Int,
          targetSeconds: Double, workers: Int, label: String) async throws -> Growth {
    let clock = ContinuousClock()
    let t0 = clock.now
    let configuration = catalog.configuration
    var g = Growth()
    var audio = start
    var count = startCount
    try await withThrowingTaskGroup(of: PreparedTrack.self) { group in
        var next = first
        func launch() {
            let i = next
            next += 1
            group.addTask { await prepareSynthetic(generator, index: i, configuration: configuration) }
        }
        // A few tracks ahead per worker, so the workers never wait for the writer.
        for _ in 0..<(4 * workers) { launch() }
        var ready: [Int: PreparedTrack] = [:]
        var nextToWrite = first
        while audio < targetSeconds, let p = try await group.next() {
            ready[p.index] = p
            launch()
            while audio < targetSeconds, let p = ready.removeValue(forKey: nextToWrite) {
                nextToWrite += 1
                guard let new = p.new else { g.rejected += 1; continue }
                let w = clock.now
                let result = try catalog.add(new, landmarks: p.landmarks, peaks: p.peaks)
                g.writeSeconds += seconds(clock.now - w)
                guard case .added = result else { g.rejected += 1; continue }
                g.added += 1
                g.addedSeconds += new.duration
                audio += new.duration
                count += 1
                if g.added % flushEvery == 0 {
                    let w = clock.now
                    try finishWrites(catalog)
                    g.writeSeconds += seconds(clock.now - w)
                    let wall = seconds(clock.now - t0)
                    note("  \(label): \(count) tracks, \(fmt(audio / 3600, 1)) h; \(fmt(Double(g.added) / wall, 1)) tracks/s, \(fmt(g.addedSeconds / wall, 0))× real time in \(fmt(wall, 0)) s, writer busy \(fmt(100 * g.writeSeconds / wall, 0))%")
                }
            }
        }
        group.cancelAll()
    }
    let w = clock.now
    try finishWrites(catalog)
    g.writeSeconds += seconds(clock.now - w)
    return g
}

/// The index of the last synthetic track of `seed` in the catalog (tracks are titled `Synthetic SEED-INDEX`).
func lastSyntheticIndex(_ catalog: Catalog, seed: UInt64) throws -> Int? {
    let prefix = "Synthetic \(seed)-"
    return try catalog.tracks().compactMap { t in t.title.flatMap { $0.hasPrefix(prefix) ? Int($0.dropFirst(prefix.count)) : nil } }.max()
}

/// Builds `target` under its building name and renames it when complete: from a copy of `base` when given
/// (continuing its synthetic tracks), else from the real tracks first. An interrupted build of `target`
/// that got as far as its synthetic tracks is continued instead: it holds the real tracks and synthetic
/// tracks 0…k, each committed on its own (with its landmarks, pending until a flush moves them into a segment).
@MainActor
func build(_ target: ScaleCatalog, base: ScaleCatalog?, real: [RealTrack], generator: SyntheticTrackGenerator, workers: Int) async throws -> BuildRecord {
    let clock = ContinuousClock()
    let t0 = clock.now
    let temp = target.buildingPath
    var resumed = false
    if FileManager.default.fileExists(atPath: temp) {
        resumed = ((try? Catalog(path: temp)).flatMap { try? lastSyntheticIndex($0, seed: target.seed) }) != nil
        if !resumed { removeCatalog(temp) }
    }
    say("building " + (resumed ? "on: continuing the interrupted build in \(temp)" : base.map { "from a copy of \($0.name)" } ?? "from scratch") + " …")
    var copySeconds = 0.0
    if let base, !resumed {
        try copyCatalog(from: base.path, to: temp)
        copySeconds = seconds(clock.now - t0)
        say("copied \(base.name) (\(mb(catalogBytes(base.path).file + catalogBytes(base.path).index))) in \(fmt(copySeconds, 1)) s")
    }
    var record: BuildRecord
    do {
        let catalog = try Catalog(path: temp, create: true, configuration: design)
        var realCount = 0
        var added = 0, addedSeconds = 0.0, rejected = 0
        if base == nil && !resumed {
            for t in real {
                let new = NewTrack(title: t.id, duration: t.signature.duration, sourcePath: t.path, sourceSize: t.size,
                                   sourceModified: t.modified, contentHash: t.contentHash)
                guard (try? t.signature.validateForMatching(configuration: catalog.configuration)) != nil else {
                    say("real track \(t.id) cannot be matched (catalog add would refuse it); left out")
                    rejected += 1
                    continue
                }
                let landmarks = Landmarks.extract(from: t.signature, role: .reference, configuration: catalog.configuration)
                if case .added = try catalog.add(new, landmarks: landmarks, peaks: t.signature.peaks) {
                    added += 1
                    addedSeconds += t.signature.duration
                } else {
                    say("real track \(t.id) is a duplicate of another; left out")
                    rejected += 1
                }
            }
            try finishWrites(catalog)
        }
        let before = try catalog.stats()
        realCount = Set(real.map(\.id)).intersection(try catalog.tracks().compactMap(\.title)).count
        let first = (try lastSyntheticIndex(catalog, seed: target.seed)).map { $0 + 1 } ?? 0
        let g = try await grow(catalog, generator: generator, from: first, audio: before.totalDuration, tracks: before.trackCount,
                               targetSeconds: Double(target.hours) * 3600, workers: workers, label: target.name)
        let after = try catalog.stats()
        record = BuildRecord(tracks: after.trackCount, realTracks: realCount, audioSeconds: after.totalDuration, base: resumed ? "an interrupted build" : base?.name,
                             copySeconds: copySeconds, addedTracks: added + g.added, addedSeconds: addedSeconds + g.addedSeconds,
                             rejected: rejected + g.rejected, writeSeconds: g.writeSeconds, wallSeconds: 0, date: ISO8601DateFormatter().string(from: Date()))
    }   // the catalog is closed here: SQLite checkpoints its write-ahead log into the file
    record.wallSeconds = seconds(clock.now - t0)
    try record.write(to: target.recordPath)
    try renameCatalog(from: temp, to: target.path)
    return record
}

// MARK: - Query clips

struct Clip {
    /// "main" or "skew".
    var querySet: String
    var row: [String: String]
    var signaturePath: String
    var error: String?
    var key: String { querySet + "/" + row["qid"]! }
    var duration: Double { Double(row["duration_s"] ?? "") ?? 0 }
    var isPositive: Bool { row["kind"] == "pos" }
}

/// Where the signature of clip `path` is cached: under `cache`/clip-sigs-sigV, at the clip's path relative to
/// the corpus root (the cache's parent folder) when it is inside it, else at its absolute path.
func clipSignaturePath(_ path: String, cache: String, version: UInt16) -> String {
    let abs = URL(fileURLWithPath: path).standardizedFileURL.path
    let root = URL(fileURLWithPath: cache).deletingLastPathComponent().standardizedFileURL.path + "/"
    let rel = abs.hasPrefix(root) ? String(abs.dropFirst(root.count)) : "abs" + abs
    return cache + "/clip-sigs-sig\(version)/" + rel + ".earsig"
}

@concurrent func fingerprintClip(_ path: String, to sigPath: String) async -> String? {
    do {
        let f = try Fingerprinter.fingerprint(path: path, digest: false)
        try FileManager.default.createDirectory(atPath: (sigPath as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try f.signature.dataRepresentation().write(to: URL(fileURLWithPath: sigPath), options: .atomic)
        return nil
    } catch {
        return "\(error)"
    }
}

/// The clips of a query set, each fingerprinted once: a cached signature newer than its clip is kept.
func prepareClips(_ queries: String, set: String, cache: String, workers: Int) async -> [Clip] {
    let clock = ContinuousClock()
    let t0 = clock.now
    // Clips are fingerprinted as `earmark match` does, whatever keys the catalogs use.
    let version = SignatureConfiguration.current.version
    var clips = readTSV(queries + "/queries.tsv").map { row in
        Clip(querySet: set, row: row, signaturePath: clipSignaturePath(row["path"]!, cache: cache, version: version))
    }
    func modified(_ p: String) -> Date? { (try? FileManager.default.attributesOfItem(atPath: p))?[.modificationDate] as? Date }
    let stale = clips.indices.filter { i in
        guard let sig = modified(clips[i].signaturePath), let clip = modified(clips[i].row["path"]!) else { return true }
        return sig < clip
    }
    await withTaskGroup(of: (Int, String?).self) { group in
        var next = 0
        func launch() {
            guard next < stale.count else { return }
            let i = stale[next]
            let (path, sig) = (clips[i].row["path"]!, clips[i].signaturePath)
            next += 1
            group.addTask { (i, await fingerprintClip(path, to: sig)) }
        }
        for _ in 0..<workers { launch() }
        while let (i, error) = await group.next() {
            clips[i].error = error
            launch()
        }
    }
    let failed = clips.filter { $0.error != nil }
    say("query set \(set): \(queries) — \(clips.count) clips, \(stale.count) fingerprinted now (\(fmt(seconds(clock.now - t0), 1)) s), \(clips.count - stale.count) signatures cached"
          + (failed.isEmpty ? "" : "; \(failed.count) unreadable (e.g. \(failed[0].row["qid"]!): \(failed[0].error!))"))
    return clips
}

// MARK: - Matching child (hidden subcommand)

struct ChildResult: Codable {
    var key: String
    var top: String?
    var significance: Double?
    /// The stretch of the top match's track that was heard, in seconds.
    var referenceStart: Double?
    var referenceEnd: Double?
    var ms: Double
    /// CPU time of the matching thread over the same call: what a busy machine does not inflate.
    var cpuMs: Double?
    var error: String?
    /// Landmarks looked up and postings found by the search that gave the answer (the first search when
    /// nothing matched): for clips of music not in the catalog, the chance load the catalog puts on a query.
    var landmarks: Int?
    var postings: Int?
}

struct ChildReport: Codable {
    var openMs: Double
    var firstMs: Double
    var secondMs: Double
    /// In list order; fewer than listed when the time budget ran out.
    var results: [ChildResult]
    /// The most anonymous memory (RssAnon: the process's own, not the index pages it maps from the page
    /// cache) seen by a sampler every 10 ms, in MB.
    var peakAnonMB: Double?
    /// The process's peak RSS (VmHWM) when it ended, in MB.
    var peakRSSMB: Double?
}

/// Samples a field of a process's `/proc/PID/status` (in kB) every `interval` µs on a thread of its own, keeping the
/// largest: `RssAnon` of this process (its own memory, not the index pages it maps), or `VmHWM` of a child (its
/// peak RSS: a spawned child's `ru_maxrss` starts from the parent's, whose memory it shared until its exec).
final class StatusSampler: @unchecked Sendable {
    private let lock = NSLock()
    private var peak = 0
    private var running = true
    private let path: String
    private let field: String

    init(pid: pid_t? = nil, field: String, interval: UInt32 = 10_000) {
        path = pid.map { "/proc/\($0)/status" } ?? "/proc/self/status"
        self.field = field + ":"
        let thread = Thread { [self] in
            while lock.withLock({ running }) {
                let kb = current()
                lock.withLock { peak = max(peak, kb) }
                usleep(interval)
            }
        }
        thread.start()
    }

    /// Stops sampling and returns the peak in kB (sampled once more unless `sampleAgain` is false: a child that has exited).
    func finish(sampleAgain: Bool = true) -> Int {
        lock.withLock {
            running = false
            return sampleAgain ? max(peak, current()) : peak
        }
    }

    private func current() -> Int {
        guard let status = try? String(contentsOfFile: path, encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix(field) }) else { return 0 }
        return Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
    }
}

/// CPU time of the calling thread, in seconds.
func threadCPUSeconds() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}

/// `__match CATALOG LIST OUT SECONDS`: opens the catalog read-only, matches the signatures listed (lines of
/// key TAB path: the first, the second, then all in order, until SECONDS have passed; 0: no limit) and
/// writes a ChildReport as JSON. Only `matcher.match` is timed; each signature is read just before it is
/// matched and dropped after, so the peak RSS is the matcher's.
func runChild(catalogPath: String, list: String, out: String, budget: Double, matchOptions: [String]) throws {
    let clock = ContinuousClock()
    let items = readTSV(list).map { ($0["key"]!, $0["path"]!) }
    let sampler = StatusSampler(field: "RssAnon")
    let t0 = clock.now
    let catalog = try CatalogStores.open(catalogPath, access: .read)
    let matcher = Matcher(catalog: catalog)
    guard matchOptions.allSatisfy({ matcher.options.override($0) }) else { usage(2) }
    let openMs = seconds(clock.now - t0) * 1000
    func once(_ item: (String, String)) -> ChildResult {
        let sig: Signature
        do { sig = try Fingerprinter.readSignatureFile(path: item.1) } catch { return ChildResult(key: item.0, ms: 0, error: "\(error)") }
        let t = clock.now
        let cpu = threadCPUSeconds()
        do {
            let result = try matcher.match(sig)
            let ms = seconds(clock.now - t) * 1000
            let cpuMs = (threadCPUSeconds() - cpu) * 1000
            let top = result.matches.first
            return ChildResult(key: item.0, top: top?.track.title, significance: top?.significance, referenceStart: top?.referenceStart,
                               referenceEnd: top?.referenceEnd, ms: ms, cpuMs: cpuMs, landmarks: result.queryLandmarks,
                               postings: result.candidateHits)
        } catch {
            return ChildResult(key: item.0, ms: seconds(clock.now - t) * 1000, error: "\(error)")
        }
    }
    let firstMs = items.first.map { once($0).ms } ?? .nan
    let secondMs = items.count > 1 ? once(items[1]).ms : .nan
    var results: [ChildResult] = []
    for (n, item) in items.enumerated() {
        if budget > 0, seconds(clock.now - t0) > budget {
            note("  time budget of \(fmt(budget / 60, 1)) min spent after \(n) of \(items.count) clips")
            break
        }
        results.append(once(item))
        if (n + 1) % 500 == 0 { note("  matched \(n + 1)/\(items.count) in \(fmt(seconds(clock.now - t0), 0)) s") }
    }
    try JSONEncoder().encode(ChildReport(openMs: openMs, firstMs: firstMs, secondMs: secondMs, results: results,
                                         peakAnonMB: Double(sampler.finish()) / 1024,
                                         peakRSSMB: Double(StatusSampler(field: "VmHWM").finish()) / 1024))
        .write(to: URL(fileURLWithPath: out))
}

/// The clips in an order whose every prefix holds each cell (query set, kind, degradation, length) about
/// equally often: the cells take turns, in a fixed pseudo-random order, as do the clips of each cell. A run
/// cut short by its time budget still measures every cell.
func stratified(_ clips: [Clip], seed: UInt64) -> [Clip] {
    var cells: [String: [Clip]] = [:]
    for c in clips {
        cells["\(c.querySet) \(c.row["kind"] ?? "") \(c.row["degradation"] ?? "") \(c.duration)", default: []].append(c)
    }
    let queues = cells.sorted { scrambled($0.key, seed: seed) < scrambled($1.key, seed: seed) }
        .map { $0.value.sorted { scrambled($0.key, seed: seed) < scrambled($1.key, seed: seed) } }
    var out: [Clip] = []
    out.reserveCapacity(clips.count)
    for turn in 0..<(queues.map(\.count).max() ?? 0) {
        for q in queues where turn < q.count { out.append(q[turn]) }
    }
    return out
}

// MARK: - Measuring one size

struct Latency {
    var n: Int
    var median: Double
    var p95: Double
    var p99: Double
    init(_ xs: [Double]) { n = xs.count; median = percentile(xs, 0.5); p95 = percentile(xs, 0.95); p99 = percentile(xs, 0.99) }
}

struct SizeSummary {
    var hours: Int
    var tracks: Int
    var audioHours: Double
    var bytes: Int64
    var buildRealTime: Double
    /// Clips matched of those there were (fewer when the time budget ran out).
    var coverage: (Int, Int)
    var recall: (Int, Int)
    /// Of the misses, answers in a synthetic copy of the clip's own audio.
    var lookAlikes: Int
    var falsePositives: (Int, Int)
    var match10: Latency
    var none10: Latency
    /// The same clips' CPU time (see ``ChildResult/cpuMs``).
    var match10CPU: Latency
    var none10CPU: Latency
    var firstMs: Double
    /// Median wall time of the CLI, in ms, for clips it matched and clips it did not: with the catalog cached, evicted.
    /// (Apart: the two take times an order of magnitude apart, and a median over both would land on either.)
    var coldMatch: (cached: Double, evicted: Double)
    var coldNone: (cached: Double, evicted: Double)
    var peakRSSMB: Double
    var skewRecall: (Int, Int)?
    var skewLookAlikes = 0
    var throughput: [ThroughputRun] = []
}

struct Context {
    var options: Options
    var generator: SyntheticTrackGenerator
    /// The corpus id of each of the generator's sources, and the other way round.
    var sourceIDs: [String]
    var sourceIndex: [String: Int]
    var overlaps: [String: Set<String>]
    var realIDs: Set<String>
    var earmark: String
    var selfPath: String
}

func isCorrect(_ want: String?, _ got: String?, _ overlaps: [String: Set<String>]) -> Bool {
    guard let want, let got else { return false }
    return got == want || overlaps[want, default: []].contains(got)
}

/// Positive clips that failed (no usable sound) where their reference holds no peaks either: cut from
/// digital silence, nothing to identify (earmark-bench's rule). Keys of such clips.
func silentReferenceClips(_ failed: [Clip], catalogPath: String) throws -> Set<String> {
    guard !failed.isEmpty else { return [] }
    let catalog = try CatalogStores.open(catalogPath, access: .read)
    let wanted = Set(failed.compactMap { $0.row["track_id"] })
    let idOf = Dictionary(try catalog.tracks().compactMap { t in t.title.flatMap { wanted.contains($0) ? ($0, t.id) : nil } },
                          uniquingKeysWith: { a, _ in a })
    let fd = catalog.configuration.frameDuration
    var out: Set<String> = []
    for c in failed {
        guard let id = c.row["track_id"].flatMap({ idOf[$0] }), let start = Double(c.row["offset_s"] ?? ""),
              let peaks = try? catalog.peaks(trackID: id) else { continue }
        let lo = UInt32(max(0, start / fd)), hi = UInt32((start + c.duration * 1.1) / fd)
        if !peaks.contains(where: { $0.frame >= lo && $0.frame <= hi }) { out.insert(c.key) }
    }
    return out
}

/// Where the synthetic track a clip was matched to got the matched stretch from.
enum Origin {
    /// A piece cut from the clip's own track around where the clip was cut: a bin-shifted, time-scaled
    /// copy of the clip's audio, which a matcher that undoes pitch and speed changes can find as well as the original.
    case clipsOwnPlace
    /// A piece cut elsewhere in the clip's track (or a track overlapping it).
    case clipsTrack
    case elsewhere
}

/// Nil when the answer is not a synthetic track of this seed (or the match did not say where it was heard).
func origin(of r: ChildResult, for c: Clip, context: Context) -> (Origin, [SyntheticTrack.Stretch])? {
    let prefix = "Synthetic \(context.generator.seed)-"
    guard let title = r.top, title.hasPrefix(prefix), let index = Int(title.dropFirst(prefix.count)),
          let a = r.referenceStart, let b = r.referenceEnd, let truth = c.row["track_id"], let offset = Double(c.row["offset_s"] ?? "")
    else { return nil }
    let own = context.sourceIndex[truth]
    let related = Set(([truth] + context.overlaps[truth, default: []]).compactMap { context.sourceIndex[$0] })
    let fd = context.generator.configuration.frameDuration
    let (lo, hi) = (offset - 1, offset + c.duration * 1.1 + 1)
    let heard = context.generator.track(index).stretches.filter { s in
        s.outputStart < b && s.outputStart + Double(s.outputFrames.count) * fd > a
    }
    if heard.contains(where: { $0.source == own && $0.sourceStart < hi && $0.sourceEnd > lo }) { return (.clipsOwnPlace, heard) }
    if heard.contains(where: { related.contains($0.source) }) { return (.clipsTrack, heard) }
    return (.elsewhere, heard)
}

/// Measures the catalog `catalog` names, or its copy at `location` (a PostgreSQL URL) when given.
func measure(_ catalog: ScaleCatalog, location: String? = nil, record: BuildRecord?, clips: [Clip], context: Context) throws -> SizeSummary {
    let o = context.options
    let location = location ?? catalog.path
    let onFile = CatalogStores.isFile(location)
    let stats = try CatalogStores.open(location, access: .read).stats()
    let onShards = onFile ? 0 : shardBytes((try? PostgresURL(location).database) ?? "", shards: o.shards)
    let bytes = onFile ? catalogBytes(location) : (file: stats.fileBytes, index: onShards)
    let total = bytes.file + bytes.index
    say("catalog: \(stats.trackCount) tracks (\(record.map { "\($0.realTracks) real + \($0.tracks - $0.realTracks) synthetic" } ?? "?")), \(fmt(stats.totalDuration / 3600, 2)) h, \(stats.landmarkCount) postings")
    if onFile {
        say("size: \(mb(total)) (file \(mb(bytes.file)), index folder \(mb(bytes.index))) = \(fmt(Double(total) / 1e6 / (stats.totalDuration / 3600), 3)) MB per hour of audio")
    } else {
        say("size: \(mb(total)) in the database \(CatalogStores.shown(location)) (its tables and indexes"
            + (o.shards.isEmpty ? "" : "; \(mb(bytes.file)) on the coordinator, \(mb(onShards)) on \(o.shards.count) shards, each database whole") + ") = \(fmt(Double(total) / 1e6 / (stats.totalDuration / 3600), 3)) MB per hour of audio")
    }

    // --- Warm matching in a child process ---------------------------------------------------------
    let tmp = NSTemporaryDirectory() + "earmark-scale-bench-\(getpid())-\(catalog.hours)"
    defer { try? FileManager.default.removeItem(atPath: tmp + ".tsv"); try? FileManager.default.removeItem(atPath: tmp + ".json") }
    let usable = clips.filter { $0.error == nil }
    let ordered = stratified(usable, seed: o.seed)
    try ("key\tpath\n" + ordered.map { "\($0.key)\t\($0.signaturePath)\n" }.joined()).write(toFile: tmp + ".tsv", atomically: true, encoding: .utf8)
    let warmBudget = o.minutes * 60 * 0.75
    // The first query's time then is a fresh process's with the catalog in the page cache (the last size's
    // eviction runs, or another job, may have dropped it); the evicted case is the CLI's below.
    if onFile { loadIntoPageCache(location) }
    let child = spawn([context.selfPath, "__match", location, tmp + ".tsv", tmp + ".json", "\(warmBudget)"]
                          + o.matchOptions, quiet: false)
    guard child.status == 0, let data = FileManager.default.contents(atPath: tmp + ".json") else {
        throw CatalogError(.ioError, "the matching process failed (exit \(child.status))", path: location)
    }
    let report = try JSONDecoder().decode(ChildReport.self, from: data)
    var resultOf: [String: ChildResult] = [:]
    for r in report.results { resultOf[r.key] = r }
    for c in clips where c.error != nil { resultOf[c.key] = ChildResult(key: c.key, ms: 0, error: c.error) }
    // Clips the time budget left unmatched count nowhere.
    let measured = clips.filter { resultOf[$0.key] != nil }
    let coverage = (report.results.count, usable.count)
    let rssMB = report.peakRSSMB ?? Double(child.peakRSSKB) / 1024
    say("matching process: \(report.results.count) of \(usable.count) clips in \(fmt(child.seconds, 1)) s"
        + (coverage.0 < coverage.1 ? " (time budget \(fmt(warmBudget / 60, 1)) min; every degradation × length cell still measured)" : "")
        + "; open \(fmt(report.openMs, 1)) ms, first query \(fmt(report.firstMs, 1)) ms, second query \(fmt(report.secondMs, 1)) ms (the matcher may copy the index into memory then); peak RSS \(fmt(rssMB, 0)) MB"
        + (report.peakAnonMB.map {
            ", of it its own (anonymous) memory at most \(fmt($0, 0)) MB, the rest "
                + (onFile ? "index pages mapped from the page cache" : "the program's own mapped files (the index is on the server)")
        } ?? ""))

    // --- Throughput: several clients at once ------------------------------------------------------
    var throughput: [ThroughputRun] = []
    if o.clients > 0 {
        let tens = ordered.filter { $0.querySet == "main" && $0.duration == 10 }
        try ("key\tpath\n" + tens.map { "\($0.key)\t\($0.signaturePath)\n" }.joined()).write(toFile: tmp + ".tsv", atomically: true, encoding: .utf8)
        let counts = o.clients == 1 ? [1] : [1, o.clients]
        let t = spawn([context.selfPath, "__throughput", location, tmp + ".tsv", tmp + ".json", counts.map(String.init).joined(separator: ",")]
                          + o.matchOptions, quiet: false)
        if t.status == 0, let data = FileManager.default.contents(atPath: tmp + ".json") {
            throughput = try JSONDecoder().decode([ThroughputRun].self, from: data)
            say("throughput on the \(tens.count) 10-s clips, each matched once, every client with its own connection (peak RSS of the process \(t.peakRSSKB / 1024) MB):")
            for r in throughput {
                let l = Latency(r.ms)
                say("  \(r.clients) client\(r.clients == 1 ? "" : "s"): \(r.queries) queries in \(fmt(r.seconds, 1)) s = \(fmt(r.perSecond, 1)) queries/s (\(fmt(r.perSecond * 10, 0))× real time)"
                    + (r.clients > 1 ? ", \(fmt(r.perSecond / throughput[0].perSecond, 2))× one client's" : "")
                    + "; latency median \(fmt(l.median, 1)) ms, p99 \(fmt(l.p99, 1)) ms"
                    + (r.cpuMs.isEmpty ? "" : "; CPU a query median \(fmt(Latency(r.cpuMs).median, 1)) ms")
                    + (r.errors > 0 ? "; \(r.errors) errors" : ""))
            }
        } else {
            say("throughput: the process failed (exit \(t.status))")
        }
    }

    // --- Recall --------------------------------------------------------------------------------------
    let main = measured.filter { $0.querySet == "main" }
    let failedPositives = measured.filter { $0.isPositive && resultOf[$0.key]?.error != nil }
    let silent = try silentReferenceClips(failedPositives, catalogPath: location)
    func correct(_ c: Clip) -> Bool { isCorrect(c.row["track_id"], resultOf[c.key]?.top, context.overlaps) }
    func recallTable(_ positives: [Clip]) {
        let degs = Array(Set(positives.map { $0.row["degradation"]! })).sorted()
        let durs = Array(Set(positives.map(\.duration))).sorted()
        say(pad("degradation", 12) + durs.map { lpad(fmt($0, 0) + " s", 8) }.joined() + lpad("all", 8) + lpad("clips", 7))
        for d in degs {
            let row = positives.filter { $0.row["degradation"] == d }
            var line = pad(d, 12)
            for s in durs {
                let cell = row.filter { $0.duration == s }
                line += lpad(cell.isEmpty ? "-" : fmt(100 * Double(cell.filter(correct).count) / Double(cell.count)), 8)
            }
            say(line + lpad(fmt(100 * Double(row.filter(correct).count) / Double(max(1, row.count))), 8) + lpad("\(row.count)", 7))
        }
    }
    /// Wrong answers that are look-alikes (see ``Origin/clipsOwnPlace``).
    func lookAlikes(_ positives: [Clip]) -> Int {
        positives.filter { !correct($0) && origin(of: resultOf[$0.key]!, for: $0, context: context)?.0 == .clipsOwnPlace }.count
    }
    func misses(_ positives: [Clip]) -> String {
        let wrong = positives.filter { !correct($0) }
        let none = wrong.filter { resultOf[$0.key]?.top == nil }.count
        let real = wrong.filter { resultOf[$0.key]?.top.map(context.realIDs.contains) ?? false }.count
        let origins = wrong.compactMap { c in origin(of: resultOf[c.key]!, for: c, context: context).map { (c, $0.0, $0.1) } }
        let place = origins.filter { $0.1 == .clipsOwnPlace }.count, track = origins.filter { $0.1 == .clipsTrack }.count
        var text = "misses: \(none) no match, \(real) another real track, \(wrong.count - none - real) a synthetic track"
        if !origins.isEmpty {
            text += ", heard in a stretch cut from the clip's own track where the clip was cut (a bin-shifted, time-scaled copy of the clip's audio) \(place) times, "
                + "from elsewhere in its track \(track), from other tracks \(origins.count - place - track); recall@1 counting the first right: "
                + percent(positives.filter(correct).count + place, positives.count)
        }
        for (c, _, heard) in origins.filter({ $0.1 != .clipsOwnPlace }).prefix(6) {
            let r = resultOf[c.key]!
            text += "\n  \(c.row["qid"]!) \(c.row["track_id"]!) at \(c.row["offset_s"]!) s, \(c.row["degradation"]!) \(fmt(c.duration, 0)) s → \(r.top!) at \(fmt(r.referenceStart ?? .nan, 1))–\(fmt(r.referenceEnd ?? .nan, 1)) s: "
                + heard.map { s in
                    "\(context.sourceIDs[s.source]) \(fmt(s.sourceStart, 1))–\(fmt(s.sourceEnd, 1)) s (shift \(s.binShift > 0 ? "+" : "")\(s.binShift), scale \(fmt(s.timeScale, 3))\(s.reversed ? ", reversed" : ""))"
                }.joined(separator: " + ")
        }
        return text
    }
    let positives = main.filter { $0.isPositive && !silent.contains($0.key) }
    let hits = positives.filter(correct).count
    let alike = lookAlikes(positives)
    say("")
    say("recall@1 (%) by degradation and clip length")
    recallTable(positives)
    if !silent.isEmpty { say("left out: \(silent.count) clips cut from digital silence in their reference") }
    say("overall recall@1: \(percent(hits, positives.count)) (\(hits)/\(positives.count)); \(misses(positives))")
    let negatives = main.filter { $0.row["kind"] == "neg" }
    let fps = negatives.filter { resultOf[$0.key]?.top != nil }
    say("false positives on negative clips: \(fps.count)/\(negatives.count) = \(percent(fps.count, negatives.count))"
          + (fps.isEmpty ? "" : " (" + fps.prefix(6).map { "\($0.row["qid"]!) → \(resultOf[$0.key]!.top!)" }.joined(separator: ", ") + (fps.count > 6 ? ", …" : "") + ")"))
    let load = negatives.compactMap { c in resultOf[c.key].flatMap { r in r.postings.map { (Double($0), Double(r.landmarks ?? 0)) } } }
    if !load.isEmpty {
        let postings = load.map(\.0), landmarks = load.map(\.1)
        say("chance load on negative clips (first search): postings found median \(fmt(percentile(postings, 0.5), 0)), p95 \(fmt(percentile(postings, 0.95), 0)); "
              + "\(fmt(postings.reduce(0, +) / max(1, landmarks.reduce(0, +)), 4)) postings per landmark looked up")
    }
    let errors = main.filter { resultOf[$0.key]?.error != nil && !silent.contains($0.key) }
    if !errors.isEmpty { say("query errors: \(errors.count) (e.g. \(errors[0].row["qid"]!): \(resultOf[errors[0].key]!.error!))") }

    // --- Warm latency ----------------------------------------------------------------------------
    let answered = main.compactMap { c in resultOf[c.key].flatMap { $0.error == nil ? (c, $0) : nil } }
    func latency(matched: Bool, tenSeconds: Bool, cpu: Bool = false) -> Latency {
        Latency(answered.filter { ($0.1.top != nil) == matched && (!tenSeconds || $0.0.duration == 10) }
            .map { cpu ? $0.1.cpuMs ?? .nan : $0.1.ms })
    }
    for cpu in [false, true] {
        say("")
        say((cpu ? "CPU time of matcher.match's thread (ms)" : "warm latency of matcher.match (ms; signature excluded)")
                .padding(toLength: 55, withPad: " ", startingAt: 0) + ["n", "median", "p95", "p99"].map { lpad($0, 8) }.joined())
        for (label, matched, ten) in [("matched, all clips", true, false), ("no match, all clips", false, false),
                                      ("matched, 10-s clips", true, true), ("no match, 10-s clips", false, true)] {
            let l = latency(matched: matched, tenSeconds: ten, cpu: cpu)
            say(pad("  " + label, 55) + lpad("\(l.n)", 8) + [l.median, l.p95, l.p99].map { lpad(fmt($0, 1), 8) }.joined())
        }
    }

    // --- Skew set --------------------------------------------------------------------------------
    var skewRecall: (Int, Int)?
    var skewLookAlikes = 0
    let skew = measured.filter { $0.querySet == "skew" && $0.isPositive && !silent.contains($0.key) }
    if !skew.isEmpty {
        let c = skew.filter(correct).count
        skewRecall = (c, skew.count)
        skewLookAlikes = lookAlikes(skew)
        say("")
        say("skew set recall@1 (%)")
        recallTable(skew)
        say("skew set recall@1: \(percent(c, skew.count)) (\(c)/\(skew.count)); \(misses(skew))")
        let skewed = skew.compactMap { c in resultOf[c.key].flatMap { $0.error == nil ? $0 : nil } }
        for (label, matched) in [("matched", true), ("no match", false)] {
            let l = Latency(skewed.filter { ($0.top != nil) == matched }.map(\.ms))
            if l.n > 0 { say("  warm latency, \(label): n \(l.n), median \(fmt(l.median, 1)) ms, p95 \(fmt(l.p95, 1)) ms, p99 \(fmt(l.p99, 1)) ms") }
        }
    }

    // --- Cold latency through the CLI ------------------------------------------------------------
    // Positive and negative 10-s clips in turn; half the cold budget with the catalog in the page cache,
    // half with it evicted before each run; each half runs at least one clip.
    var coldMatch = (cached: Double.nan, evicted: Double.nan), coldNone = (cached: Double.nan, evicted: Double.nan)
    let tens = usable.filter { $0.querySet == "main" && $0.duration == 10 }
    func pick(_ cs: [Clip]) -> [Clip] {
        Array(cs.sorted { scrambled($0.key, seed: o.seed) < scrambled($1.key, seed: o.seed) }.prefix(o.coldSample))
    }
    let (pos, neg) = (pick(tens.filter(\.isPositive)), pick(tens.filter { $0.row["kind"] == "neg" }))
    var sample: [Clip] = []
    for i in 0..<max(pos.count, neg.count) {
        if i < pos.count { sample.append(pos[i]) }
        if i < neg.count { sample.append(neg[i]) }
    }
    if !sample.isEmpty {
        let clock = ContinuousClock()
        let half = o.minutes * 60 * 0.25 / 2
        func run(_ c: Clip) -> Exit {
            spawn([context.earmark, "match", c.signaturePath, "--catalog", location, "--json"], quiet: true)
        }
        func runAll(before: () -> Void) -> [Exit] {
            let t0 = clock.now
            var out: [Exit] = []
            for c in sample {
                if !out.isEmpty, o.minutes > 0, seconds(clock.now - t0) > half { break }
                before()
                out.append(run(c))
            }
            return out
        }
        if onFile { loadIntoPageCache(location) }
        _ = run(sample[0])   // the CLI's own binary and libraries into the cache too
        let cached = runAll {}
        var leftResident: Int64 = 0
        // A server's files are its own to cache: only a file catalog is measured evicted.
        let evicted = onFile ? runAll {
            evictFromPageCache(location)
            leftResident = max(leftResident, residentBytes(location))
        } : []
        let broken = (cached + evicted).filter { $0.status > 1 }
        if !broken.isEmpty { say("cold runs: \(broken.count) CLI runs failed (exit \(broken[0].status))") }
        func describe(_ runs: [Exit]) -> String {
            let ms = runs.map { $0.seconds * 1000 }
            let m = runs.filter { $0.status == 0 }.map { $0.seconds * 1000 }, n = runs.filter { $0.status == 1 }.map { $0.seconds * 1000 }
            return "median \(fmt(percentile(ms, 0.5), 0)) ms, max \(fmt(ms.max() ?? .nan, 0)) ms (matched \(m.count): median \(fmt(percentile(m, 0.5), 0)) ms; no match \(n.count): median \(fmt(percentile(n, 0.5), 0)) ms); peak RSS median \(fmt(percentile(runs.map { Double($0.peakRSSKB) / 1024 }, 0.5), 0)) MB"
        }
        func median(_ runs: [Exit], status: Int32) -> Double { percentile(runs.filter { $0.status == status }.map { $0.seconds * 1000 }, 0.5) }
        coldMatch = (median(cached, status: 0), median(evicted, status: 0))
        coldNone = (median(cached, status: 1), median(evicted, status: 1))
        say("")
        say("cold queries: `earmark match CLIP.earsig --catalog … --json` as a fresh process, \(pos.count) positive and \(neg.count) negative 10-s clips in turn")
        say("  catalog in the page cache, \(cached.count) runs: " + describe(cached))
        if onFile {
            say("  catalog evicted before each, \(evicted.count) runs: " + describe(evicted))
            say("  (after each eviction at most \(mb(leftResident)) of the catalog's \(mb(total)) stayed in the page cache)")
        }
    }
    return SizeSummary(hours: catalog.hours, tracks: stats.trackCount, audioHours: stats.totalDuration / 3600, bytes: total,
                       buildRealTime: record?.realTimeFactor ?? .nan, coverage: coverage, recall: (hits, positives.count), lookAlikes: alike,
                       falsePositives: (fps.count, negatives.count),
                       match10: latency(matched: true, tenSeconds: true), none10: latency(matched: false, tenSeconds: true),
                       match10CPU: latency(matched: true, tenSeconds: true, cpu: true),
                       none10CPU: latency(matched: false, tenSeconds: true, cpu: true),
                       firstMs: report.firstMs, coldMatch: coldMatch, coldNone: coldNone, peakRSSMB: rssMB, skewRecall: skewRecall,
                       skewLookAlikes: skewLookAlikes, throughput: throughput)
}

func printSummary(_ rows: [SizeSummary]) {
    guard let base = rows.first else { return }
    say("")
    say("== summary (latencies in ms, of 10-s clips; CPU: the matching thread's CPU time, what a busy machine does not inflate; cold: the CLI's median with the catalog cached / evicted, for clips it matched and clips it did not; build × real time: of the tracks each build added; clips: matched within the time budget; "
        + "+alike: recall counting answers in a synthetic copy of the clip's own audio as right)")
    let header = ["size", "tracks", "hours", "MB", "MB/h", "build ×RT", "clips", "recall", "+alike", "FP", "match med", "match p99", "none med", "none p99",
                  "CPU match med", "CPU none med", "first q", "cold match c/e", "cold none c/e", "RSS MB"] + (rows.contains { $0.skewRecall != nil } ? ["skew recall", "+alike"] : [])
    let widths = header.map { max(8, $0.count + 2) }
    func line(_ cells: [String]) -> String { zip(cells, widths).map { lpad($0, $1) }.joined() }
    say(line(header))
    for r in rows {
        var cells = ["\(r.hours) h", "\(r.tracks)", fmt(r.audioHours, 1), fmt(Double(r.bytes) / 1e6, 1), fmt(Double(r.bytes) / 1e6 / r.audioHours, 3),
                     fmt(r.buildRealTime, 0), r.coverage.0 == r.coverage.1 ? "all" : "\(r.coverage.0)/\(r.coverage.1)", percent(r.recall.0, r.recall.1),
                     percent(r.recall.0 + r.lookAlikes, r.recall.1), "\(r.falsePositives.0)/\(r.falsePositives.1)",
                     fmt(r.match10.median, 1), fmt(r.match10.p99, 1), fmt(r.none10.median, 1), fmt(r.none10.p99, 1),
                     fmt(r.match10CPU.median, 1), fmt(r.none10CPU.median, 1), fmt(r.firstMs, 1),
                     fmt(r.coldMatch.cached, 0) + "/" + fmt(r.coldMatch.evicted, 0), fmt(r.coldNone.cached, 0) + "/" + fmt(r.coldNone.evicted, 0),
                     fmt(r.peakRSSMB, 0)]
        if let s = r.skewRecall { cells += [percent(s.0, s.1), percent(s.0 + r.skewLookAlikes, s.1)] }
        while cells.count < header.count { cells.append("-") }
        say(line(cells))
    }
    for r in rows where !r.throughput.isEmpty {
        say("throughput at \(r.hours) h (10-s clips): " + r.throughput.map { t in
            "\(t.clients) client\(t.clients == 1 ? "" : "s") \(fmt(t.perSecond, 1)) queries/s (median \(fmt(Latency(t.ms).median, 1)) ms, p99 \(fmt(Latency(t.ms).p99, 1)) ms)"
        }.joined(separator: ", "))
    }
    guard rows.count > 1 else { return }
    say("")
    say("latency relative to \(base.hours) h")
    let ratioHeader = ["size", "match med", "match p99", "none med", "none p99", "first q", "cold match c/e", "cold none c/e", "RSS",
                       "CPU match med", "CPU none med"]
    let ratioWidths = ratioHeader.map { max(8, $0.count + 2) }
    func ratioLine(_ cells: [String]) -> String { zip(cells, ratioWidths).map { lpad($0, $1) }.joined() }
    func ratio(_ a: Double, _ b: Double) -> String { b > 0 && a.isFinite && b.isFinite ? fmt(a / b, 2) + "×" : "-" }
    say(ratioLine(ratioHeader))
    for r in rows {
        say(ratioLine(["\(r.hours) h", ratio(r.match10.median, base.match10.median), ratio(r.match10.p99, base.match10.p99),
                         ratio(r.none10.median, base.none10.median), ratio(r.none10.p99, base.none10.p99), ratio(r.firstMs, base.firstMs),
                         ratio(r.coldMatch.cached, base.coldMatch.cached) + "/" + ratio(r.coldMatch.evicted, base.coldMatch.evicted),
                         ratio(r.coldNone.cached, base.coldNone.cached) + "/" + ratio(r.coldNone.evicted, base.coldNone.evicted),
                         ratio(r.peakRSSMB, base.peakRSSMB), ratio(r.match10CPU.median, base.match10CPU.median),
                         ratio(r.none10CPU.median, base.none10CPU.median)]))
    }
}

/// The URL of `target`'s copy in a database of its own on the server that PGHOST, PGPORT and PGUSER name: made with
/// `earmark catalog copy` (one writer; verified) and `catalog migrate --compact` the first time, both timed; reused
/// while it holds as many tracks as the file.
func postgresCopy(of target: ScaleCatalog, earmark: String, shards: [String], design: SignatureConfiguration) throws -> String {
    let stem = ((target.path as NSString).lastPathComponent as NSString).deletingPathExtension
    let name = "scale_" + String(stem.lowercased().map { $0.isLetter || $0.isNumber ? $0 : "_" }) + (shards.isEmpty ? "" : "_s\(shards.count)")
    let url = "postgres:///\(name)"
    let want = try Catalog(path: target.path, readOnly: true).stats()
    // The shard servers of this run may listen elsewhere than when the copy was made: the coordinator is told.
    for (k, s) in shards.enumerated() {
        guard let u = try? PostgresURL(s + "/" + name), case .tcp(let host) = u.host else { continue }
        _ = psqlValue(nil, name, "ALTER SERVER earmark_shard_\(k + 1) OPTIONS (SET host '\(host)', SET port '\(u.port)')")
    }
    if (try? CatalogStores.open(url, access: .read).trackCount()) == want.trackCount {
        say("postgres: \(url) holds the copy already" + (shards.isEmpty ? "" : ", sharded over \(shards.count) servers"))
        return url
    }
    _ = try preparePostgresCatalog(name, shards: shards, design: design)   // when there, the copy resumes
    let copy = spawn([earmark, "catalog", "copy", target.path, url], quiet: true)
    guard copy.status == 0 else { throw CatalogError(.ioError, "earmark catalog copy failed (exit \(copy.status))", path: url) }
    let compact = spawn([earmark, "catalog", "migrate", "--compact", "--catalog", url], quiet: true)
    guard compact.status == 0 else { throw CatalogError(.ioError, "earmark catalog migrate --compact failed (exit \(compact.status))", path: url) }
    // A coordinator vacuums only its own tables; each shard the buckets that compaction replaced.
    let vacuum = ContinuousClock.now
    for s in shards { _ = psqlValue(s, name, "VACUUM (FULL, ANALYZE) index_buckets") }
    say("postgres: copied into \(url)" + (shards.isEmpty ? "" : " (sharded over \(shards.count) servers)")
        + " in \(fmt(copy.seconds, 1)) s (\(fmt(want.totalDuration / max(copy.seconds, 1e-9), 0))× real time, one writer, verified; peak RSS \(copy.peakRSSKB / 1024) MB), index compacted in \(fmt(compact.seconds, 1)) s"
        + (shards.isEmpty ? "" : ", the shards vacuumed in \(fmt(seconds(ContinuousClock.now - vacuum), 1)) s"))
    return url
}

// MARK: - Main

let arguments = Array(CommandLine.arguments.dropFirst())
if arguments.first == "__match" {
    guard arguments.count >= 5, let budget = Double(arguments[4]) else { usage(2) }
    do {
        try runChild(catalogPath: arguments[1], list: arguments[2], out: arguments[3], budget: budget,
                     matchOptions: Array(arguments.dropFirst(5)))
    } catch { note("matching process: \(error)"); exit(2) }
    exit(0)
}
if arguments.first == "__throughput" {
    guard arguments.count >= 5 else { usage(2) }
    let counts = arguments[4].split(separator: ",").compactMap { Int($0) }
    do {
        try runThroughputChild(catalogPath: arguments[1], list: arguments[2], out: arguments[3], clients: counts,
                               matchOptions: Array(arguments.dropFirst(5)))
    } catch { note("throughput process: \(error)"); exit(2) }
    exit(0)
}

let o = parseOptions(arguments)
let selfPath = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
let earmark = o.earmark ?? (URL(fileURLWithPath: selfPath).deletingLastPathComponent().path + "/earmark")
guard FileManager.default.isExecutableFile(atPath: earmark) else { say("no earmark CLI at \(earmark) (build it, or give --earmark)"); exit(2) }
try FileManager.default.createDirectory(atPath: o.cache, withIntermediateDirectories: true)
let design: SignatureConfiguration = o.triplets ? .experimentalTriplets : .current
let version = design.version
let manifest = readTSV(o.corpus + "/manifest.tsv")
var overlaps: [String: Set<String>] = [:]
let overlapPath = (o.corpus as NSString).deletingLastPathComponent + "/overlaps.tsv"
if FileManager.default.fileExists(atPath: overlapPath) {
    for r in readTSV(overlapPath) {
        if let a = r["id_a"], let b = r["id_b"] { overlaps[a, default: []].insert(b); overlaps[b, default: []].insert(a) }
    }
}
say("earmark-scale-bench: sizes \(o.sizes.map { "\($0) h" }.joined(separator: ", ")), seed \(o.seed), signature version \(version), \(fmt(100 * o.reversedShare, 0)) % of synthetic stretches reversed, \(o.matchOptions.map { "\($0), " }.joined())\(o.workers) workers, cache \(o.cache)")

var clips = await prepareClips(o.queries, set: "main", cache: o.cache, workers: o.workers)
if let skew = o.skewQueries { clips += await prepareClips(skew, set: "skew", cache: o.cache, workers: o.workers) }

/// Sizes of the catalogs of this seed and version in the cache, in increasing order.
func cachedSizes(in cache: String, seed: UInt64, variant: String, version: UInt16) -> [Int] {
    let pattern = try! Regex("^scale-([0-9]+)h-seed\(seed)\(variant)-sig\(version)-schema\(Catalog.schemaVersion)-ix\(Catalog.indexFormat)\\.earcat$")
    return ((try? FileManager.default.contentsOfDirectory(atPath: cache)) ?? []).compactMap { name in
        (try? pattern.wholeMatch(in: name)).flatMap { $0.output[1].substring.flatMap { Int($0) } }
    }.sorted()
}

// The real tracks are needed to build catalogs and to tell which synthetic tracks copy a clip's audio.
let real = try await loadRealTracks(manifest, cache: o.cache, workers: o.workers)
let generator = SyntheticTrackGenerator(sources: real.map(\.signature), seed: o.seed, reversedShare: o.reversedShare)
let context = Context(options: o, generator: generator, sourceIDs: real.map(\.id), sourceIndex: Dictionary(real.enumerated().map { ($1.id, $0) }, uniquingKeysWith: { a, _ in a }),
                      overlaps: overlaps, realIDs: Set(real.map(\.id)), earmark: earmark, selfPath: selfPath)
var summaries: [SizeSummary] = []
for hours in o.sizes {
    let target = ScaleCatalog(hours: hours, seed: o.seed, version: version, folder: o.cache, variant: o.variant)
    say("")
    say("== \(hours) h: \(target.path)")
    var record = (try? Data(contentsOf: URL(fileURLWithPath: target.recordPath))).flatMap { try? JSONDecoder().decode(BuildRecord.self, from: $0) }
    if target.exists {
        say("cached" + (record.map { r in
            " (built \(r.date)\(r.base.map { " from \($0)" } ?? ""): \(r.addedTracks) tracks added in \(fmt(r.wallSeconds - r.copySeconds, 0)) s = \(fmt(r.tracksPerSecond, 1)) tracks/s, \(fmt(r.realTimeFactor, 0))× real time)"
        } ?? ""))
    } else {
        let base = cachedSizes(in: o.cache, seed: o.seed, variant: o.variant, version: version).last { $0 < hours }
            .map { ScaleCatalog(hours: $0, seed: o.seed, version: version, folder: o.cache, variant: o.variant) }
        let r = try await build(target, base: base, real: real, generator: generator, workers: o.workers)
        record = r
        say("built: \(r.tracks) tracks, \(fmt(r.audioSeconds / 3600, 2)) h; added \(r.addedTracks) tracks (\(fmt(r.addedSeconds / 3600, 2)) h, \(r.rejected) refused) in \(fmt(r.wallSeconds - r.copySeconds, 1)) s wall (copy \(fmt(r.copySeconds, 1)) s more) = \(fmt(r.tracksPerSecond, 1)) tracks/s, \(fmt(r.realTimeFactor, 0))× real time; writer busy \(fmt(100 * r.writeSeconds / (r.wallSeconds - r.copySeconds), 0))% of the time")
    }
    // Queries read one segment instead of several (a key's postings are two cache misses a segment), as after
    // `earmark catalog migrate --compact`, which a bulk ingest should end with; the cached catalog stays compacted.
    if o.compact, let catalog = try? Catalog(path: target.path), let layout = try? catalog.indexLayout(), layout.segments > 1 {
        let t0 = ContinuousClock.now
        try catalog.compact()
        let took = seconds(ContinuousClock.now - t0)
        say("compacted: \(layout.segments) index segments into 1 in \(fmt(took, 1)) s (the file vacuumed too)")
        record?.compactSeconds = took
        try record?.write(to: target.recordPath)
    } else if let took = record?.compactSeconds {
        say("compacted after its build in \(fmt(took, 1)) s")
    }
    let location = o.postgres ? try postgresCopy(of: target, earmark: earmark, shards: o.shards, design: design) : nil
    summaries.append(try measure(target, location: location, record: record, clips: clips, context: context))
}
printSummary(summaries)
if !o.writers.isEmpty {
    _ = try await measureIngest(writers: o.writers, hours: o.ingestHours, postgres: o.postgres, shards: o.shards, folder: o.cache,
                                generator: generator, design: design, workers: o.workers)
}
