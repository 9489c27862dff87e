import EarmarkKit
import EarmarkTestSupport
import Foundation
import Testing

// End-to-end tests of `earmark listen`:
//   earmark listen [--device NAME | --input FILE|- [--fast] [--raw FMT --rate HZ --channels N]]
//                  [--once] [--duration S] [--record FILE] [--json]
// NDJSON events: match, noMatch, discontinuity, dropped, error, end (last).

/// The NDJSON lines of `out` as objects.
func events(_ out: ProcessOutput) throws -> [[String: Any]] {
    try out.stdoutText.split(separator: "\n").map { line in
        guard let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else {
            throw TestSupportError("not a JSON object: \(line)")
        }
        return object
    }
}

func matchEvents(_ out: ProcessOutput) throws -> [[String: Any]] {
    try events(out).filter { $0["event"] as? String == "match" }
}

func number(_ object: [String: Any], _ key: String) -> Double { (object[key] as? NSNumber)?.doubleValue ?? .nan }

/// Two catalog tracks back to back: 15 s of pingus-4 from 30 s, then 15 s of pingus-3 from 40 s.
func twoTrackClip(_ f: CLIFixture) throws -> URL {
    let a = f.dir.file("listen-a-\(UUID().uuidString.prefix(6)).wav")
    let b = f.dir.file("listen-b-\(UUID().uuidString.prefix(6)).wav")
    let ab = f.dir.file("listen-ab-\(UUID().uuidString.prefix(6)).wav")
    try Fixtures.cut(try f.audio.reference("pingus-4"), start: 30, seconds: 15, to: a, rate: 44_100, channels: 1)
    try Fixtures.cut(try f.audio.reference("pingus-3"), start: 40, seconds: 15, to: b, rate: 44_100, channels: 1)
    try Run.sox([a.path, b.path, ab.path])
    return ab
}

/// Checks the match events of the two-track clip heard with `lead` seconds of other sound before it.
///
/// pingus-3 plays its 10–45 s again 48 s later, so its first seconds can fit both places: its first event may
/// name the repeat, with the truth among `alternativeOffsets`, and a later `relocated` event then moves it to
/// the truth. Any other extra event, or a relocation to a wrong place, fails.
func expectTwoTracks(_ out: ProcessOutput, lead: Double) throws {
    let all = try matchEvents(out)
    let identified = all.filter { $0["relocated"] as? Bool == false }
    #expect(identified.compactMap(title) == ["pingus-4", "pingus-3"], "\(out)")
    guard identified.count == 2 else { return }
    let a = identified[0], b = identified[1]
    // Stream time t is pingus-4 at 30 + t − lead, then pingus-3 at 40 + t − lead − 15.
    func truth(_ e: [String: Any]) -> Double {
        title(of: e) == "pingus-4" ? 30 + number(e, "streamTime") - lead : 40 + number(e, "streamTime") - lead - 15
    }
    func places(_ e: [String: Any]) -> [Double] {
        [number(e, "matchOffset")] + ((e["alternativeOffsets"] as? [NSNumber]) ?? []).map(\.doubleValue)
    }
    #expect(abs(number(a, "matchOffset") - truth(a)) < 0.5, "\(a)")
    #expect(places(b).contains { abs($0 - truth(b)) < 0.5 }, "\(b)")
    let relocations = all.filter { $0["relocated"] as? Bool == true }
    #expect(relocations.count <= 1, "\(out)")
    for r in relocations {
        // Only pingus-3's first place can be the repeat; the move goes to the truth, soon after.
        #expect(title(of: r) == "pingus-3" && abs(number(b, "matchOffset") - truth(b)) >= 0.5, "\(out)")
        #expect(abs(number(r, "matchOffset") - truth(r)) < 0.5, "\(r)")
        #expect(number(r, "time") - number(b, "time") <= 12, "\(r)")
    }
    #expect(number(a, "time") - lead <= 4, "first match only at \(number(a, "time")) s")
    #expect(number(b, "time") - lead - 15 <= 5, "the change was reported only at \(number(b, "time")) s")
    // The predicted position is the track position at the event's time.
    #expect(abs(number(a, "predictedCurrentMatchOffset") - (30 + number(a, "time") - lead)) < 0.5, "\(a)")
}

