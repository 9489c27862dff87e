import EarmarkKit
import EarmarkTestSupport
import Foundation
import Testing

/// Short real-music files for ingest tests: 15-s excerpts of reference tracks in several formats.
func makeExcerpts(_ specs: [(stem: String, start: Double, name: String)], in dir: URL) throws -> [URL] {
    let audio = try TestAudio.set()
    try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    return try specs.map { spec in
        let out = dir.appendingPathComponent(spec.name)
        if spec.name.hasSuffix(".wav") {
            try Fixtures.cut(try audio.reference(spec.stem), start: spec.start, seconds: 15, to: out)
        } else {
            try Run.sox([try audio.reference(spec.stem).path, out.path, "trim", String(spec.start), "15"])
        }
        return out
    }
}

func statuses(_ outcomes: [IngestOutcome]) -> [String: IngestOutcome.Status] {
    Dictionary(uniqueKeysWithValues: outcomes.map { (URL(fileURLWithPath: $0.path).lastPathComponent, $0.status) })
}

@Suite("Ingestor")
struct IngestorTests {
    @Test("a folder is added with 2 workers; re-adding is unchanged; a copy is a duplicate; a bad file fails alone")
    func folderLifecycle() async throws {
        let dir = try TemporaryDirectory("ingest")
        let music = dir.file("music")
        _ = try makeExcerpts([("pingus-3", 20, "one.wav"), ("pingus-4", 30, "two.flac"), ("sorcerer", 10, "three.ogg")], in: music)
        try FileManager.default.createDirectory(at: music.appendingPathComponent("sub"), withIntermediateDirectories: true)
        try Data("not audio at all\n".utf8).write(to: music.appendingPathComponent("sub/broken.wav"))
        try Data("ignored: no audio extension\n".utf8).write(to: music.appendingPathComponent("README.txt"))
        let catalogPath = dir.path("catalog.earcat")
        let ingestor = Ingestor(catalogPath: catalogPath, workers: 2)

        let files = try expandAudioPaths([music.path])
        #expect(files.map { URL(fileURLWithPath: $0).lastPathComponent }.sorted() == ["broken.wav", "one.wav", "three.ogg", "two.flac"])

        let first = try await ingestor.add(files: files)
        #expect(statuses(first) == ["one.wav": .added, "two.flac": .added, "three.ogg": .added, "broken.wav": .failed])
        let broken = try #require(first.first { $0.path.hasSuffix("broken.wav") })
        #expect(broken.error != nil && broken.track == nil)
        let added = first.filter { $0.status == .added }
        #expect(added.allSatisfy { abs($0.audioSeconds - 15) < 0.05 && ($0.track?.landmarkCount ?? 0) > 100 })
        #expect(Set(added.compactMap(\.track?.title)) == ["one", "two", "three"], "titles default to the file name")
        let ids = first.compactMap(\.track?.id)
        #expect(ids == ids.sorted(), "tracks are committed in the order the files were given")

        let catalog = try Catalog(path: catalogPath, readOnly: true)
        let stored = try catalog.tracks()
        #expect(stored.count == 3)
        #expect(Set(stored.map(\.contentHash)).count == 3)

        // Unchanged files are recognised by path, size and mtime, without decoding.
        let second = try await ingestor.add(files: files)
        #expect(statuses(second) == ["one.wav": .unchanged, "two.flac": .unchanged, "three.ogg": .unchanged, "broken.wav": .failed])
        #expect(second.filter { $0.status == .unchanged }.allSatisfy { $0.audioSeconds == 0 })

        // The same audio under another name, or the same file touched, is a duplicate of the stored track.
        let copy = dir.file("copy-of-one.wav")
        try FileManager.default.copyItem(at: music.appendingPathComponent("one.wav"), to: copy)
        try FileManager.default.setAttributes([.modificationDate: Date(timeIntervalSinceNow: 60)],
                                              ofItemAtPath: music.appendingPathComponent("two.flac").path)
        let third = try await ingestor.add(files: [copy.path, music.appendingPathComponent("two.flac").path])
        #expect(third.map(\.status) == [.duplicate, .duplicate])
        let one = try #require(stored.first { $0.title == "one" })
        #expect(third[0].track?.id == one.id)
        #expect(try catalog.tracks().count == 3)
    }

