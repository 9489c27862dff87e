import EarmarkKit
import Foundation
import NIOPosix

/// The blocking half of the server: decoding, matching and catalog reads run here, on a thread pool sized to
/// the cores, never on the event loop or Swift's cooperative threads.
///
/// The catalog is opened once, as one warm ``Recognizer`` per thread (a catalog connection is not
/// thread-safe, so each job borrows one for its whole length; at most one job runs per thread, so one is always
/// free). Readers pick up tracks that other processes add while the server runs, as `earmark match` does.
///
/// Reads go to the read locations in turn: the catalog itself, or its replicas (hot standbys of a PostgreSQL
/// primary). A connection found lost (``CatalogError/Code/unavailable``: its server stopped, restarted or was
/// promoted) fails the job it served with 503; the next job on that thread opens a new connection, to the next
/// read location, first.
final class CatalogWorkers: Sendable {
    /// Where reads go: the catalog, or its replicas.
    let readPaths: [String]
    private let lockTimeout: Double
    /// The next read location's number (modulo their count): the workers opened took the first ones.
    private let turn: LockedValue<Int>
    private let pool: NIOThreadPool
    private let idle: LockedValue<[WarmRecognizer]>
    private let soundModelPath: String?
    private let soundModel = LockedValue<SoundModel?>(nil)

    /// A recognizer that one pool thread at a time uses: taken from and given back to `idle` under its lock.
    private final class WarmRecognizer: @unchecked Sendable {
        /// Nil once its connection was lost: the next job opens another.
        var recognizer: Recognizer?
        init(_ recognizer: Recognizer) { self.recognizer = recognizer }
    }

    private init(readPaths: [String], lockTimeout: Double, pool: NIOThreadPool, recognizers: [WarmRecognizer], soundModelPath: String?) {
        self.readPaths = readPaths
        self.lockTimeout = lockTimeout
        self.pool = pool
        idle = LockedValue(recognizers)
        self.soundModelPath = soundModelPath
        turn = LockedValue(recognizers.count)
    }

    /// Starts `threads` threads and opens a catalog read-only once for each, loading its index: the locations of
    /// `readPaths` in turn.
    /// - Throws: ``CatalogError`` when a catalog is missing, damaged, of another version or unreachable.
    static func open(readPaths: [String], threads: Int, lockTimeout: Double, soundModelPath: String?) async throws -> CatalogWorkers {
        precondition(!readPaths.isEmpty)
        let pool = NIOThreadPool(numberOfThreads: max(1, threads))
        pool.start()
        do {
            let count = max(1, threads)
            let recognizers = try await pool.runIfActive {
                try (0..<count).map { WarmRecognizer(try CatalogWorkers.warmRecognizer(readPaths[$0 % readPaths.count], lockTimeout)) }
            }
            return CatalogWorkers(readPaths: readPaths, lockTimeout: lockTimeout, pool: pool, recognizers: recognizers,
                                  soundModelPath: soundModelPath)
        } catch {
            try? await pool.shutdownGracefully()
            throw error
        }
    }

    private static func warmRecognizer(_ path: String, _ lockTimeout: Double) throws -> Recognizer {
        let r = try Recognizer(catalogPath: path, busyTimeout: lockTimeout)
        // The first lookup opens the index (segments mapped, small in-file indexes read): do it now.
        try r.matcher.catalog.lookup(hashes: [0]) { _, _, _ in }
        return r
    }

    /// The read location whose turn it is.
    func nextReadPath() -> String {
        let k = turn.withLock { k in
            defer { k &+= 1 }
            return k
        }
        return readPaths[k % readPaths.count]
    }

    /// Runs `body` on a pool thread with a warm recognizer of its own.
    func run<T: Sendable>(_ body: @escaping @Sendable (Recognizer) throws -> T) async throws -> T {
        try await pool.runIfActive { [self] in
            guard let warm = idle.withLock({ $0.popLast() }) else {
                // Cannot happen (one recognizer per thread); refuse rather than share a connection.
                throw APIError.unavailable("busy", "no catalog connection free")
            }
            defer { idle.withLock { $0.append(warm) } }
            let recognizer: Recognizer
            if let open = warm.recognizer {
                recognizer = open
            } else {
                do {
                    recognizer = try CatalogWorkers.warmRecognizer(nextReadPath(), lockTimeout)
                } catch {
                    throw APIError.from(error)
                }
                warm.recognizer = recognizer
            }
            do {
                return try body(recognizer)
            } catch {
                if CatalogWorkers.isLostConnection(error) { warm.recognizer = nil }
                throw error
            }
        }
    }

    private static func isLostConnection(_ error: any Error) -> Bool {
        if let e = error as? CatalogError { return e.code == .unavailable }
        if let e = error as? APIError { return e.code == "catalog_unavailable" }
        return false
    }

    /// Matches the clip stored at `file` as `earmark match --json` does, and deletes the file.
    /// - Parameters:
    ///   - name: what the report calls the clip.
    ///   - contentType: the request's `Content-Type`, a hint for the format when the bytes do not tell.
    /// - Throws: ``APIError`` (4xx for clips that cannot be read or matched).
    func match(file: String, name: String, contentType: String?, maxMatches: Int, classify: Bool) async throws -> ClipReport {
        do {
            return try await matchOnPool(file: file, name: name, contentType: contentType, maxMatches: maxMatches, classify: classify)
        } catch {
            // A job cancelled (the client left) or refused (shutting down) before it ran leaves the file behind.
            try? FileManager.default.removeItem(atPath: file)
            throw error
        }
    }

    private func matchOnPool(file: String, name: String, contentType: String?, maxMatches: Int, classify: Bool) async throws -> ClipReport {
        try await run { [soundModel, soundModelPath] recognizer in
            var path = file
            defer { try? FileManager.default.removeItem(atPath: path) }
            do {
                path = try ClipFormat.named(file, name: name, contentType: contentType)
                let model = classify ? try CatalogWorkers.load(soundModel, soundModelPath) : nil
                recognizer.matcher.options.maximumMatches = maxMatches
                return try recognizer.report(path: path, name: name, sound: model)
            } catch {
                throw APIError.from(error, path: path, name: name)
            }
        }
    }

    /// The sound model for classification, loaded on a pool thread the first time.
    func loadSoundModel() async throws -> SoundModel {
        try await run { [soundModel, soundModelPath] _ in try CatalogWorkers.load(soundModel, soundModelPath) }
    }

    private static func load(_ cache: LockedValue<SoundModel?>, _ path: String?) throws -> SoundModel {
        try cache.withLock { cached in
            if let cached { return cached }
            let loaded = try SoundModel.load(path: path)
            cached = loaded
            return loaded
        }
    }

    /// Runs `body` with a catalog connection of its own, on a pool thread.
    func read<T: Sendable>(_ body: @escaping @Sendable (any CatalogStore) throws -> T) async throws -> T {
        try await run { try body($0.matcher.catalog) }
    }

    /// Waits for running jobs, stops the threads and closes the catalog connections.
    func close() async {
        try? await pool.shutdownGracefully()
        idle.withLock { $0.removeAll() }
    }
}