@Suite("earmark listen")
struct ListenTests {
    @Test("from a microphone: a virtual PulseAudio source hears two tracks played in real time")
    func microphone() async throws {
        let f = try await CLIFixture.shared.value()
        let pulse = try await PulseDaemon.shared.value()
        let clip = try twoTrackClip(f)
        let recording = f.dir.file("heard-\(UUID().uuidString.prefix(6)).wav")
        let listen = try EarmarkCLI.start(["listen", "--catalog", f.catalog, "--json", "--duration", "45",
                                           "--record", recording.path], environment: pulse.environment)
        // Started right away, not after an await: other tests may keep this task waiting for a thread.
        let play = try RunningProcess("/bin/sh", ["-c", "sleep 1; exec paplay -d virt_out \"$0\"", clip.path],
                                      environment: pulse.environment)
        let played = try await play.finished(timeout: 90)
        #expect(played.status == 0, "\(played)")
        let out = try await listen.finished(timeout: 90)
        #expect(out.status == 0, "\(out)")
        // What the microphone heard before the music started, from the recording itself.
        let heard = try Fixtures.decode(recording)
        let first = try #require(heard.firstIndex { abs($0) > 0.01 }, "the recording is silent")
        let lead = Double(first) / 44_100
        #expect(lead < 15, "playback started only after \(lead) s")
        try expectTwoTracks(out, lead: lead)
        let last = try #require(try events(out).last)
        #expect(last["event"] as? String == "end" && last["reason"] as? String == "duration", "\(last)")
    }

    @Test("Ctrl-C (SIGINT) ends listening cleanly: exit 0 and a last event saying so")
    func interrupt() async throws {
        let f = try await CLIFixture.shared.value()
        let pulse = try await PulseDaemon.shared.value()
        let listen = try EarmarkCLI.start(["listen", "--catalog", f.catalog, "--json"], environment: pulse.environment)
        // Interrupted after a few seconds of listening to silence, from a process of its own (not an await).
        let interrupter = try RunningProcess("/bin/sh", ["-c", "sleep 3; kill -INT \"$0\"", String(listen.pid)])
        _ = try await interrupter.finished(timeout: 30)
        let out = try await listen.finished(timeout: 30)
        #expect(out.status == 0, "\(out)")
        let last = try #require(try events(out).last, "\(out)")
        #expect(last["event"] as? String == "end" && last["reason"] as? String == "interrupted", "\(last)")
    }

    @Test("WAV on standard input, paced or not, gives the same two matches with their offsets")
    func standardInput() async throws {
        let f = try await CLIFixture.shared.value()
        let clip = try twoTrackClip(f)
        let out = try EarmarkCLI.run(["listen", "--catalog", f.catalog, "--json", "--input", "-"],
                                     environment: [:], stdin: try Data(contentsOf: clip))
        #expect(out.status == 0, "\(out)")
        try expectTwoTracks(out, lead: 0)
        // The same as raw 48 kHz stereo float.
        let raw = f.dir.file("listen-\(UUID().uuidString.prefix(6)).f32")
        try Run.sox([clip.path, "-t", "f32", "-r", "48000", "-c", "2", raw.path])
        let rawOut = try EarmarkCLI.run(["listen", "--catalog", f.catalog, "--json", "--input", "-", "--raw", "f32le",
                                         "--rate", "48000", "--channels", "2"], stdin: try Data(contentsOf: raw))
        #expect(rawOut.status == 0, "\(rawOut)")
        try expectTwoTracks(rawOut, lead: 0)
    }

