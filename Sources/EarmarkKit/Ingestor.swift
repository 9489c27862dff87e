import Foundation

/// What happened to one file of a `catalog add`.
public struct IngestOutcome: Sendable {
    /// `moved`: the audio of a stored track whose file is gone; the track now points at this file.
    public enum Status: String, Sendable, Codable { case added, duplicate, moved, unchanged, failed }
    public var path: String
    public var status: Status
    public var track: Track?
    public var error: String?
    /// Seconds of audio decoded.
    public var audioSeconds: Double
}

/// Progress of a long ingest, reported after each file (unchanged files included), in argument order.
public struct IngestProgress: Sendable {
    public var done: Int
    public var total: Int
    public var audioSeconds: Double
    public var elapsed: Double
    public var current: String
    /// What happened to `current`.
    public var outcome: IngestOutcome
}

/// Adds files to a catalog: decodes and fingerprints on several workers, writes each track in
/// its own transaction from one place, skips unchanged files and identical audio.
public struct Ingestor: Sendable {
    public var catalogPath: String
    /// Parallel decode/fingerprint workers. Default: the number of cores.
    public var workers: Int
    /// Seconds to wait for another process's write lock.
    public var busyTimeout: Double
    /// Whether each file's loudness, key, rhythm, structure and pace (and, with `soundModel`, its sound classification and instrument activity) are measured in the same decoding pass and
    /// stored with the track. Default false: it makes indexing about three times slower.
    public var analyze: Bool
    /// With `analyze`, each file is also classified with this model (stored as kind `sound`).
    public var soundModel: SoundModel?
    /// With `analyze` and `soundModel`, the speech of each file is also transcribed with this model (stored as kind
    /// `speech` when the file has speech).
    public var speechModel: SpeechModel?

    public init(catalogPath: String, workers: Int = ProcessInfo.processInfo.activeProcessorCount, busyTimeout: Double = 30,
                analyze: Bool = false, soundModel: SoundModel? = nil, speechModel: SpeechModel? = nil) {
        self.catalogPath = catalogPath
        self.workers = max(1, workers)
        self.busyTimeout = busyTimeout
        self.analyze = analyze
        self.soundModel = soundModel
        self.speechModel = speechModel
    }

