import EarmarkKit
import EarmarkTestSupport
import Foundation
import Testing

/// FNV-1a, 32 bits: the signature file's checksum, recomputed here as anyone editing a file can.
private func fnv1a32(_ bytes: some Sequence<UInt8>) -> UInt32 {
    var h: UInt32 = 0x811C_9DC5
    for b in bytes { h = (h ^ UInt32(b)) &* 0x0100_0193 }
    return h
}

/// Rewrites the signature file at `path` with `edit` applied to its bytes and a correct checksum.
private func tamper(_ path: String, _ edit: (inout [UInt8]) -> Void) throws {
    var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
    edit(&bytes)
    let sum = fnv1a32(bytes[0..<(bytes.count - 4)])
    for k in 0..<4 { bytes[bytes.count - 4 + k] = UInt8(truncatingIfNeeded: sum >> (8 * UInt32(k))) }
    try Data(bytes).write(to: URL(fileURLWithPath: path))
}

@Suite("earmark CLI: untrusted signature files and damaged catalogs")
struct UntrustedInputCLITests {
    /// Peak `i` of a signature file starts at byte 24 + 12 i: frame (u32), bin (u16), rank (u16), level (f32).
    @Test("a signature file with a valid checksum but a peak outside the band or the duration: match exits 2, not valid",
          arguments: [("bin", 0), ("bin", 256), ("frame", 0xFFFF_FFFF), ("frame", 0x8000_0000)])
    func tamperedSignature(field: String, value: Int) async throws {
        let f = try await CLIFixture.shared.value()
        let sig = f.dir.path("tampered-\(UUID().uuidString.prefix(6)).earsig")
        #expect(try EarmarkCLI.run(["signature", try f.clip("pingus-4", at: 30).path, "-o", sig]).status == 0)
        try tamper(sig) { bytes in
            let count = (bytes.count - 28) / 12
            let at = 24 + 12 * (field == "bin" ? count / 2 : count - 1)
            if field == "bin" {
                bytes[at + 4] = UInt8(value & 0xFF)
                bytes[at + 5] = UInt8(value >> 8)
            } else {
                for k in 0..<4 { bytes[at + k] = UInt8((value >> (8 * k)) & 0xFF) }
            }
        }
        let out = try EarmarkCLI.run(["match", "--catalog", f.catalog, sig], timeout: 60)
        #expect(out.status == 2, "\(out)")
        #expect(out.stderrText.contains("not a valid signature file"), "\(out)")
    }

    @Test("a negative number reaches the option's range check instead of 'Missing value'",
          arguments: [(["match", "--max-matches", "-1", "x.wav"], "--max-matches must be at least 1"),
                      (["listen", "--duration", "-5"], "--duration must be"),
                      (["catalog", "add", "--jobs", "-2", "x.wav"], "--jobs must be at least 1")])
    func negativeNumbers(arguments: [String], message: String) throws {
        let out = try EarmarkCLI.run(arguments)
        #expect(out.status == 64, "\(out)")
        #expect(out.stderrText.contains(message) && !out.stderrText.contains("Missing value"), "\(out)")
    }

