import EarmarkKit
import EarmarkTestSupport
import Foundation
import Testing

// End-to-end tests of the built `earmark` binary on real music. Interface under test:
//   earmark [--catalog P] [--json] [--lock-timeout S] catalog add FILES…   (also accepted after the subcommand)
//   earmark catalog list --json | catalog remove ID…
//   earmark match CLIP… [--json]      exit 0 match, 1 no match, 2 error
//   earmark signature FILE -o X.earsig

/// Parses standard output as JSON.
func json(_ out: ProcessOutput) throws -> Any {
    do {
        return try JSONSerialization.jsonObject(with: out.stdout)
    } catch {
        throw TestSupportError("stdout is not JSON: \(out)")
    }
}

/// Every value stored under `key` anywhere in a JSON tree.
func values(_ key: String, in tree: Any) -> [Any] {
    switch tree {
    case let d as [String: Any]: return (d[key].map { [$0] } ?? []) + d.values.flatMap { values(key, in: $0) }
    case let a as [Any]: return a.flatMap { values(key, in: $0) }
    default: return []
    }
}

/// `catalog list --json` as (id, title) pairs.
func listTracks(_ catalog: String) throws -> [(id: Int, title: String)] {
    let out = try EarmarkCLI.run(["catalog", "list", "--catalog", catalog, "--json"])
    guard out.status == 0 else { throw TestSupportError("catalog list failed: \(out)") }
    guard let array = try json(out) as? [[String: Any]] else { throw TestSupportError("list is not an array: \(out)") }
    return array.map { ($0["id"] as? Int ?? -1, $0["title"] as? String ?? "") }
}

/// The `matches` of a one-clip `match --json` report.
func matches(_ out: ProcessOutput) throws -> [[String: Any]] {
    guard let report = try json(out) as? [String: Any], let m = report["matches"] as? [[String: Any]] else {
        throw TestSupportError("no matches array: \(out)")
    }
    return m
}

func title(of match: [String: Any]) -> String? { (match["track"] as? [String: Any])?["title"] as? String }

/// A catalog of three reference tracks built with `earmark catalog add`, shared by the suite.
struct CLIFixture: Sendable {
    let dir: TemporaryDirectory
    let catalog: String
    let audio: TestAudioSet
    let addOutput: ProcessOutput
    static let indexed = ["pingus-3", "pingus-4", "sorcerer"]

    static let shared = Shared<CLIFixture> {
        let audio = try TestAudio.set()
        let dir = try TemporaryDirectory("cli")
        let catalog = dir.path("cli.earcat")
        let files = try indexed.map { try audio.reference($0).path }
        let out = try EarmarkCLI.run(["catalog", "add", "--catalog", catalog, "--json"] + files)
        return CLIFixture(dir: dir, catalog: catalog, audio: audio, addOutput: out)
    }

    func clip(_ stem: String, at offset: Double, seconds: Double = 10, negative: Bool = false) throws -> URL {
        let source = negative ? try #require(audio.negative.first { $0.deletingPathExtension().lastPathComponent == stem })
                              : try audio.reference(stem)
        let url = dir.file("\(stem)-\(offset)-\(UUID().uuidString.prefix(6)).wav")
        try Fixtures.cut(source, start: offset, seconds: seconds, to: url)
        return url
    }
}

@Suite("earmark CLI: catalog and match")
struct CLIMatchTests {
    @Test("catalog add --json reports every file added, and catalog list --json lists them")
    func addAndList() async throws {
        let f = try await CLIFixture.shared.value()
        #expect(f.addOutput.status == 0, "\(f.addOutput)")
        let report = try #require(try json(f.addOutput) as? [String: Any])
        #expect(report["added"] as? Int == 3)
        #expect(report["failed"] as? Int == 0)
        let results = try #require(report["results"] as? [[String: Any]])
        #expect(results.map { $0["status"] as? String } == ["added", "added", "added"])
        // Files are decoded in parallel but committed in argument order, so ids follow that order.
        #expect(try listTracks(f.catalog).map(\.title) == CLIFixture.indexed)
    }

    @Test("match --json: exit 0, the right title and offset", arguments: [("pingus-4", 41.0), ("sorcerer", 12.5)])
    func matchClip(stem: String, offset: Double) async throws {
        let f = try await CLIFixture.shared.value()
        let out = try EarmarkCLI.run(["match", "--catalog", f.catalog, "--json", try f.clip(stem, at: offset).path])
        #expect(out.status == 0, "\(out)")
        let best = try #require(try matches(out).first)
        #expect(title(of: best) == stem)
        let matchOffset = try #require(best["matchOffset"] as? Double)
        #expect(abs(matchOffset - offset) <= 0.1)
    }