    /// Adds `files` (already expanded). `describe` supplies per-file fields; missing titles default to the file name.
    /// Catalog-level failures (lock, read-only, damage) throw; per-file failures are reported in the outcomes.
    public func add(files: [String], describe: @Sendable (String) -> TrackDescription = { _ in TrackDescription() },
                    progress: @Sendable (IngestProgress) -> Void = { _ in }) async throws -> [IngestOutcome] {
        let catalog = try CatalogStores.open(catalogPath, access: .create, busyTimeout: busyTimeout)
        let configuration = catalog.configuration
        let clock = ContinuousClock()
        let start = clock.now
        var outcomes: [IngestOutcome?] = Array(repeating: nil, count: files.count)
        var audioSeconds = 0.0
        var done = 0

        // Files whose path, size and mtime match a stored track are skipped without decoding.
        var pending: [Int] = []
        for (i, path) in files.enumerated() {
            let abs = Ingestor.absolute(path)
            if let (size, mtime) = Ingestor.fileStamp(abs),
               let t = try catalog.unchangedTrack(sourcePath: abs, size: size, modified: mtime) {
                let outcome = IngestOutcome(path: path, status: .unchanged, track: t, error: nil, audioSeconds: 0)
                outcomes[i] = outcome
                done += 1
                progress(IngestProgress(done: done, total: files.count, audioSeconds: 0, elapsed: 0, current: path,
                                        outcome: outcome))
            } else {
                pending.append(i)
            }
        }

        try await withThrowingTaskGroup(of: (Int, Result<(FingerprintedFile, [Landmark]), any Error>).self) { group in
            var next = 0
            func launch() {
                guard next < pending.count else { return }
                let index = pending[next]
                next += 1
                let path = files[index]
                let analyze = self.analyze
                let model = analyze ? soundModel : nil
                var analyses = analyze ? Analyses.all(sound: model) : Analyses()
                if analyze, model != nil { analyses.speech = speechModel }
                let requested = analyses
                group.addTask {
                    do {
                        let f = try Fingerprinter.fingerprint(path: path, configuration: configuration.forCatalog,
                                                              analyses: requested)
                        // Silence, near-silence and sub-second files would be tracks nothing can ever match.
                        try f.signature.validateForMatching(configuration: configuration)
                        let landmarks = Landmarks.extract(from: f.signature, role: .reference, configuration: configuration)
                        return (index, .success((f, landmarks)))
                    } catch {
                        return (index, .failure(error))
                    }
                }
            }
            for _ in 0..<workers { launch() }
            // Results are committed in argument order, so track ids follow the order files were given.
            var finished: [Int: Result<(FingerprintedFile, [Landmark]), any Error>] = [:]
            var nextToWrite = 0
            while let (index, result) = try await group.next() {
                launch()
                finished[index] = result
                while nextToWrite < pending.count, let result = finished.removeValue(forKey: pending[nextToWrite]) {
                    let index = pending[nextToWrite]
                    nextToWrite += 1
                    let outcome = try commit(result, path: files[index], into: catalog, describe: describe)
                    outcomes[index] = outcome
                    audioSeconds += outcome.audioSeconds
                    done += 1
                    let elapsed = clock.now - start
                    progress(IngestProgress(done: done, total: files.count, audioSeconds: audioSeconds,
                                            elapsed: Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) * 1e-18,
                                            current: files[index], outcome: outcome))
                }
            }
        }
        // Into the index, so that other processes see the new tracks.
        try catalog.close()
        return outcomes.map { $0! }
    }

    private func commit(_ result: Result<(FingerprintedFile, [Landmark]), any Error>, path: String, into catalog: any CatalogStore,
                        describe: (String) -> TrackDescription) throws -> IngestOutcome {
        switch result {
        case .failure(let error):
            return IngestOutcome(path: path, status: .failed, track: nil, error: "\(error)", audioSeconds: 0)
        case .success(let (file, landmarks)):
            let abs = Ingestor.absolute(path)
            let stamp = Ingestor.fileStamp(abs)
            var d = describe(path)
            if d.title == nil { d.title = PathName.stem(path) }
            let new = NewTrack(title: d.title, artist: d.artist, album: d.album, metadata: d.metadata,
                               duration: file.signature.duration, sourcePath: abs, sourceSize: stamp?.0,
                               sourceModified: stamp?.1, contentHash: file.contentHash)
            var analyses: [TrackAnalysis] = []
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            if let l = file.loudness {
                analyses.append(TrackAnalysis(kind: LoudnessSummary.kind, version: LoudnessSummary.version,
                                              json: try encoder.encode(LoudnessSummary(l))))
            }
            if let sound = file.sound {
                analyses.append(TrackAnalysis(kind: SoundAnalysis.kind, version: SoundAnalysis.version, json: try encoder.encode(sound)))
            }
            if let rhythm = file.rhythm {
                analyses.append(TrackAnalysis(kind: RhythmResult.kind, version: RhythmResult.version, json: try encoder.encode(rhythm)))
            }
            if let structure = file.structure {
                analyses.append(TrackAnalysis(kind: StructureResult.kind, version: StructureResult.version, json: try encoder.encode(structure)))
            }
            if let pace = file.pace {
                analyses.append(TrackAnalysis(kind: PaceResult.kind, version: PaceResult.version, json: try encoder.encode(pace)))
            }
            if let key = file.key {
                analyses.append(TrackAnalysis(kind: KeyResult.kind, version: KeyResult.version, json: try encoder.encode(key)))
            }
            if let instruments = file.instruments {
                analyses.append(TrackAnalysis(kind: InstrumentActivity.kind, version: InstrumentActivity.version,
                                              json: try encoder.encode(InstrumentSummary(instruments))))
            }
            if let speech = file.speech, speech.hasSpeech {
                analyses.append(TrackAnalysis(kind: SpeechAnalysis.kind, version: SpeechAnalysis.version, json: try encoder.encode(speech)))
            }
            switch try catalog.add(new, landmarks: landmarks, peaks: file.signature.peaks, analyses: analyses) {
            case .added(let t):
                return IngestOutcome(path: path, status: .added, track: t, error: nil, audioSeconds: file.signature.duration)
            case .duplicate(let t):
                // A stored track whose file is gone, found again elsewhere, was moved: follow it.
                if t.sourcePath != abs, t.sourcePath.map({ !FileManager.default.fileExists(atPath: $0) }) ?? true {
                    let moved = try catalog.relink(id: t.id, sourcePath: abs, size: stamp?.0, modified: stamp?.1)
                    return IngestOutcome(path: path, status: .moved, track: moved, error: nil, audioSeconds: file.signature.duration)
                }
                return IngestOutcome(path: path, status: .duplicate, track: t, error: nil, audioSeconds: file.signature.duration)
            }
        }
    }

    static func absolute(_ path: String) -> String {
        URL(fileURLWithPath: path).standardizedFileURL.path
    }

    static func fileStamp(_ path: String) -> (Int64, Double)? {
        guard let a = try? FileManager.default.attributesOfItem(atPath: path),
              let size = a[.size] as? Int, let m = a[.modificationDate] as? Date else { return nil }
        return (Int64(size), m.timeIntervalSince1970)
    }
}