    @Test("a damaged MP3 fails with earmark's one-line error; no decoder chatter reaches standard error")
    func damagedMP3() async throws {
        let f = try await CLIFixture.shared.value()
        let dir = try TemporaryDirectory("cli-mp3")
        let whole = dir.path("whole.mp3"), damaged = dir.path("damaged.mp3")
        try Run.ffmpeg(["-i", try f.audio.reference("pingus-4").path, "-t", "30", "-b:a", "128k", whole])
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: whole)))
        var rng = SeededRandom(seed: 7)
        for i in 50_000..<53_000 { bytes[i] = UInt8.random(in: 0...255, using: &rng) }
        try Data(bytes.prefix(bytes.count / 2)).write(to: URL(fileURLWithPath: damaged))
        let out = try EarmarkCLI.run(["catalog", "add", "--catalog", dir.path("c.earcat"), damaged])
        #expect(out.status == 2, "\(out)")
        #expect(out.stdoutText.contains("damaged.mp3"), "\(out)")
        let stray = out.stderrText.split(separator: "\n").filter { !$0.hasPrefix("earmark:") && !$0.contains("damaged.mp3") }
        #expect(stray.isEmpty, "\(out.stderrText)")
    }

    @Test("catalog add of two signature files adds both; the second add of them changes nothing")
    func twoSignatures() async throws {
        let f = try await CLIFixture.shared.value()
        let dir = try TemporaryDirectory("cli-sigs")
        let a = dir.path("a.earsig"), b = dir.path("b.earsig")
        #expect(try EarmarkCLI.run(["signature", try f.clip("pingus-3", at: 20).path, "-o", a]).status == 0)
        #expect(try EarmarkCLI.run(["signature", try f.clip("sorcerer", at: 20).path, "-o", b]).status == 0)
        let catalog = dir.path("sigs.earcat")
        let first = try EarmarkCLI.run(["catalog", "add", "--catalog", catalog, "--json", a, b])
        #expect(first.status == 0, "\(first)")
        #expect((try json(first) as? [String: Any])?["added"] as? Int == 2, "\(first)")
        #expect(try listTracks(catalog).count == 2)
        let again = try EarmarkCLI.run(["catalog", "add", "--catalog", catalog, "--json", a, b])
        #expect(again.status == 0, "\(again)")
        #expect((try json(again) as? [String: Any])?["added"] as? Int == 0, "\(again)")
        #expect(try listTracks(catalog).count == 2)
    }

    @Test("catalog merge copies another catalog's tracks under new ids; clips of both match in the result; import still refuses to merge")
    func mergeCatalogs() async throws {
        let f = try await CLIFixture.shared.value()
        let dir = try TemporaryDirectory("cli-merge")
        let other = dir.path("other.earcat")
        #expect(try EarmarkCLI.run(["catalog", "add", "--catalog", other, try f.audio.reference("pingus-5").path]).status == 0)
        let merged = dir.path("merged.earcat")
        #expect(try EarmarkCLI.run(["catalog", "export", "--catalog", f.catalog, merged]).status == 0)
        let out = try EarmarkCLI.run(["catalog", "merge", "--catalog", merged, "--json", other])
        #expect(out.status == 0, "\(out)")
        let report = try #require(try json(out) as? [String: Any])
        #expect(report["added"] as? Int == 1 && report["duplicate"] as? Int == 0, "\(out)")
        #expect(try listTracks(merged).map(\.title) == CLIFixture.indexed + ["pingus-5"])
        for stem in ["pingus-5", "sorcerer"] {
            let m = try EarmarkCLI.run(["match", "--catalog", merged, "--json", try f.clip(stem, at: 20).path])
            #expect(title(of: try matches(m).first ?? [:]) == stem, "\(m)")
        }
        let again = try EarmarkCLI.run(["catalog", "merge", "--catalog", merged, "--json", other])
        #expect((try json(again) as? [String: Any])?["duplicate"] as? Int == 1, "\(again)")
        let refused = try EarmarkCLI.run(["catalog", "import", "--catalog", merged, other])
        #expect(refused.status == 2 && refused.stderrText.contains("catalog merge"), "\(refused)")
    }

    @Test("catalog copy makes a verified copy that matches the same clips; run again it copies nothing; a copy missing landmarks is reported, exit 1")
    func copyCatalog() async throws {
        let f = try await CLIFixture.shared.value()
        let dir = try TemporaryDirectory("cli-copy")
        let copy = dir.path("sub/copy.earcat")
        let out = try EarmarkCLI.run(["catalog", "copy", "--json", "--verify-sample", "3", f.catalog, copy])
        #expect(out.status == 0, "\(out)")
        let report = try #require(try json(out) as? [String: Any])
        #expect(report["added"] as? Int == CLIFixture.indexed.count && report["duplicate"] as? Int == 0, "\(out)")
        #expect(report["verifiedTracks"] as? Int == 3 && (report["verifiedLandmarks"] as? Int ?? 0) > 1000, "\(out)")
        #expect(try listTracks(copy).map(\.title) == CLIFixture.indexed)
        let m = try EarmarkCLI.run(["match", "--catalog", copy, "--json", try f.clip("sorcerer", at: 20).path])
        #expect(title(of: try matches(m).first ?? [:]) == "sorcerer", "\(m)")
        let again = try EarmarkCLI.run(["catalog", "copy", "--json", f.catalog, copy])
        let againReport = try json(again) as? [String: Any]
        #expect(again.status == 0 && againReport?["duplicate"] as? Int == CLIFixture.indexed.count, "\(again)")

        // A destination whose copy of a track lost its landmarks (its pending row emptied behind the store's back).
        let broken = dir.path("broken.earcat")
        #expect(try EarmarkCLI.run(["catalog", "copy", f.catalog, broken]).status == 0)
        _ = try Run.sqlite(broken, "UPDATE pending_postings SET data = x'' WHERE track_id = (SELECT min(track_id) FROM pending_postings)")
        let differs = try EarmarkCLI.run(["catalog", "copy", "--verify-sample", "\(CLIFixture.indexed.count)", f.catalog, broken])
        #expect(differs.status == 1 && differs.stdoutText.contains("landmarks are not found"), "\(differs)")
        let refused = try EarmarkCLI.run(["catalog", "copy", dir.path("none.earcat"), copy])
        #expect(refused.status == 2 && refused.stderrText.contains("no catalog here"), "\(refused)")
    }

    @Test("a catalog on a PostgreSQL server: catalog copy from the file, then list, match and a copy back answer as the file does",
          .enabled(if: PostgresServer.testsEnabled))
    func postgresCatalog() async throws {
        let f = try await CLIFixture.shared.value()
        let server = try PostgresServer()
        defer { server.stop() }
        let copy = try EarmarkCLI.run(["catalog", "copy", "--json", f.catalog, server.url])
        #expect(copy.status == 0, "\(copy)")
        #expect((try json(copy) as? [String: Any])?["problems"] as? [String] == [], "\(copy)")
        #expect(try listTracks(server.url).map(\.title) == CLIFixture.indexed)
        for stem in CLIFixture.indexed {
            let clip = try f.clip(stem, at: 20).path
            let onFile = try matches(try EarmarkCLI.run(["match", "--catalog", f.catalog, "--json", clip])).first ?? [:]
            let onServer = try matches(try EarmarkCLI.run(["match", "--catalog", server.url, "--json", clip])).first ?? [:]
            #expect(title(of: onServer) == stem && title(of: onFile) == stem)
            #expect(onServer["matchOffset"] as? Double == onFile["matchOffset"] as? Double && onServer["matchOffset"] != nil, "\(onServer) \(onFile)")
        }
        // catalog migrate indexes the server's pending tracks; --compact leaves one segment, and clips still match.
        let migrated = try EarmarkCLI.run(["catalog", "migrate", "--compact", "--json", "--catalog", server.url])
        let report = try json(migrated) as? [String: Any]
        #expect(migrated.status == 0 && report?["segments"] as? Int == 1 && report?["schemaVersion"] as? Int == 2, "\(migrated)")
        #expect(report?["postingsInSegments"] as? Int == report?["postings"] as? Int, "\(migrated)")
        let clip = try f.clip(CLIFixture.indexed[0], at: 20).path
        #expect(title(of: try matches(try EarmarkCLI.run(["match", "--catalog", server.url, "--json", clip])).first ?? [:]) == CLIFixture.indexed[0])
        let dir = try TemporaryDirectory("cli-postgres")
        let back = try EarmarkCLI.run(["catalog", "copy", server.url, dir.path("back.earcat")])
        #expect(back.status == 0, "\(back)")
        #expect(try listTracks(dir.path("back.earcat")).map(\.title) == CLIFixture.indexed)
        // A new catalog on the server with triplet keys, as on a file; another --landmarks later is refused.
        try server.sql("CREATE DATABASE triplets", database: "postgres")
        let tripletURL = server.url.replacingOccurrences(of: "/earmark?", with: "/triplets?")
        let triplets = try EarmarkCLI.run(["catalog", "add", "--catalog", tripletURL, "--landmarks", "triplets", try f.audio.reference("pingus-4").path])
        #expect(triplets.status == 0, "\(triplets)")
        let stats = try EarmarkCLI.run(["catalog", "stats", "--catalog", tripletURL])
        #expect(stats.stdoutText.contains("triplet keys"), "\(stats)")
        let pairs = try EarmarkCLI.run(["catalog", "add", "--catalog", tripletURL, "--landmarks", "pairs", try f.audio.reference("sorcerer").path])
        #expect(pairs.status == 2 && pairs.stderrText.contains("created with triplets keys"), "\(pairs)")
        server.stop()
        let gone = try EarmarkCLI.run(["catalog", "list", "--catalog", server.url])
        #expect(gone.status == 2 && gone.stderrText.contains("127.0.0.1:\(server.port)"), "\(gone)")
    }

    @Test("catalog init of a catalog sharded over two servers: copy into it, match, stats and check show the shards; a stopped shard is exit 2 naming it",
          .enabled(if: PostgresServer.testsEnabled))
    func shardedPostgresCatalog() async throws {
        let f = try await CLIFixture.shared.value()
        let coordinator = try PostgresServer()
        let shards = [try PostgresServer(), try PostgresServer()]
        defer {
            coordinator.stop()
            for s in shards { s.stop() }
        }
        let made = try EarmarkCLI.run(["catalog", "init", "--json", coordinator.url, "--shard", shards[0].url, "--shard", shards[1].url])
        let report = try json(made) as? [String: Any]
        #expect(made.status == 0 && report?["backend"] as? String == "postgres", "\(made)")
        #expect((report?["shards"] as? [[String: Any]])?.compactMap { $0["location"] as? String } == shards.map { "127.0.0.1:\($0.port)/earmark" }, "\(made)")
        let again = try EarmarkCLI.run(["catalog", "init", coordinator.url, "--shard", shards[0].url, "--shard", shards[1].url])
        #expect(again.status == 2, "\(again)")
        let copy = try EarmarkCLI.run(["catalog", "copy", f.catalog, coordinator.url])
        #expect(copy.status == 0, "\(copy)")
        #expect(try listTracks(coordinator.url).map(\.title) == CLIFixture.indexed)
        let clip = try f.clip(CLIFixture.indexed[0], at: 20).path
        #expect(title(of: try matches(try EarmarkCLI.run(["match", "--catalog", coordinator.url, "--json", clip])).first ?? [:]) == CLIFixture.indexed[0])
        let stats = try EarmarkCLI.run(["catalog", "stats", "--json", "--catalog", coordinator.url])
        #expect(((try json(stats) as? [String: Any])?["shards"] as? [Any])?.count == 2, "\(stats)")
        let check = try EarmarkCLI.run(["catalog", "check", "--repair", "--catalog", coordinator.url])
        #expect(check.status == 0, "\(check)")
        let file = try TemporaryDirectory("cli-init")
        let plain = try EarmarkCLI.run(["catalog", "init", file.path("new.earcat")])
        #expect(plain.status == 0 && FileManager.default.fileExists(atPath: file.path("new.earcat")), "\(plain)")
        #expect(try EarmarkCLI.run(["catalog", "init", file.path("x.earcat"), "--shard", shards[0].url, "--shard", shards[1].url]).status == 64)
        shards[1].stop()
        let gone = try EarmarkCLI.run(["match", "--catalog", coordinator.url, "--json", clip])
        #expect(gone.status == 2 && gone.stderrText.contains("127.0.0.1:\(shards[1].port)"), "\(gone)")
    }

    @Test("a catalog add killed (SIGKILL) while it writes leaves a catalog that checks clean and keeps the tracks it committed; adding again completes it",
          arguments: ["file", "postgres"])
    func killedWriter(store: String) async throws {
        let f = try await CLIFixture.shared.value()
        let dir = try TemporaryDirectory("cli-killed")
        var server: PostgresServer?
        if store == "postgres" {
            guard PostgresServer.testsEnabled else { return }
            server = try PostgresServer()
        }
        defer { server?.stop() }
        let catalog = server?.url ?? dir.path("killed.earcat")
        // The last file is not audio libsndfile knows, so it goes to $EARMARK_FFMPEG: a script that never
        // answers, and ends once the writer is gone. The writer therefore cannot finish before it is killed,
        // however the machine's load schedules this test (a starved poll used to find the writer already done).
        let originals = f.audio.reference + f.audio.negative
        let hold = dir.path("hold.m4a")
        try Data("not audio".utf8).write(to: URL(fileURLWithPath: hold))
        let stall = dir.path("stall.sh")
        try "#!/bin/sh\nwhile kill -0 $PPID 2>/dev/null; do sleep 0.2; done\n".write(toFile: stall, atomically: true, encoding: .utf8)
        chmod(stall, 0o755)
        let writer = try EarmarkCLI.start(["catalog", "add", "--catalog", catalog, "--jobs", "1"] + originals.map(\.path) + [hold],
                                          environment: ["EARMARK_FFMPEG": stall])
        // A blocking poll: no suspension point between the writer's start and its kill.
        let deadline = Date().addingTimeInterval(120)
        while Date() < deadline, ((try? CatalogStores.open(catalog, access: .read).trackCount()) ?? 0) < 1 {
            usleep(5_000)
        }
        writer.signal(SIGKILL)
        let killed = try await writer.finished()
        #expect(killed.timedOut, "the writer was still running when it was killed: \(killed)")
        let check = try EarmarkCLI.run(["catalog", "check", "--catalog", catalog])
        #expect(check.status == 0, "\(check)")
        let kept = try listTracks(catalog).map(\.title)
        let names = originals.map { $0.deletingPathExtension().lastPathComponent }
        #expect(!kept.isEmpty && kept == Array(names.prefix(kept.count)), "a prefix of the files, in order: \(kept)")
        let again = try EarmarkCLI.run(["catalog", "add", "--catalog", catalog, "--json"] + originals.map(\.path))
        #expect(again.status == 0, "\(again)")
        #expect(try listTracks(catalog).map(\.title) == names)
        #expect(try EarmarkCLI.run(["catalog", "check", "--catalog", catalog]).status == 0)
    }

    @Test("catalog add into a catalog with an overwritten page: exit 2 naming `catalog check`, the file unchanged")
    func damagedCatalog() async throws {
        let f = try await CLIFixture.shared.value()
        let dir = try TemporaryDirectory("cli-damaged")
        let catalog = dir.path("damaged.earcat")
        #expect(try EarmarkCLI.run(["catalog", "export", "--catalog", f.catalog, catalog]).status == 0)
        let root = Int(try Run.sqlite(catalog, "SELECT rootpage FROM sqlite_master WHERE name = 'tracks'")
            .trimmingCharacters(in: .whitespacesAndNewlines))!
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: catalog))
        try handle.seek(toOffset: UInt64((root - 1) * 4096))
        try handle.write(contentsOf: Data(repeating: 0xA5, count: 4096))
        try handle.close()
        let before = try Data(contentsOf: URL(fileURLWithPath: catalog))
        let add = try EarmarkCLI.run(["catalog", "add", "--catalog", catalog, try f.clip("pingus-4", at: 5).path])
        #expect(add.status == 2, "\(add)")
        #expect(add.stderrText.contains("earmark catalog check"), "\(add)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: catalog)) == before)
        let check = try EarmarkCLI.run(["catalog", "check", "--catalog", catalog])
        #expect(check.status != 0, "\(check)")
    }
}