    @Test("a moved file is relinked by its audio once, then found unchanged without decoding; a copy stays a duplicate")
    func movedFile() async throws {
        let dir = try TemporaryDirectory("ingest-moved")
        let files = try makeExcerpts([("pingus-6", 10, "song.wav")], in: dir.file("old"))
        let catalogPath = dir.path("catalog.earcat")
        let ingestor = Ingestor(catalogPath: catalogPath)
        let first = try await ingestor.add(files: files.map(\.path))
        let id = try #require(first.first?.track?.id)

        let moved = dir.file("new/renamed.wav")
        try FileManager.default.createDirectory(at: moved.deletingLastPathComponent(), withIntermediateDirectories: true)
        try FileManager.default.moveItem(at: files[0], to: moved)
        let second = try await ingestor.add(files: [moved.path])
        #expect(second.map(\.status) == [.moved])
        #expect(second.first?.track?.id == id)
        #expect(second.first?.track?.sourcePath == moved.standardizedFileURL.path)
        let third = try await ingestor.add(files: [moved.path])
        #expect(third.map(\.status) == [.unchanged], "no decoding once relinked")

        let copy = dir.file("copy.wav")
        try FileManager.default.copyItem(at: moved, to: copy)
        #expect(try await ingestor.add(files: [copy.path]).map(\.status) == [.duplicate], "the original is still there")
        #expect(try Catalog(path: catalogPath, readOnly: true).track(id: id)?.sourcePath == moved.standardizedFileURL.path)
    }

    @Test("two Ingestors adding different files at the same time both succeed", arguments: [true, false])
    func concurrentIngestors(catalogExists: Bool) async throws {
        let dir = try TemporaryDirectory("concurrent")
        let left = try makeExcerpts([("pingus-3", 0, "a1.wav"), ("pingus-4", 20, "a2.flac")], in: dir.file("left"))
        let right = try makeExcerpts([("pingus-5", 10, "b1.wav"), ("goin_march", 40, "b2.ogg")], in: dir.file("right"))
        let catalogPath = dir.path("shared.earcat")
        if catalogExists { _ = try Catalog(path: catalogPath, create: true) }

        async let l = Ingestor(catalogPath: catalogPath, workers: 1).add(files: left.map(\.path))
        async let r = Ingestor(catalogPath: catalogPath, workers: 1).add(files: right.map(\.path))
        let (lo, ro) = try await (l, r)
        #expect(lo.map(\.status) == [.added, .added], "\(lo.map { $0.error ?? "ok" })")
        #expect(ro.map(\.status) == [.added, .added], "\(ro.map { $0.error ?? "ok" })")

        let catalog = try Catalog(path: catalogPath, readOnly: true)
        #expect(Set(try catalog.tracks().compactMap(\.title)) == ["a1", "a2", "b1", "b2"])
        #expect(try catalog.check().isEmpty)
    }
}

@Suite("Ingestor: what is not a track")
struct IngestorRefusalTests {
    @Test("two signature files of different music are both added; the same signature again is a duplicate")
    func signatureFiles() async throws {
        let dir = try TemporaryDirectory("ingest-sigs")
        let clips = try makeExcerpts([("pingus-3", 20, "a.wav"), ("pingus-5", 40, "b.wav")], in: dir.file("clips"))
        var sigs: [String] = []
        for clip in clips {
            let out = dir.path(clip.deletingPathExtension().lastPathComponent + ".earsig")
            try Fingerprinter.fingerprint(path: clip.path).signature.dataRepresentation().write(to: URL(fileURLWithPath: out))
            sigs.append(out)
        }
        let copy = dir.path("a-again.earsig")
        try FileManager.default.copyItem(atPath: sigs[0], toPath: copy)
        let catalogPath = dir.path("catalog.earcat")
        let outcomes = try await Ingestor(catalogPath: catalogPath, workers: 2).add(files: sigs + [copy])
        #expect(outcomes.map(\.status) == [.added, .added, .duplicate], "\(outcomes.map { $0.error ?? "ok" })")
        #expect(outcomes[2].track?.id == outcomes[0].track?.id)
        let stored = try Catalog(path: catalogPath, readOnly: true).tracks()
        #expect(stored.count == 2)
        #expect(stored.allSatisfy { $0.contentHash.hasPrefix("sig-") })
        // Both are matchable: each clip's audio finds its own signature-made track.
        let recognizer = try Recognizer(catalogPath: catalogPath)
        for (clip, outcome) in zip(clips, outcomes) {
            #expect(try recognizer.match(path: clip.path).matches.first?.track.id == outcome.track?.id)
        }
    }