    @Test("catalog add --landmarks triplets makes a triplet catalog that match uses; another --landmarks later is exit 2 and adds nothing")
    func tripletCatalog() async throws {
        let f = try await CLIFixture.shared.value()
        let dir = try TemporaryDirectory("cli-triplets")
        let catalog = dir.path("t.earcat")
        let add = try EarmarkCLI.run(["catalog", "add", "--catalog", catalog, "--landmarks", "triplets", "--json",
                                      try f.audio.reference("pingus-4").path])
        #expect(add.status == 0, "\(add)")
        let stats = try EarmarkCLI.run(["catalog", "stats", "--catalog", catalog])
        #expect(stats.stdoutText.contains("signature algorithm 2 (triplet keys, experimental)"), "\(stats)")
        let out = try EarmarkCLI.run(["match", "--catalog", catalog, "--json", try f.clip("pingus-4", at: 41).path])
        #expect(out.status == 0, "\(out)")
        let best = try #require(try matches(out).first)
        #expect(title(of: best) == "pingus-4")
        #expect(abs((best["matchOffset"] as? Double ?? -1) - 41) <= 0.1)
        let other = try EarmarkCLI.run(["catalog", "add", "--catalog", catalog, "--landmarks", "pairs", try f.audio.reference("sorcerer").path])
        #expect(other.status == 2)
        #expect(other.stderrText.contains("created with triplets keys"), "\(other)")
        #expect(try listTracks(catalog).map(\.title) == ["pingus-4"])
    }

    @Test("catalog add notes `migrate --compact` when it leaves the index in four segments or more, and not after compacting")
    func compactionNote() async throws {
        let f = try await CLIFixture.shared.value()
        let dir = try TemporaryDirectory("cli-compact-note")
        let path = dir.path("segments.earcat")
        do {
            // Segments merge while the older is at most twice the newer: flushes of shrinking size by 4 stay apart.
            let catalog = try Catalog(path: path, create: true)
            var rng = SystemRandomNumberGenerator()
            for (k, count) in [16_000, 4_000, 1_000, 250].enumerated() {
                let landmarks = (0..<count).map { _ in Landmark(hash: .random(in: 0..<(1 << 21), using: &rng), frame: .random(in: 0..<10_000, using: &rng)) }
                _ = try catalog.add(NewTrack(title: "S\(k)", duration: 120, contentHash: "synthetic-\(k)"), landmarks: landmarks, peaks: [])
                try catalog.flushIndex()
            }
            let layout = try catalog.indexLayout()
            #expect(layout.segments == 4, "\(layout)")
        }
        let note = "`earmark catalog migrate --compact` merges them into one"
        let add = try EarmarkCLI.run(["catalog", "add", "--catalog", path, try f.audio.reference("pingus-4").path])
        #expect(add.status == 0 && add.stderrText.contains("the hash index is in 4 segments") && add.stderrText.contains(note), "\(add)")
        let migrate = try EarmarkCLI.run(["catalog", "migrate", "--compact", "--catalog", path])
        #expect(migrate.status == 0, "\(migrate)")
        #expect(try Catalog(path: path, readOnly: true).indexLayout().segments == 1)
        let again = try EarmarkCLI.run(["catalog", "add", "--catalog", path, try f.audio.reference("sorcerer").path])
        #expect(again.status == 0 && !again.stderrText.contains(note), "\(again)")
    }

    @Test("match without --json prints the title")
    func matchText() async throws {
        let f = try await CLIFixture.shared.value()
        let out = try EarmarkCLI.run(["match", "--catalog", f.catalog, try f.clip("pingus-3", at: 50).path])
        #expect(out.status == 0, "\(out)")
        #expect(out.stdoutText.contains("pingus-3"))
    }

    @Test("a clip of non-catalog music: exit 1 and no matches")
    func noMatch() async throws {
        let f = try await CLIFixture.shared.value()
        let stem = f.audio.negative[0].deletingPathExtension().lastPathComponent
        let out = try EarmarkCLI.run(["match", "--catalog", f.catalog, "--json", try f.clip(stem, at: 20, negative: true).path])
        #expect(out.status == 1, "\(out)")
        #expect(try matches(out).isEmpty)
    }

    @Test("a missing clip: exit 2 with the path in the message")
    func missingClip() async throws {
        let f = try await CLIFixture.shared.value()
        let missing = f.dir.path("does-not-exist.wav")
        let out = try EarmarkCLI.run(["match", "--catalog", f.catalog, missing])
        #expect(out.status == 2, "\(out)")
        #expect(out.stderrText.contains("does-not-exist.wav"))
    }

