import EarmarkKit
import Foundation

/// The writing half of the server: every write (add, update, remove, import) runs here, one at a time, through the
/// same library calls as `earmark catalog add`, `update`, `remove` and `merge`.
///
/// Writes are serialized, so at most one write connection to the catalog is open at a time: each write opens
/// the catalog for writing, as the command does, and closes it when it is done (an add through ``Ingestor``, which
/// commits each track in one transaction and indexes it on close). The read-only connections of
/// ``CatalogWorkers`` see a write from the next request on, as they see another process's. Writes run on a
/// thread of their own (``ThreadExecutor``), decoding and fingerprinting included, never on the event loop or
/// Swift's cooperative threads.
final class CatalogWriter: Sendable {
    let catalogPath: String
    private let lockTimeout: Double
    private let soundModelPath: String?
    private let speechModelPath: String?
    /// The models of `analyze=true`, loaded at the first such add (nil inside: the default model is missing).
    private let soundModel = LockedValue<SoundModel??>(nil)
    private let speechModel = LockedValue<SpeechModel??>(nil)
    private let executor = ThreadExecutor(name: "earmark-writer")
    /// The end of the queue of writes (each write starts when the one before it has finished), and whether
    /// ``close()`` was called.
    private let queue = LockedValue<(tail: Task<Void, Never>?, closed: Bool)>((nil, false))

    /// Opens the catalog for writing once, to fail at start (read-only file, other version) rather than at the
    /// first write.
    static func open(catalogPath: String, lockTimeout: Double, soundModelPath: String?, speechModelPath: String?) throws -> CatalogWriter {
        let catalog = try CatalogStores.open(catalogPath, access: .write, busyTimeout: lockTimeout)
        try catalog.close()
        return CatalogWriter(catalogPath: catalogPath, lockTimeout: lockTimeout, soundModelPath: soundModelPath,
                             speechModelPath: speechModelPath)
    }

    private init(catalogPath: String, lockTimeout: Double, soundModelPath: String?, speechModelPath: String?) {
        self.catalogPath = catalogPath
        self.lockTimeout = lockTimeout
        self.soundModelPath = soundModelPath
        self.speechModelPath = speechModelPath
    }

    /// Runs `job` on the writer's thread after every write queued before it. The job runs to its end even when
    /// the caller is cancelled (a client that leaves does not cut a write in half).
    /// - Throws: 503 `shutting_down` once ``close()`` was called.
    private func serially<T: Sendable>(_ job: @escaping @Sendable () async throws -> T) async throws -> T {
        let executor = executor
        let task = try queue.withLock { queue -> Task<T, any Error> in
            guard !queue.closed else { throw APIError.unavailable("shutting_down", "the server is shutting down") }
            let previous = queue.tail
            let task = Task(executorPreference: executor) {
                await previous?.value
                return try await job()
            }
            queue.tail = Task { _ = try? await task.value }
            return task
        }
        return try await task.value
    }

    /// Runs `body` with the catalog opened for writing, on the writer's thread, after the writes before it.
    private func writing<T: Sendable>(_ body: @escaping @Sendable (any CatalogStore) throws -> T) async throws -> T {
        try await serially { [catalogPath, lockTimeout] in
            let catalog = try CatalogStores.open(catalogPath, access: .write, busyTimeout: lockTimeout)
            let result = try body(catalog)
            try catalog.close()
            return result
        }
    }

    /// Adds the audio file at `file` as `earmark catalog add FILE` does (with `--analyze` when `analyze`, and
    /// `--no-transcribe` unless `transcribe`), and deletes the file. The track's source path becomes `source` (`upload:NAME`) rather than the temporary file's.
    /// Returns the outcome and, when a track was stored or found, the object `catalog info ID --json` prints for it.
    func add(file: String, source: String, description: TrackDescription, analyze: Bool,
             transcribe: Bool = true) async throws -> (IngestOutcome, Data?) {
        defer { try? FileManager.default.removeItem(atPath: file) }
        // The add and the relink are one job of the queue (two transactions: a stop between them leaves the track
        // whole, naming the temporary file).
        return try await serially { [self, catalogPath, lockTimeout] in
            let model: SoundModel? = analyze ? try loadSoundModel() : nil
            // As `catalog add --analyze`: the transcriber reads where the classifier hears speech, so no classifier, no transcript.
            let speech: SpeechModel? = model != nil && transcribe ? try loadSpeechModel() : nil
            let ingestor = Ingestor(catalogPath: catalogPath, workers: 1, busyTimeout: lockTimeout, analyze: analyze, soundModel: model,
                                    speechModel: speech)
            var outcome = try await ingestor.add(files: [file], describe: { _ in description })[0]
            guard let track = outcome.track else { return (outcome, nil) }
            // A track added (or an earlier upload's track, `moved` to this file because that one is gone) names the upload.
            let relink = outcome.status == .added || outcome.status == .moved
            let catalog = try CatalogStores.open(catalogPath, access: .write, busyTimeout: lockTimeout)
            let stored = relink ? try catalog.relink(id: track.id, sourcePath: source, size: nil, modified: nil) : track
            let info = try trackInfoJSON(stored, analyses: try catalog.analyses(trackID: track.id), prettyPrinted: false)
            try catalog.close()
            outcome.track = stored
            return (outcome, info)
        }
    }