    @Test("a file named with one non-ASCII character, given after a double slash, is titled by its name (Foundation's lastPathComponent traps on it)")
    func oddPath() async throws {
        let dir = try TemporaryDirectory("ingest-odd")
        let files = try makeExcerpts([("pingus-4", 10, "x.wav")], in: dir.file("music"))
        let odd = dir.path("music/\u{04A8}")
        try FileManager.default.moveItem(atPath: files[0].path, toPath: odd)
        let outcomes = try await Ingestor(catalogPath: dir.path("c.earcat")).add(files: [dir.path("music") + "//\u{04A8}"])
        #expect(outcomes.first?.status == .added, "\(outcomes.map { $0.error ?? "ok" })")
        #expect(outcomes.first?.track?.title == "\u{04A8}")
        #expect(PathName.stem("a/b/song.flac") == "song" && PathName.stem(".hidden") == ".hidden" && PathName.last("a//") == "a")
    }

    @Test("digital silence and near-silence are refused as no usable sound; nothing is stored")
    func silence() async throws {
        let dir = try TemporaryDirectory("ingest-silence")
        let silent = dir.path("silence.wav"), hiss = dir.path("hiss.wav")
        try Run.sox(["-n", "-r", "44100", "-c", "2", "-b", "16", silent, "trim", "0", "300"])
        try Run.sox(["-n", "-r", "44100", "-c", "1", "-b", "16", hiss, "synth", "20", "whitenoise", "vol", "0.00002"])
        let catalogPath = dir.path("catalog.earcat")
        let outcomes = try await Ingestor(catalogPath: catalogPath).add(files: [silent, hiss])
        #expect(outcomes.map(\.status) == [.failed, .failed])
        #expect(outcomes.allSatisfy { $0.error?.contains("no usable sound") == true }, "\(outcomes.map { $0.error ?? "ok" })")
        #expect(try Catalog(path: catalogPath, readOnly: true).tracks().isEmpty)
    }

    @Test("a truncated MP3 (its header states the full length) is refused as truncated; the whole file is added",
          arguments: [true, false])
    func truncatedMP3(cut: Bool) async throws {
        let dir = try TemporaryDirectory("ingest-truncated")
        let whole = dir.path("whole.mp3")
        try Run.ffmpeg(["-i", try TestAudio.set().reference("pingus-4").path, "-t", "30", "-b:a", "128k", whole])
        var path = whole
        if cut {
            path = dir.path("cut.mp3")
            let data = try Data(contentsOf: URL(fileURLWithPath: whole))
            try data.prefix(data.count / 8).write(to: URL(fileURLWithPath: path))
        }
        let outcomes = try await Ingestor(catalogPath: dir.path("catalog.earcat")).add(files: [path])
        if cut {
            #expect(outcomes[0].status == .failed)
            #expect(outcomes[0].error?.contains("truncated") == true, "\(outcomes[0].error ?? "no error")")
        } else {
            #expect(outcomes[0].status == .added, "\(outcomes[0].error ?? "")")
            #expect(abs((outcomes[0].track?.duration ?? 0) - 30) < 0.1)
        }
    }
}

@Suite("Recognizer")
struct RecognizerTests {
    @Test("a clip and its .earsig signature file both identify the track they came from")
    func clipAndSignatureFile() async throws {
        let dir = try TemporaryDirectory("recognizer")
        let files = try makeExcerpts([("pingus-3", 30, "p3.flac"), ("pingus-6", 5, "p6.flac")], in: dir.file("ref"))
        let catalogPath = dir.path("catalog.earcat")
        let tracks = try await Fixtures.index(files, into: catalogPath)

        let clip = dir.file("clip.wav")
        try Fixtures.cut(files[1], start: 4, seconds: 8, to: clip)
        let recognizer = try Recognizer(catalogPath: catalogPath)
        let result = try recognizer.match(path: clip.path)
        #expect(result.matches.first?.track.id == tracks[1].id)
        #expect(abs((result.matches.first?.matchOffset ?? -1) - 4) <= 0.1)

        let fingerprint = try Fingerprinter.fingerprint(path: clip.path)
        #expect(fingerprint.contentHash.count == 32)
        let sigFile = dir.file("clip.earsig")
        try fingerprint.signature.dataRepresentation().write(to: sigFile)
        let viaFile = try recognizer.match(path: sigFile.path)
        #expect(viaFile.matches.first?.track.id == tracks[1].id)
        #expect(viaFile.matches.first?.matchOffset == result.matches.first?.matchOffset)
    }

    @Test("a missing catalog is CatalogError.notFound")
    func missingCatalog() throws {
        let dir = try TemporaryDirectory("nocatalog")
        #expect(throws: CatalogError.self) { _ = try Recognizer(catalogPath: dir.path("none.earcat")) }
        #expect(!FileManager.default.fileExists(atPath: dir.path("none.earcat")), "matching never creates a catalog")
    }
}