    @Test("matching against a missing catalog: exit 2, and no catalog is created")
    func missingCatalog() async throws {
        let f = try await CLIFixture.shared.value()
        let dir = try TemporaryDirectory("cli-nocat")
        let catalog = dir.path("nothing-here.earcat")
        let out = try EarmarkCLI.run(["match", "--catalog", catalog, try f.clip("pingus-3", at: 10).path])
        #expect(out.status == 2, "\(out)")
        #expect(!out.stderrText.isEmpty)
        #expect(!FileManager.default.fileExists(atPath: catalog))
    }

    @Test("signature FILE -o c.earsig, then match c.earsig: exit 0 with the right track")
    func signatureRoundTrip() async throws {
        let f = try await CLIFixture.shared.value()
        let clip = try f.clip("pingus-4", at: 70)
        let sig = f.dir.path("clip-\(UUID().uuidString.prefix(6)).earsig")
        let made = try EarmarkCLI.run(["signature", clip.path, "-o", sig])
        #expect(made.status == 0, "\(made)")
        let data = try Data(contentsOf: URL(fileURLWithPath: sig))
        #expect(Array(data.prefix(6)) == Array("EARSIG".utf8))
        #expect(data.count < 100_000, "a signature is much smaller than the audio")

        let out = try EarmarkCLI.run(["match", "--catalog", f.catalog, "--json", sig])
        #expect(out.status == 0, "\(out)")
        let best = try #require(try matches(out).first)
        #expect(title(of: best) == "pingus-4")
        #expect(abs((best["matchOffset"] as? Double ?? -1) - 70) <= 0.1)
    }

    @Test("global options may come before the subcommand")
    func globalOptionsFirst() async throws {
        let f = try await CLIFixture.shared.value()
        let list = try EarmarkCLI.run(["--catalog", f.catalog, "catalog", "list", "--json"])
        #expect(list.status == 0, "\(list)")
        #expect(values("title", in: (try? json(list)) ?? []).compactMap { $0 as? String }.sorted() == CLIFixture.indexed)
        let out = try EarmarkCLI.run(["--catalog", f.catalog, "--json", "match", try f.clip("sorcerer", at: 30).path])
        #expect(out.status == 0, "\(out)")
        #expect(values("title", in: (try? json(out)) ?? [:]).first as? String == "sorcerer")
    }
}

@Suite("earmark CLI: changing a catalog")
struct CLIWriteTests {
    @Test("catalog remove ID removes that track only; an unknown id is exit 2 and removes nothing")
    func remove() throws {
        let audio = try TestAudio.set()
        let dir = try TemporaryDirectory("cli-remove")
        let catalog = dir.path("r.earcat")
        let a = dir.file("a.flac"), b = dir.file("b.flac")
        try Run.sox([try audio.reference("pingus-5").path, a.path, "trim", "0", "12"])
        try Run.sox([try audio.reference("pingus-6").path, b.path, "trim", "0", "12"])
        let add = try EarmarkCLI.run(["catalog", "add", "--catalog", catalog, a.path, b.path])
        #expect(add.status == 0, "\(add)")
        let before = try listTracks(catalog)
        #expect(before.map(\.title) == ["a", "b"])
        let idA = try #require(before.first { $0.title == "a" }?.id)

        let bad = try EarmarkCLI.run(["catalog", "remove", "--catalog", catalog, String(idA), "999999"])
        #expect(bad.status == 2, "\(bad)")
        #expect(try listTracks(catalog).map(\.title) == ["a", "b"])

        let ok = try EarmarkCLI.run(["catalog", "remove", "--catalog", catalog, String(idA)])
        #expect(ok.status == 0, "\(ok)")
        #expect(try listTracks(catalog).map(\.title) == ["b"])

        // The removed track no longer matches; the other one still does.
        let clipA = dir.file("clipA.wav"), clipB = dir.file("clipB.wav")
        try Fixtures.cut(a, start: 1, seconds: 10, to: clipA)
        try Fixtures.cut(b, start: 1, seconds: 10, to: clipB)
        #expect(try EarmarkCLI.run(["match", "--catalog", catalog, clipA.path]).status == 1)
        #expect(try EarmarkCLI.run(["match", "--catalog", catalog, clipB.path]).status == 0)
    }