    @Test("--once stops at the first match with exit 0; text output names the track")
    func once() async throws {
        let f = try await CLIFixture.shared.value()
        let clip = try twoTrackClip(f)
        let out = try EarmarkCLI.run(["listen", "--catalog", f.catalog, "--input", clip.path, "--fast", "--once"])
        #expect(out.status == 0, "\(out)")
        #expect(out.stdoutText.contains("match: pingus-4"), "\(out)")
        #expect(!out.stdoutText.contains("pingus-3"), "\(out)")
        #expect(out.stderrText.contains("listened"), "\(out)")
    }

    @Test("--loudness streams momentary and short-term loudness every second")
    func loudness() async throws {
        let f = try await CLIFixture.shared.value()
        let clip = try f.clip("pingus-4", at: 30, seconds: 8)
        let out = try EarmarkCLI.run(["listen", "--catalog", f.catalog, "--input", clip.path, "--fast", "--json", "--loudness"])
        #expect(out.status == 0, "\(out)")
        let levels = try events(out).filter { $0["event"] as? String == "loudness" }
        #expect(levels.count == 8, "\(out)")
        #expect(levels.allSatisfy { number($0, "momentary") > -40 && number($0, "momentary") < 0 }, "\(levels)")
        // Short-term loudness needs 3 s of audio.
        #expect(levels.first?["shortTerm"] is NSNull && number(levels[3], "shortTerm") > -40, "\(levels)")
    }

    @Test("non-catalog music and real speech: no match, --once exits 1")
    func noMatch() async throws {
        let f = try await CLIFixture.shared.value()
        let mix = f.dir.file("listen-negative-\(UUID().uuidString.prefix(6)).wav")
        var parts: [String] = []
        for (i, url) in (f.audio.negative + f.audio.speech).enumerated() {
            let part = f.dir.file("neg-\(i)-\(UUID().uuidString.prefix(6)).wav")
            try Fixtures.cut(url, start: 0, seconds: 14, to: part, rate: 44_100, channels: 1)
            parts.append(part.path)
        }
        try Run.sox(parts + [mix.path])
        let out = try EarmarkCLI.run(["listen", "--catalog", f.catalog, "--json", "--input", mix.path, "--fast"])
        #expect(out.status == 0, "\(out)")
        #expect(try matchEvents(out).isEmpty, "\(out)")
        #expect(try events(out).contains { $0["event"] as? String == "noMatch" }, "\(out)")
        let once = try EarmarkCLI.run(["listen", "--catalog", f.catalog, "--input", mix.path, "--fast", "--once"])
        #expect(once.status == 1, "\(once)")
    }

    @Test("no sound server, an unknown device, garbage on stdin and bad options fail clearly")
    func errors() async throws {
        let f = try await CLIFixture.shared.value()
        let empty = try TemporaryDirectory("nopulse")
        let noServer = try EarmarkCLI.run(["listen", "--catalog", f.catalog, "--duration", "1"],
                                          environment: ["PULSE_RUNTIME_PATH": empty.path, "PULSE_SERVER": "unix:\(empty.path)/none"])
        #expect(noServer.status == 2 && noServer.stderrText.contains("sound server"), "\(noServer)")

        let pulse = try await PulseDaemon.shared.value()
        let noDevice = try EarmarkCLI.run(["listen", "--catalog", f.catalog, "--device", "no_such_mic", "--duration", "1"],
                                          environment: pulse.environment)
        #expect(noDevice.status == 2 && noDevice.stderrText.contains("no_such_mic"), "\(noDevice)")

        let garbage = try EarmarkCLI.run(["listen", "--catalog", f.catalog, "--input", "-"], stdin: Data("hello, not audio".utf8))
        #expect(garbage.status == 2 && garbage.stderrText.contains("not a WAV stream"), "\(garbage)")

        let missing = try EarmarkCLI.run(["listen", "--catalog", f.dir.path("missing.earcat"), "--input", "-"],
                                         stdin: Data())
        #expect(missing.status == 2, "\(missing)")

        for bad in [["--fast"], ["--duration", "0"], ["--raw", "f32le"], ["--window", "1"], ["--input", "-", "--raw", "mp3"]] {
            let out = try EarmarkCLI.run(["listen", "--catalog", f.catalog] + bad)
            #expect(out.status == 64, "\(bad): \(out)")
        }
    }
}

