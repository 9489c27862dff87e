import EarmarkKit
import Foundation

/// The real-music test set made by `tools/test-audio.sh`: reference tracks (for catalogs) and
/// negative tracks (other music that must not match them).
public struct TestAudioSet: Sendable {
    public var root: URL
    /// Reference tracks, sorted by file name.
    public var reference: [URL]
    /// Non-catalog music, sorted by file name.
    public var negative: [URL]
    /// Real recorded speech (not in any catalog), sorted by file name.
    public var speech: [URL]
    /// 60 s of six synthetic talkers at once (espeak-ng): babble noise to mix over music.
    public var babble: URL

    /// The reference track whose file name (without extension) is `stem`.
    public func reference(_ stem: String) throws -> URL {
        guard let url = reference.first(where: { $0.deletingPathExtension().lastPathComponent == stem }) else {
            throw TestSupportError("no reference track \(stem) in \(root.path)/reference")
        }
        return url
    }
}

public enum TestAudio {
    /// `$EARMARK_TEST_AUDIO`, else `~/.cache/earmark-test-audio` (the same rule as tools/test-audio.sh).
    public static var directory: URL {
        let env = ProcessInfo.processInfo.environment
        if let dir = env["EARMARK_TEST_AUDIO"], !dir.isEmpty { return URL(fileURLWithPath: dir, isDirectory: true) }
        let home = env["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? NSHomeDirectory()
        return URL(fileURLWithPath: home, isDirectory: true).appendingPathComponent(".cache/earmark-test-audio")
    }

    private static let cached: Result<TestAudioSet, any Error> = Result { try prepare() }

    /// The test set; runs tools/test-audio.sh first (once per process) when the set is missing or
    /// out of date. The script decides that from the folder's READY file and returns at once when ready.
    public static func set() throws -> TestAudioSet { try cached.get() }

    private static func prepare() throws -> TestAudioSet {
        let dir = directory
        let script = TestPaths.repositoryRoot.appendingPathComponent("tools/test-audio.sh").path
        if FileManager.default.fileExists(atPath: script) {
            let out = try Run.process("/bin/bash", [script], environment: ["EARMARK_TEST_AUDIO": dir.path], timeout: 900)
            guard out.status == 0 else { throw TestSupportError("tools/test-audio.sh failed: \(out)") }
        }
        guard FileManager.default.fileExists(atPath: dir.appendingPathComponent("READY").path) else {
            throw TestSupportError("no test audio in \(dir.path): run tools/test-audio.sh")
        }
        func list(_ sub: String) throws -> [URL] {
            let folder = dir.appendingPathComponent(sub)
            return try FileManager.default.contentsOfDirectory(atPath: folder.path)
                .filter { !$0.hasPrefix(".") }.sorted().map { folder.appendingPathComponent($0) }
        }
        let set = TestAudioSet(root: dir, reference: try list("reference"), negative: try list("negative"),
                               speech: try list("speech"), babble: dir.appendingPathComponent("babble/babble.flac"))
        guard set.reference.count >= 4, set.negative.count >= 2, set.speech.count >= 1,
              FileManager.default.fileExists(atPath: set.babble.path) else {
            throw TestSupportError("test audio in \(dir.path) is incomplete; delete it and rerun tools/test-audio.sh")
        }
        return set
    }
}

/// Building test inputs from the test set.
public enum Fixtures {
    /// Cuts `seconds` of `source` starting at `start` into a 16-bit WAV (sox: sample-exact).
    /// `rate`/`channels` convert on the way when given (needed to concatenate clips).
    public static func cut(_ source: URL, start: Double, seconds: Double, to destination: URL,
                           rate: Int? = nil, channels: Int? = nil) throws {
        var args = [source.path, "-b", "16"]
        if let rate { args += ["-r", String(rate)] }
        if let channels { args += ["-c", String(channels)] }
        args += [destination.path, "trim", String(start), String(seconds)]
        try Run.sox(args)
    }

    /// Decodes a whole file to 44.1 kHz mono with Earmark's own reader.
    public static func decode(_ url: URL) throws -> [Float] {
        try AudioFileReader.readAll(path: url.path)
    }

    /// Indexes `files` into the catalog at `catalogPath` (created when missing) with ``Ingestor``
    /// and returns the tracks, in the order of `files`. Throws unless every file was added or was already there.
    public static func index(_ files: [URL], into catalogPath: String, workers: Int = 2) async throws -> [Track] {
        let outcomes = try await Ingestor(catalogPath: catalogPath, workers: workers).add(files: files.map(\.path))
        var tracks: [Track] = []
        for o in outcomes {
            guard let t = o.track, o.status != .failed else {
                throw TestSupportError("indexing \(o.path) failed: \(o.error ?? "no track")")
            }
            tracks.append(t)
        }
        return tracks
    }
}

/// One catalog of all the real reference tracks, built once per test process and shared read-only.
public struct ReferenceCatalog: Sendable {
    public let folder: TemporaryDirectory
    public let path: String
    public let audio: TestAudioSet
    /// Track ids by file stem.
    public let ids: [String: Int64]

    public static let shared = Shared<ReferenceCatalog> { try await build(configuration: nil) }
    /// The same tracks in a catalog made with the experimental triplet keys.
    public static let triplets = Shared<ReferenceCatalog> { try await build(configuration: .experimentalTriplets) }

    private static func build(configuration: SignatureConfiguration?) async throws -> ReferenceCatalog {
        let audio = try TestAudio.set()
        let folder = try TemporaryDirectory(configuration == nil ? "reference-catalog" : "reference-triplets")
        let path = folder.path("reference.earcat")
        // The ingestor keeps the design a catalog was created with.
        if let configuration { _ = try Catalog(path: path, create: true, configuration: configuration) }
        let tracks = try await Fixtures.index(audio.reference, into: path)
        var ids: [String: Int64] = [:]
        for (url, t) in zip(audio.reference, tracks) { ids[url.deletingPathExtension().lastPathComponent] = t.id }
        return ReferenceCatalog(folder: folder, path: path, audio: audio, ids: ids)
    }
}