    /// The model `--analyze` classifies with: as `catalog add`, a missing default model skips classification.
    private func loadSoundModel() throws -> SoundModel? {
        try CatalogWriter.loadOnce(soundModel) {
            do {
                return try SoundModel.load(path: soundModelPath)
            } catch let e as SoundModelError where e.code == .notFound && soundModelPath == nil {
                return nil
            }
        }
    }

    /// The model `--analyze` transcribes with: as `catalog add`, a missing default model skips the transcript.
    private func loadSpeechModel() throws -> SpeechModel? {
        try CatalogWriter.loadOnce(speechModel) {
            do {
                return try SpeechModel.load(path: speechModelPath)
            } catch let e as SpeechModelError where e.code == .notFound && speechModelPath == nil {
                return nil
            }
        }
    }

    /// The model in `cache`, loaded by `load` the first time (a model found missing stays missing).
    private static func loadOnce<Model>(_ cache: LockedValue<Model??>, _ load: () throws -> Model?) throws -> Model? {
        try cache.withLock { cached in
            if let cached { return cached }
            let loaded = try load()
            cached = .some(loaded)
            return loaded
        }
    }

    /// `earmark catalog update ID …`: changes the fields given; `metadata` adds or replaces keys, `removingKeys`
    /// deletes keys. Returns the object `catalog info ID --json` prints for the track.
    func update(id: Int64, title: String?, artist: String?, album: String?, metadata: [String: JSONValue]?,
                removingKeys: Set<String>) async throws -> Data {
        try await writing { catalog in
            let track = try catalog.update(id: id, title: title, artist: artist, album: album, metadata: metadata, removingKeys: removingKeys)
            return try trackInfoJSON(track, analyses: try catalog.analyses(trackID: id), prettyPrinted: false)
        }
    }

    /// `earmark catalog remove ID`.
    func remove(id: Int64) async throws {
        try await writing { try $0.remove(ids: [id]) }
    }

    /// `earmark catalog merge FILE` for the uploaded catalog file at `file`: opened read-only and integrity-checked
    /// first (nothing is written when it is damaged, not a catalog or of another signature algorithm), then every
    /// track copied in through ``CatalogStore/merge(from:batchPostings:progress:)`` as the command copies them, a track
    /// whose audio the catalog holds already skipped as a duplicate. Deletes the file, and what SQLite made beside
    /// it, in every case.
    /// - Throws: ``APIError`` 422 `damaged_catalog` or `catalog_version_mismatch` for a file that cannot be merged.
    func merge(file: String) async throws -> MergeReport {
        defer { CatalogWriter.removeCatalogFile(file) }
        return try await serially { [catalogPath, lockTimeout] in
            let source: Catalog
            do {
                source = try Catalog(path: file, readOnly: true, busyTimeout: 0)
                let problems = try source.check()
                guard problems.isEmpty else {
                    throw APIError(.unprocessableContent, "damaged_catalog", "the catalog file is damaged: "
                                   + problems.prefix(3).joined(separator: "; ").replacingOccurrences(of: file, with: "upload"))
                }
            } catch let e as CatalogError {
                throw CatalogWriter.uploadError(e, file: file)
            }
            let into = try CatalogStores.open(catalogPath, access: .write, busyTimeout: lockTimeout)
            let (theirs, ours) = (source.configuration, into.configuration)
            guard theirs.version == ours.version else {
                func name(_ c: SignatureConfiguration) -> String {
                    "signature algorithm \(c.version) (\(c.landmarkShape == .pairs ? "pair" : "triplet") landmarks)"
                }
                throw APIError(.unprocessableContent, "catalog_version_mismatch",
                               "the catalog file was built with \(name(theirs)), this catalog with \(name(ours)); tracks cannot move between them")
            }
            do {
                return MergeReport(try into.merge(from: source))
            } catch let e as CatalogError where e.path?.hasPrefix(file) == true || e.code == .invalidArgument {
                // The file's data, not the served catalog, is at fault (check() passed, so hardly ever).
                throw CatalogWriter.uploadError(e, file: file)
            }
        }
    }

    /// The answer for a ``CatalogError`` about the uploaded catalog file at `file`: 422 for what the file holds,
    /// as any other catalog error for the rest (503 when locked, 500 for I/O).
    private static func uploadError(_ e: CatalogError, file: String) -> APIError {
        let message = e.message.replacingOccurrences(of: file, with: "upload")
        switch e.code {
        case .versionMismatch: return APIError(.unprocessableContent, "catalog_version_mismatch", "the catalog file cannot be merged: \(message)")
        case .damaged, .invalidArgument, .notFound, .noSuchTrack:
            return APIError(.unprocessableContent, "damaged_catalog", "the uploaded catalog file cannot be read: \(message)")
        case .locked, .readOnly, .ioError, .unavailable: return APIError.from(CatalogError(e.code, message))
        }
    }

    /// Deletes an uploaded catalog file and whatever opening it made beside it.
    static func removeCatalogFile(_ file: String) {
        for suffix in ["", "-wal", "-shm", "-journal", "-index"] { try? FileManager.default.removeItem(atPath: file + suffix) }
    }

    /// Refuses further writes, waits for those queued and stops the writer's thread.
    func close() async {
        let last = queue.withLock { queue -> Task<Void, Never>? in
            queue.closed = true
            return queue.tail
        }
        await last?.value
        executor.stop()
    }
}