@Suite("earmark match: attached analysis")
struct MatchAnalysisTests {
    @Test("match --json carries the clip's loudness, as analyze measures it; a signature file has none")
    func clipLoudness() async throws {
        let f = try await CLIFixture.shared.value()
        let clip = try f.clip("sorcerer", at: 20, seconds: 10)
        let matched = try EarmarkCLI.run(["match", "--catalog", f.catalog, "--json", clip.path])
        #expect(matched.status == 0, "\(matched)")
        let report = try #require(try json(matched) as? [String: Any])
        let loudness = try #require(report["loudness"] as? [String: Any], "\(matched)")
        let analyzed = try EarmarkCLI.run(["analyze", "--json", clip.path])
        let reference = try #require((try json(analyzed) as? [String: Any])?["loudness"] as? [String: Any])
        let a = try #require(loudness["integrated"] as? Double), b = try #require(reference["integrated"] as? Double)
        #expect(abs(a - b) < 0.001 && a < -5 && a > -40, "\(a) vs \(b)")
        #expect(matched.stdoutText.contains("\"momentary\""))
        let text = try EarmarkCLI.run(["match", "--catalog", f.catalog, clip.path])
        #expect(text.stdoutText.contains("LUFS)"), "\(text)")

        let sig = f.dir.file("clip-\(UUID().uuidString.prefix(6)).earsig")
        let made = try EarmarkCLI.run(["signature", clip.path, "-o", sig.path])
        #expect(made.status == 0, "\(made)")
        let fromSignature = try EarmarkCLI.run(["match", "--catalog", f.catalog, "--json", sig.path])
        let sigReport = try #require(try json(fromSignature) as? [String: Any])
        #expect(sigReport["loudness"] is NSNull, "\(fromSignature)")
    }
}

@Suite("earmark catalog: stored analysis")
struct StoredAnalysisTests {
    @Test("catalog add --analyze stores each track's loudness, key, rhythm, structure, pace, sound and instruments (info shows them); remove deletes them; without it nothing is stored")
    func storedLoudness() async throws {
        let audio = try TestAudio.set()
        let dir = try TemporaryDirectory("analysis")
        let catalog = dir.path("a.earcat")
        let track = try audio.reference("pingus-6")
        let add = try EarmarkCLI.run(["catalog", "add", "--analyze", "--catalog", catalog, track.path],
                                     environment: ["EARMARK_MODEL": try TestModel.set().model.path])
        #expect(add.status == 0, "\(add)")
        let info = try EarmarkCLI.run(["catalog", "info", "1", "--catalog", catalog, "--json"])
        let object = try #require(try json(info) as? [String: Any], "\(info)")
        let stored = try #require((object["analysis"] as? [String: Any])?["loudness"] as? [String: Any], "\(info)")
        let analyzed = try #require((try json(try EarmarkCLI.run(["analyze", "--json", track.path])) as? [String: Any])?["loudness"] as? [String: Any])
        #expect(abs(number(stored, "integrated") - number(analyzed, "integrated")) < 0.01)
        let perSecond = try #require(stored["shortTermPerSecond"] as? [Any])
        #expect(abs(Double(perSecond.count) - (number(analyzed, "duration") - 2)) <= 1, "\(perSecond.count)")
        let text = try EarmarkCLI.run(["catalog", "info", "1", "--catalog", catalog])
        #expect(text.stdoutText.contains("loudness:") && text.stdoutText.contains("LUFS integrated"), "\(text)")

        #expect(try Run.sqlite(catalog, "SELECT group_concat(kind) FROM (SELECT kind FROM track_analysis ORDER BY kind)")
            .trimmingCharacters(in: .whitespacesAndNewlines) == "instruments,key,loudness,pace,rhythm,sound,structure")
        let removed = try EarmarkCLI.run(["catalog", "remove", "1", "--catalog", catalog])
        #expect(removed.status == 0, "\(removed)")
        #expect(try Run.sqlite(catalog, "SELECT count(*) FROM track_analysis").trimmingCharacters(in: .whitespacesAndNewlines) == "0")