    @Test("catalog add prints one line per file in argument order: added, then unchanged on a re-add, FAILED for a missing path")
    func addLines() throws {
        let audio = try TestAudio.set()
        let dir = try TemporaryDirectory("cli-lines")
        let catalog = dir.path("l.earcat")
        let b = dir.file("b.flac"), a = dir.file("a.flac")
        try Run.sox([try audio.reference("pingus-5").path, b.path, "trim", "0", "12"])
        try Run.sox([try audio.reference("pingus-6").path, a.path, "trim", "0", "12"])
        let first = try EarmarkCLI.run(["catalog", "add", "--catalog", catalog, b.path, a.path])
        #expect(first.status == 0, "\(first)")
        let added = first.stdoutText.split(separator: "\n").filter { $0.hasPrefix("added") }
        #expect(added.count == 2 && added[0].contains(" b (") && added[1].contains(" a ("), "\(first)")

        let missing = dir.path("missing.ogg")
        let again = try EarmarkCLI.run(["catalog", "add", "--catalog", catalog, missing, b.path, a.path])
        #expect(again.status == 2, "\(again)")
        let lines = again.stdoutText.split(separator: "\n").map(String.init)
        #expect(lines.count == 4, "\(again)")
        #expect(lines.first?.hasPrefix("FAILED") == true && lines.first?.contains("missing.ogg") == true, "\(again)")
        #expect(lines.dropFirst().prefix(2).allSatisfy { $0.hasPrefix("unchanged") }, "\(again)")
        #expect(lines.last?.contains("2 unchanged, 1 failed") == true, "\(again)")
    }

    @Test("with the write lock held elsewhere, catalog add --lock-timeout 0.5 fails with exit 2; the catalog is intact")
    func lockTimeout() throws {
        let audio = try TestAudio.set()
        let dir = try TemporaryDirectory("cli-lock")
        let catalog = dir.path("l.earcat")
        let a = dir.file("a.flac"), b = dir.file("b.flac")
        try Run.sox([try audio.reference("pingus-3").path, a.path, "trim", "5", "10"])
        try Run.sox([try audio.reference("goin_march").path, b.path, "trim", "5", "10"])
        #expect(try EarmarkCLI.run(["catalog", "add", "--catalog", catalog, a.path]).status == 0)

        let shell = try SQLiteShell(database: catalog)
        defer { shell.close() }
        try shell.execute("BEGIN IMMEDIATE; INSERT INTO catalog_info(key, value) VALUES ('held-by', 'cli test');")
        let clock = ContinuousClock()
        let start = clock.now
        let locked = try EarmarkCLI.run(["catalog", "add", "--catalog", catalog, "--lock-timeout", "0.5", b.path], timeout: 60)
        let took = clock.now - start
        #expect(locked.status == 2, "\(locked)")
        #expect(locked.stderrText.lowercased().contains("lock"), "the message should say the catalog is locked")
        #expect(took < .seconds(20), "--lock-timeout 0.5 took \(took)")
        // Reading is not blocked by the writer.
        #expect(try listTracks(catalog).map(\.title) == ["a"])

        try shell.execute("ROLLBACK;")
        shell.close()
        let retry = try EarmarkCLI.run(["catalog", "add", "--catalog", catalog, "--lock-timeout", "0.5", b.path])
        #expect(retry.status == 0, "\(retry)")
        #expect(try listTracks(catalog).map(\.title) == ["a", "b"])
    }

    @Test("two catalog add processes started together on a new catalog both succeed (4 rounds)")
    func concurrentAdds() throws {
        let audio = try TestAudio.set()
        let dir = try TemporaryDirectory("cli-concurrent")
        let first = dir.file("first.flac"), second = dir.file("second.flac")
        try Run.sox([try audio.reference("pingus-5").path, first.path, "trim", "30", "4"])
        try Run.sox([try audio.reference("pingus-6").path, second.path, "trim", "30", "4"])
        // Creating the catalog is the racy moment, so each round starts from no catalog.
        for round in 0..<4 {
            let catalog = dir.path("c\(round).earcat")
            let results = ResultBox()
            DispatchQueue.concurrentPerform(iterations: 2) { i in
                let file = i == 0 ? first : second
                results.append(Result { try EarmarkCLI.run(["catalog", "add", "--catalog", catalog, file.path]) })
            }
            for r in results.all {
                let out = try r.get()
                #expect(out.status == 0, "round \(round): \(out)")
            }
            #expect(Set(try listTracks(catalog).map(\.title)) == ["first", "second"], "round \(round)")
        }
    }
}

/// Collects results from concurrent work.
final class ResultBox: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [Result<ProcessOutput, any Error>] = []
    func append(_ r: Result<ProcessOutput, any Error>) { lock.withLock { items.append(r) } }
    var all: [Result<ProcessOutput, any Error>] { lock.withLock { items } }
}
