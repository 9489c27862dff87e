import EarmarkKit
import Foundation
import NIOPosix

/// The blocking half of the server: decoding, matching and catalog reads run here, on a thread pool sized to
/// the cores, never on the event loop or Swift's cooperative threads.
///
/// The catalog is opened once, as one warm ``Recognizer`` per thread (a catalog connection is not
/// thread-safe, so each job borrows one for its whole length; at most one job runs per thread, so one is always
/// free). Readers pick up tracks that other processes add while the server runs, as `earmark match` does.
final class CatalogWorkers: Sendable {
    let catalogPath: String
    private let pool: NIOThreadPool
    private let idle: LockedValue<[WarmRecognizer]>
    private let soundModelPath: String?
    private let soundModel = LockedValue<SoundModel?>(nil)

    /// A recognizer that one pool thread at a time uses: taken from and given back to `idle` under its lock.
    private final class WarmRecognizer: @unchecked Sendable {
        let recognizer: Recognizer
        init(_ recognizer: Recognizer) { self.recognizer = recognizer }
    }

    private init(catalogPath: String, pool: NIOThreadPool, recognizers: [WarmRecognizer], soundModelPath: String?) {
        self.catalogPath = catalogPath
        self.pool = pool
        idle = LockedValue(recognizers)
        self.soundModelPath = soundModelPath
    }

    /// Starts `threads` threads and opens the catalog read-only once for each, loading its index.
    /// - Throws: ``CatalogError`` when the catalog is missing, damaged or of another version.
    static func open(catalogPath: String, threads: Int, lockTimeout: Double, soundModelPath: String?) async throws -> CatalogWorkers {
        let pool = NIOThreadPool(numberOfThreads: max(1, threads))
        pool.start()
        do {
            let count = max(1, threads)
            let recognizers = try await pool.runIfActive {
                try (0..<count).map { _ in
                    let r = try Recognizer(catalogPath: catalogPath, busyTimeout: lockTimeout)
                    // The first lookup opens the index (segments mapped, small in-file indexes read): do it now.
                    try r.matcher.catalog.lookup(hashes: [0]) { _, _, _ in }
                    return WarmRecognizer(r)
                }
            }
            return CatalogWorkers(catalogPath: catalogPath, pool: pool, recognizers: recognizers, soundModelPath: soundModelPath)
        } catch {
            try? await pool.shutdownGracefully()
            throw error
        }
    }

    /// Runs `body` on a pool thread with a warm recognizer of its own.
    func run<T: Sendable>(_ body: @escaping @Sendable (Recognizer) throws -> T) async throws -> T {
        try await pool.runIfActive { [idle] in
            guard let warm = idle.withLock({ $0.popLast() }) else {
                // Cannot happen (one recognizer per thread); refuse rather than share a connection.
                throw APIError.unavailable("busy", "no catalog connection free")
            }
            defer { idle.withLock { $0.append(warm) } }
            return try body(warm.recognizer)
        }
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