        // Without a model, --analyze still stores loudness and says that sound classification was skipped.
        let noModel = dir.path("no-model.earcat")
        let skipped = try EarmarkCLI.run(["catalog", "add", "--analyze", "--catalog", noModel, track.path],
                                         environment: ["EARMARK_MODEL": dir.path("absent.emodel")])
        #expect(skipped.status == 0, "\(skipped)")
        #expect(skipped.stderrText.contains("sound classification skipped"))
        #expect(try Run.sqlite(noModel, "SELECT group_concat(kind) FROM (SELECT kind FROM track_analysis ORDER BY kind)")
            .trimmingCharacters(in: .whitespacesAndNewlines) == "key,loudness,pace,rhythm,structure")

        let plain = dir.path("plain.earcat")
        #expect(try EarmarkCLI.run(["catalog", "add", "--catalog", plain, track.path]).status == 0)
        let bare = try #require(try json(try EarmarkCLI.run(["catalog", "info", "1", "--catalog", plain, "--json"])) as? [String: Any])
        #expect((bare["analysis"] as? [String: Any])?.isEmpty == true)
    }

    @Test("a catalog of schema 2 (hash index inside the file) is refused by match with the command that converts it; `catalog migrate` converts it, keeping every track, and match finds the track")
    func schemaTwoCatalog() async throws {
        let audio = try TestAudio.set()
        let dir = try TemporaryDirectory("schema2")
        let catalog = dir.path("old.earcat")
        let configuration = SignatureConfiguration.current
        var tracks: [LegacyCatalog.Track] = []
        for stem in ["sorcerer", "pingus-4"] {
            let f = try Fingerprinter.fingerprint(path: try audio.reference(stem).path, configuration: configuration.forCatalog)
            let landmarks = Landmarks.extract(from: f.signature, role: .reference, configuration: configuration)
            tracks.append(LegacyCatalog.Track(
                title: stem, duration: f.signature.duration, contentHash: f.contentHash,
                landmarks: landmarks.map { ($0.hash, $0.frame) },
                peaks: f.signature.peaks.filter { Int($0.rank) < configuration.queryRankLimit }.map { ($0.frame, $0.bin) }))
        }
        try LegacyCatalog.writeSchema2(path: catalog, signatureVersion: Int(configuration.version), minBin: configuration.minBin, tracks: tracks)
        let clip = dir.file("clip.wav")
        try Fixtures.cut(try audio.reference("sorcerer"), start: 20, seconds: 8, to: clip)
        let refused = try EarmarkCLI.run(["match", "--catalog", catalog, clip.path])
        #expect(refused.status == 2 && refused.stderrText.contains("earmark catalog migrate"), "\(refused)")
        let migrated = try EarmarkCLI.run(["catalog", "migrate", "--catalog", catalog, "--json"])
        #expect(migrated.status == 0, "\(migrated)")
        let report = try #require(try json(migrated) as? [String: Any])
        #expect(report["schemaVersion"] as? Int == 3 && report["trackCount"] as? Int == 2, "\(migrated)")
        #expect(report["postings"] as? Int == tracks.reduce(0) { $0 + Set($1.landmarks.map { "\($0.hash) \($0.frame)" }).count })
        let matched = try EarmarkCLI.run(["match", "--catalog", catalog, clip.path])
        #expect(matched.status == 0 && matched.stdoutText.contains("sorcerer"), "\(matched)")
        let info = try #require(try json(try EarmarkCLI.run(["catalog", "info", "1", "--catalog", catalog, "--json"])) as? [String: Any])
        #expect((info["analysis"] as? [String: Any])?.isEmpty == true)
        #expect(try EarmarkCLI.run(["catalog", "check", "--catalog", catalog]).status == 0)
    }
}
