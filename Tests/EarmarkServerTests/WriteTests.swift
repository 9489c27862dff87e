import EarmarkKit
@testable import EarmarkServer
import EarmarkTestSupport
import Foundation
import Testing

/// Writes, tokens, timeouts, the export and /metrics of `earmark serve`, over real HTTP on loopback. Each test that
/// writes serves a catalog of its own.
@Suite struct WriteTests {
    static let writeToken = "w-0123456789abcdef"
    static let readToken = "r-fedcba9876543210"
    static let bearer = [("Authorization", "Bearer \(writeToken)")]

    /// A catalog of two reference tracks in a folder of its own, and clips of other tracks to add.
    struct Scene {
        let folder: TemporaryDirectory
        let catalog: String
        let audio: TestAudioSet

        init(_ name: String) async throws {
            audio = try await ReferenceCatalog.shared.value().audio
            folder = try TemporaryDirectory(name)
            catalog = folder.path("writes.earcat")
            _ = try await Fixtures.index([try audio.reference("pingus-3"), try audio.reference("sorcerer")], into: catalog)
        }

        /// `seconds` of the reference `stem` from `start`, as a 16-bit WAV.
        func clip(_ stem: String, start: Double = 0, seconds: Double = 12) throws -> Data {
            let url = folder.file("\(stem)-\(start)-\(seconds).wav")
            if !FileManager.default.fileExists(atPath: url.path) {
                try Fixtures.cut(try audio.reference(stem), start: start, seconds: seconds, to: url)
            }
            return try Data(contentsOf: url)
        }
    }

    static func send(_ server: TestServer, _ method: String, _ target: String, body: Data? = nil,
                     headers: [(String, String)] = []) async throws -> HTTPReply {
        try await HTTPTestClient.send(port: server.port, method, target, body: body, extraHeaders: headers)
    }

    static func json(_ object: Any) -> Data { (try? JSONSerialization.data(withJSONObject: object)) ?? Data() }

    static func checkCatalog(_ path: String) async throws {
        let check = try await HTTPTestClient.onDispatchThread { try EarmarkCLI.run(["catalog", "check", "--catalog", path]) }
        #expect(check.status == 0, "\(check)")
    }

    /// Add, read back, match, update, refuse a duplicate, remove: each as the command line does it.
    @Test func addUpdateAndRemoveWithTheToken() async throws {
        let scene = try await Scene("serve-writes")
        let song = try scene.clip("pingus-5", start: 10, seconds: 12)
        let metadata = #"{"isrc":"GBXXX0000001","year":1999}"#.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        try await TestServer.with(catalog: scene.catalog, configure: { $0.writeToken = WriteTests.writeToken }) { server in
            let added = try await WriteTests.send(server, "POST", "/v1/tracks?title=New%20Song&artist=The%20Band&metadata=\(metadata)",
                                                  body: song, headers: WriteTests.bearer + [("Content-Type", "audio/wav")])
            #expect(added.status == 201, "\(added.text)")
            let id = try #require(added.object["id"] as? Int)
            #expect(added.headers["location"] == "/v1/tracks/\(id)")
            #expect(added.object["title"] as? String == "New Song")
            #expect(added.object["artist"] as? String == "The Band")
            #expect((added.object["metadata"] as? [String: Any])?["isrc"] as? String == "GBXXX0000001")
            #expect(added.object["analysis"] is [String: Any])
            #expect(added.object["sourcePath"] as? String == "upload:")
            #expect(try FileManager.default.contentsOfDirectory(atPath: server.server.uploadFolder).isEmpty)

            // Readers see it on the next request: by id, in the list, and as a match.
            let read = try await server.get("/v1/tracks/\(id)")
            #expect(read.object as NSDictionary == added.object as NSDictionary)
            #expect(try await server.get("/v1/catalog").object["trackCount"] as? Int == 3)
            let match = try await server.post("/v1/match", body: try scene.clip("pingus-5", start: 14, seconds: 6))
            let first = (match.object["matches"] as? [[String: Any]])?.first
            #expect((first?["track"] as? [String: Any])?["id"] as? Int == id, "\(match.text)")
            #expect(abs((first?["matchOffset"] as? Double ?? -1) - 4) < 0.1)

            // The same audio again (with the type `curl --data-binary` sends by default): 409, naming the track.
            let again = try await WriteTests.send(server, "POST", "/v1/tracks?name=again.wav", body: song,
                                                  headers: WriteTests.bearer + [("Content-Type", "application/x-www-form-urlencoded")])
            #expect(again.status == 409, "\(again.text)")
            #expect(again.errorCode == "duplicate_audio")
            #expect(again.headers["location"] == "/v1/tracks/\(id)")
            #expect(try await server.get("/v1/tracks?q=New").object["total"] as? Int == 1)

            // PATCH: fields given change, a metadata key set to null goes, the others stay.
            let patch = WriteTests.json(["title": "Renamed", "metadata": ["isrc": NSNull(), "label": "Indie"]])
            let patched = try await WriteTests.send(server, "PATCH", "/v1/tracks/\(id)", body: patch,
                                                    headers: WriteTests.bearer + [("Content-Type", "application/json")])
            #expect(patched.status == 200, "\(patched.text)")
            #expect(patched.object["title"] as? String == "Renamed")
            #expect(patched.object["artist"] as? String == "The Band")
            let meta = patched.object["metadata"] as? [String: Any] ?? [:]
            #expect(meta["isrc"] == nil && meta["label"] as? String == "Indie" && meta["year"] as? Double == 1999)
            #expect(try await server.get("/v1/tracks/\(id)").object as NSDictionary == patched.object as NSDictionary)

            let removed = try await WriteTests.send(server, "DELETE", "/v1/tracks/\(id)", headers: WriteTests.bearer)
            #expect(removed.status == 204, "\(removed.text)")
            #expect(try await server.get("/v1/tracks/\(id)").status == 404)
            let twice = try await WriteTests.send(server, "DELETE", "/v1/tracks/\(id)", headers: WriteTests.bearer)
            #expect(twice.status == 404)
            #expect(twice.errorCode == "no_such_track")
            let gone = try await server.post("/v1/match", body: try scene.clip("pingus-5", start: 14, seconds: 6))
            #expect((gone.object["matches"] as? [Any])?.isEmpty == true, "\(gone.text)")
        }
        try await WriteTests.checkCatalog(scene.catalog)
    }

    /// analyze=true stores what `catalog add --analyze` stores for the same file; without a title, the track is
    /// titled after `name`.
    @Test func analyzeStoresWhatCatalogAddAnalyzeStores() async throws {
        let scene = try await Scene("serve-analyze")
        let model = try await HTTPTestClient.onDispatchThread { try TestModel.set().model.path }
        let song = scene.folder.file("song.wav")
        try scene.clip("pingus-6", start: 30, seconds: 12).write(to: song)
        let other = scene.folder.path("cli.earcat")
        let cli = try await HTTPTestClient.onDispatchThread { () -> ProcessOutput in
            let added = try EarmarkCLI.run(["catalog", "add", "--analyze", "--model", model, "--catalog", other, song.path])
            guard added.status == 0 else { return added }
            return try EarmarkCLI.run(["catalog", "info", "1", "--json", "--catalog", other, "--svg", scene.folder.path("cli.svg")])
        }
        #expect(cli.status == 0, "\(cli)")
        let expected = try #require(try JSONSerialization.jsonObject(with: cli.stdout) as? [String: Any])
        try await TestServer.with(catalog: scene.catalog, configure: {
            $0.writeToken = WriteTests.writeToken
            $0.soundModelPath = model
        }) { server in
            let added = try await WriteTests.send(server, "POST", "/v1/tracks?analyze=true&name=song.wav", body: try Data(contentsOf: song),
                                                  headers: WriteTests.bearer)
            #expect(added.status == 201, "\(added.text)")
            #expect(added.object["title"] as? String == "song")
            #expect(added.object["sourcePath"] as? String == "upload:song.wav")
            let analysis = try #require(added.object["analysis"] as? [String: Any])
            #expect(analysis["loudness"] != nil && analysis["sound"] != nil, "\(analysis.keys.sorted())")
            #expect(analysis as NSDictionary == expected["analysis"] as? NSDictionary)
            #expect(added.object["landmarkCount"] as? Int == expected["landmarkCount"] as? Int)
            #expect(added.object["contentHash"] as? String == expected["contentHash"] as? String)
            // The same picture as `catalog info --svg` draws, every lane there.
            let id = try #require(added.object["id"] as? Int)
            let picture = try await server.get("/v1/tracks/\(id)/timeline.svg")
            #expect(picture.status == 200)
            #expect(picture.body == (try Data(contentsOf: scene.folder.file("cli.svg"))))
            #expect(try SVGDocument(picture.body).lanes == ["loudness", "beats", "sections", "key", "instruments", "sounds", "speech"])
        }
    }

    /// analyze=true also stores the transcript of what the classifier hears as speech, as `catalog add --analyze`
    /// does for the same file; transcribe=false stores none (`--no-transcribe`).
    @Test(.enabled(if: TestSpeechModel.available, Comment(rawValue: TestSpeechModel.skipReason)))
    func analyzeTranscribesAsCatalogAddAnalyzeDoes() async throws {
        let scene = try await Scene("serve-analyze-speech")
        let (speech, sound) = try await TranscribeServerTests.models()
        let prompt = try SpeechPrompts.path("agent-alreadyon")
        let other = scene.folder.path("cli.earcat")
        let cli = try await HTTPTestClient.onDispatchThread { () -> ProcessOutput in
            let added = try EarmarkCLI.run(["catalog", "add", "--analyze", "--model", sound, "--speech-model", speech, "--catalog", other, prompt],
                                           timeout: 600)
            guard added.status == 0 else { return added }
            return try EarmarkCLI.run(["catalog", "info", "1", "--json", "--catalog", other])
        }
        #expect(cli.status == 0, "\(cli)")
        let expected = try #require(try JSONSerialization.jsonObject(with: cli.stdout) as? [String: Any])
        let expectedAnalysis = try #require(expected["analysis"] as? [String: Any])
        let transcript = try #require(expectedAnalysis["speech"] as? [String: Any], "\(expectedAnalysis.keys.sorted())")
        let segments = try #require(transcript["segments"] as? [[String: Any]])
        #expect(segments.compactMap { $0["text"] as? String }.joined(separator: " ").contains("agent number"), "\(segments)")
        try await TestServer.with(catalog: scene.catalog, configure: {
            $0.writeToken = WriteTests.writeToken
            $0.soundModelPath = sound
            $0.speechModelPath = speech
            // A debug build transcribing the prompt ran past the default minute on a loaded machine (504).
            $0.matchTimeout = .seconds(600)
        }) { server in
            let body = try Data(contentsOf: URL(fileURLWithPath: prompt))
            let added = try await WriteTests.send(server, "POST", "/v1/tracks?analyze=true&name=prompt.wav", body: body, headers: WriteTests.bearer)
            #expect(added.status == 201, "\(added.text)")
            let analysis = try #require(added.object["analysis"] as? [String: Any])
            #expect(analysis as NSDictionary == expectedAnalysis as NSDictionary)
            // The track's picture writes what is said under the speech.
            let id = try #require(added.object["id"] as? Int)
            let picture = try SVGDocument(try await server.get("/v1/tracks/\(id)/timeline.svg").body)
            let said = picture.all("text", ["class": "transcript"]).map(\.text).joined(separator: " ")
            #expect(said.contains("agent"), "\(said)")
            // Removed and added again with transcribe=false: no transcript, the rest of the analysis as before.
            #expect(try await WriteTests.send(server, "DELETE", "/v1/tracks/\(id)", headers: WriteTests.bearer).status == 204)
            let plain = try await WriteTests.send(server, "POST", "/v1/tracks?analyze=true&transcribe=false&name=prompt.wav", body: body,
                                                  headers: WriteTests.bearer)
            #expect(plain.status == 201, "\(plain.text)")
            let stored = try #require(plain.object["analysis"] as? [String: Any])
            #expect(stored["speech"] == nil && stored["sound"] != nil, "\(stored.keys.sorted())")
            let bad = try await WriteTests.send(server, "POST", "/v1/tracks?analyze=true&transcribe=perhaps", body: body, headers: WriteTests.bearer)
            #expect(bad.status == 400, "\(bad.text)")
        }
    }

    @Test func writesWithoutTheRightTokenGet401() async throws {
        let scene = try await Scene("serve-tokens")
        let song = try scene.clip("pingus-5")
        try await TestServer.with(catalog: scene.catalog, configure: { $0.writeToken = WriteTests.writeToken }) { server in
            let attempts: [(String, String, Data?, [(String, String)], String)] = [
                ("POST", "/v1/tracks", song, [], "unauthorized"),
                ("POST", "/v1/tracks", song, [("Authorization", "Bearer w-0123456789abcdeX")], "invalid_token"),
                ("POST", "/v1/tracks", song, [("Authorization", "Bearer w-0123456789abcdef0")], "invalid_token"),
                ("POST", "/v1/tracks", song, [("Authorization", "Basic dXNlcjpwYXNz")], "unauthorized"),
                ("PATCH", "/v1/tracks/1", WriteTests.json(["title": "x"]), [("Content-Type", "application/json")], "unauthorized"),
                ("DELETE", "/v1/tracks/1", nil, [("Authorization", "Bearer ")], "unauthorized"),
            ]
            for (method, target, body, headers, code) in attempts {
                let reply = try await WriteTests.send(server, method, target, body: body, headers: headers)
                #expect(reply.status == 401, "\(method) \(target) \(headers): \(reply.text)")
                #expect(reply.errorCode == code, "\(method) \(target) \(headers): \(reply.text)")
                #expect(reply.headers["www-authenticate"]?.hasPrefix("Bearer") == true)
            }
            // `Expect: 100-continue`: a client without the token gets its 401 at once, not a `100` that asks for the body.
            for (headers, first) in [("", 401), ("Authorization: Bearer \(WriteTests.writeToken)\r\n", 100)] {
                let reply = try await HTTPTestClient.onDispatchThread { () -> HTTPReply in
                    let s = try Socket(port: server.port)
                    defer { s.close() }
                    try s.write(Data("POST /v1/tracks HTTP/1.1\r\nHost: x\r\n\(headers)Expect: 100-continue\r\nContent-Length: 9\r\n\r\n".utf8))
                    return try s.readReply()
                }
                #expect(reply.status == first, "\(headers): \(reply.text)")
            }
            // Reads stay open without a read token; the scheme's case does not matter.
            #expect(try await server.get("/v1/tracks").status == 200)
            let lower = try await WriteTests.send(server, "DELETE", "/v1/tracks/999", headers: [("Authorization", "bearer \(WriteTests.writeToken)")])
            #expect(lower.status == 404)
            #expect(try await server.get("/v1/catalog").object["trackCount"] as? Int == 2)
        }
        try await WriteTests.checkCatalog(scene.catalog)
    }

    /// A token file that cannot be read, is empty or holds more than one word stops `earmark serve` at start (exit 2).
    @Test func badTokenFilesStopTheCommand() async throws {
        let catalog = try await ReferenceCatalog.shared.value()
        let folder = try TemporaryDirectory("serve-token-files")
        try Data(" \n\t\n".utf8).write(to: folder.file("blank"))
        try Data("two words\n".utf8).write(to: folder.file("spaced"))
        for (option, file, says) in [("--token-file", folder.path("missing"), "cannot be read"),
                                     ("--token-file", folder.path("blank"), "empty"),
                                     ("--read-token-file", folder.path("spaced"), "visible ASCII")] {
            let run = try await HTTPTestClient.onDispatchThread {
                try EarmarkCLI.run(["serve", "--catalog", catalog.path, "--port", "0", option, file], timeout: 120)
            }
            #expect(run.status == 2, "\(option) \(file): \(run)")
            #expect(run.stderrText.contains(says), "\(run)")
        }
    }

    @Test func withoutATokenFileWritesGet403() async throws {
        let catalog = try await ReferenceCatalog.shared.value()
        try await TestServer.with(catalog: catalog.path) { server in
            for (method, target) in [("POST", "/v1/tracks"), ("PATCH", "/v1/tracks/1"), ("DELETE", "/v1/tracks/1")] {
                let reply = try await WriteTests.send(server, method, target, body: method == "DELETE" ? nil : Data("x".utf8),
                                                      headers: [("Authorization", "Bearer anything")])
                #expect(reply.status == 403, "\(method) \(target): \(reply.text)")
                #expect(reply.errorCode == "writes_disabled")
            }
            #expect(try await server.get("/v1/tracks").status == 200)
        }
    }

    @Test func aReadTokenGuardsReadsButNotHealth() async throws {
        let catalog = try await ReferenceCatalog.shared.value()
        try await TestServer.with(catalog: catalog.path, configure: {
            $0.readToken = WriteTests.readToken
            $0.writeToken = WriteTests.writeToken
        }) { server in
            for target in ["/v1/tracks", "/v1/catalog", "/v1/tracks/1", "/metrics", "/v1/catalog/export"] {
                let open = try await server.get(target)
                #expect(open.status == 401, "\(target): \(open.text)")
                #expect(open.headers["www-authenticate"]?.hasPrefix("Bearer") == true)
                let wrong = try await WriteTests.send(server, "GET", target, headers: [("Authorization", "Bearer nope")])
                #expect(wrong.status == 401)
            }
            let read = [("Authorization", "Bearer \(WriteTests.readToken)")]
            #expect(try await WriteTests.send(server, "GET", "/v1/tracks", headers: read).status == 200)
            #expect(try await WriteTests.send(server, "GET", "/v1/catalog", headers: WriteTests.bearer).status == 200)
            let match = try await WriteTests.send(server, "POST", "/v1/match", body: Data("not audio".utf8))
            #expect(match.status == 401)
            #expect(try await WriteTests.send(server, "POST", "/v1/match", body: Data("not audio".utf8), headers: read).status == 415)
            // The read token does not write.
            let write = try await WriteTests.send(server, "DELETE", "/v1/tracks/1", headers: read)
            #expect(write.status == 401)
            #expect(write.errorCode == "invalid_token")
            #expect(try await server.get("/healthz").status == 200)
            #expect(try await server.get("/readyz").status == 200)
        }
    }

    /// Every bad write is a 4xx with a JSON error, nothing is stored, and the catalog stays healthy.
    @Test func badWritesAreClientErrors() async throws {
        let scene = try await Scene("serve-bad-writes")
        let silence = scene.folder.file("silence.wav")
        try WAVFile.write([Float](repeating: 0, count: 5 * 44_100), to: silence)
        let truncated = try scene.clip("pingus-5").prefix(5_000)
        try await TestServer.with(catalog: scene.catalog, configure: {
            $0.writeToken = WriteTests.writeToken
            $0.maxBodyBytes = 3 * 1_048_576
        }) { server in
            let json = [("Content-Type", "application/json")]
            let cases: [(String, String, Data?, [(String, String)], Int, String)] = [
                ("POST", "/v1/tracks", Data("this is not audio, only text\n".utf8), [], 415, "unsupported_format"),
                ("POST", "/v1/tracks", Data(), [], 400, "empty_body"),
                ("POST", "/v1/tracks", truncated, [], 422, "corrupt_audio"),
                ("POST", "/v1/tracks", try Data(contentsOf: silence), [], 422, "add_failed"),
                ("POST", "/v1/tracks", try scene.clip("pingus-5"), json, 415, "unsupported_media_type"),
                ("POST", "/v1/tracks?metadata=%5B1%5D", try scene.clip("pingus-5"), [], 400, "invalid_parameter"),
                ("POST", "/v1/tracks?metadata=%7Bnope", try scene.clip("pingus-5"), [], 400, "invalid_parameter"),
                ("POST", "/v1/tracks?analyze=perhaps", try scene.clip("pingus-5"), [], 400, "invalid_parameter"),
                ("POST", "/v1/tracks?colour=red", try scene.clip("pingus-5"), [], 400, "unknown_parameter"),
                ("POST", "/v1/tracks", Data(repeating: 0x52, count: 4 * 1_048_576), [], 413, "body_too_large"),
                ("PATCH", "/v1/tracks/1", Data("{\"title\": ".utf8), json, 400, "malformed_json"),
                ("PATCH", "/v1/tracks/1", Data("[1, 2]".utf8), json, 400, "malformed_json"),
                ("PATCH", "/v1/tracks/1", WriteTests.json(["title": "x"]), [("Content-Type", "text/plain")], 415, "unsupported_media_type"),
                ("PATCH", "/v1/tracks/1", WriteTests.json(["title": "x"]), [], 415, "unsupported_media_type"),
                ("PATCH", "/v1/tracks/1", WriteTests.json(["colour": "red"]), json, 400, "invalid_body"),
                ("PATCH", "/v1/tracks/1", WriteTests.json(["title": NSNull()]), json, 400, "invalid_body"),
                ("PATCH", "/v1/tracks/1", WriteTests.json(["title": 7]), json, 400, "invalid_body"),
                ("PATCH", "/v1/tracks/1", WriteTests.json(["metadata": ["no-such-key": NSNull()]]), json, 400, "invalid_body"),
                ("PATCH", "/v1/tracks/1", WriteTests.json([String: Any]()), json, 400, "nothing_to_change"),
                ("PATCH", "/v1/tracks/999", WriteTests.json(["title": "x"]), json, 404, "no_such_track"),
                ("PATCH", "/v1/tracks/abc", WriteTests.json(["title": "x"]), json, 400, "invalid_parameter"),
                ("PATCH", "/v1/tracks/1", Data(repeating: 0x20, count: 2 * 1_048_576), json, 413, "body_too_large"),
                ("DELETE", "/v1/tracks/999", nil, [], 404, "no_such_track"),
                ("DELETE", "/v1/tracks/0", nil, [], 400, "invalid_parameter"),
                ("DELETE", "/v1/tracks/1?force=true", nil, [], 400, "unknown_parameter"),
            ]
            for (method, target, body, headers, status, code) in cases {
                let reply = try await WriteTests.send(server, method, target, body: body, headers: WriteTests.bearer + headers)
                #expect(reply.status == status, "\(method) \(target): \(reply.text)")
                #expect(reply.errorCode == code, "\(method) \(target): \(reply.text)")
                let message = (reply.object["error"] as? [String: Any])?["message"] as? String
                #expect(message?.contains(TestPaths.scratchRoot.path) == false, "\(method) \(target) leaks the upload's path: \(message ?? "")")
            }
            #expect(try await server.get("/v1/catalog").object["trackCount"] as? Int == 2)
            #expect(try await server.get("/v1/tracks/1").object["title"] as? String == "pingus-3")
            try await waitUntil { (try? FileManager.default.contentsOfDirectory(atPath: server.server.uploadFolder).isEmpty) == true }
        }
        try await WriteTests.checkCatalog(scene.catalog)
    }

    /// The export streamed is the file `earmark catalog export` writes: the same bytes but for the fresh index id
    /// each export gets.
    @Test func exportIsWhatTheCommandLineWrites() async throws {
        let catalog = try await ReferenceCatalog.shared.value()
        let folder = try TemporaryDirectory("serve-export")
        let byCLI = folder.path("cli.earcat"), byServer = folder.path("server.earcat")
        let made = try await HTTPTestClient.onDispatchThread { try EarmarkCLI.run(["catalog", "export", "--catalog", catalog.path, byCLI]) }
        #expect(made.status == 0, "\(made)")
        try await TestServer.with(catalog: catalog.path) { server in
            let reply = try await server.get("/v1/catalog/export")
            #expect(reply.status == 200)
            #expect(reply.headers["content-type"] == "application/vnd.sqlite3")
            #expect(reply.headers["content-length"] == String(reply.body.count))
            try reply.body.write(to: URL(fileURLWithPath: byServer))
            try await waitUntil { (try? FileManager.default.contentsOfDirectory(atPath: server.server.uploadFolder).isEmpty) == true }
        }
        func normalized(_ path: String) throws -> Data {
            let id = try Run.sqlite(path, "SELECT value FROM catalog_info WHERE key = 'index_id'").trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(id.count == 36)
            let text = try Data(contentsOf: URL(fileURLWithPath: path))
            var out = Data()
            var rest = text[...]
            while let r = rest.range(of: Data(id.utf8)) {
                out += rest[rest.startIndex..<r.lowerBound] + Data(String(repeating: "0", count: id.count).utf8)
                rest = rest[r.upperBound...]
            }
            return out + rest
        }
        let a = try normalized(byCLI), b = try normalized(byServer)
        #expect(a.count > 0)
        #expect(a == b)
        let check = try await HTTPTestClient.onDispatchThread { try EarmarkCLI.run(["catalog", "check", "--catalog", byServer]) }
        #expect(check.status == 0, "\(check)")
    }

    @Test func metricsCountRequestsAndTracks() async throws {
        let catalog = try await ReferenceCatalog.shared.value()
        try await TestServer.with(catalog: catalog.path) { server in
            _ = try await server.get("/healthz")
            _ = try await server.get("/v1/tracks/abc")
            _ = try await server.get("/v1/tracks/1")
            _ = try await server.get("/nothing/here")
            let reply = try await server.get("/metrics")
            #expect(reply.status == 200)
            #expect(reply.headers["content-type"]?.hasPrefix("text/plain; version=0.0.4") == true)
            let text = reply.text
            for line in [
                #"earmark_http_requests_total{method="GET",route="/healthz",status="200"} 1"#,
                #"earmark_http_requests_total{method="GET",route="/v1/tracks/{id}",status="400"} 1"#,
                #"earmark_http_requests_total{method="GET",route="/v1/tracks/{id}",status="200"} 1"#,
                #"earmark_http_requests_total{method="GET",route="other",status="404"} 1"#,
                #"earmark_http_request_duration_seconds_count{method="GET",route="/healthz"} 1"#,
                "earmark_matches_in_progress 0",
                "earmark_listen_streams 0",
                "earmark_catalog_tracks \(catalog.ids.count)",
            ] {
                #expect(text.contains(line), "no \(line) in:\n\(text)")
            }
            #expect(text.contains("# TYPE earmark_http_request_duration_seconds histogram"))
            #expect(text.contains(#"earmark_http_request_duration_seconds_bucket{method="GET",route="/healthz",le="0.005"}"#))
        }
    }

    /// An upload that stops sending gets 408 after --upload-timeout, and its partial file is deleted.
    @Test func stalledUploadsGet408() async throws {
        let scene = try await Scene("serve-stall")
        try await TestServer.with(catalog: scene.catalog, configure: {
            $0.uploadTimeout = .seconds(2)
            $0.writeToken = WriteTests.writeToken
        }) { server in
            for target in ["/v1/match", "/v1/tracks", "/v1/catalog/import"] {
                let start = ContinuousClock.now
                let reply = try await HTTPTestClient.onDispatchThread { () -> HTTPReply in
                    let s = try Socket(port: server.port)
                    defer { s.close() }
                    try s.write(Data("POST \(target) HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(WriteTests.writeToken)\r\nContent-Length: 100000\r\n\r\nRIFF".utf8))
                    return try s.readReply()
                }
                #expect(reply.status == 408, "\(target): \(reply.text)")
                #expect(reply.errorCode == "upload_timeout")
                #expect(ContinuousClock.now - start < .seconds(60))
                try await waitUntil { (try? FileManager.default.contentsOfDirectory(atPath: server.server.uploadFolder).isEmpty) == true }
            }
            try await waitUntil { server.server.matchesInProgress == 0 }
        }
        // A slow but steady upload is not a stall: 14 pieces a second apart, longer in all than the timeout of
        // 10 s, which bounds each pause only. (Generous: this test process also builds catalogs, whose
        // fingerprinting can hold Swift's cooperative threads, on which the server reads bodies, for seconds.)
        try await TestServer.with(catalog: scene.catalog, configure: { $0.uploadTimeout = .seconds(10) }) { server in
            let slow = try await HTTPTestClient.onDispatchThread { () -> HTTPReply in
                let s = try Socket(port: server.port)
                defer { s.close() }
                let pieces = (0..<14).map { Data("not audio, piece \($0)\n".utf8) }
                try s.write(Data("POST /v1/match HTTP/1.1\r\nHost: x\r\nContent-Length: \(pieces.reduce(0) { $0 + $1.count })\r\n\r\n".utf8))
                for piece in pieces {
                    Thread.sleep(forTimeInterval: 1)
                    try s.write(piece)
                }
                return try s.readReply()
            }
            #expect(slow.status == 415, "\(slow.text)")
            let fine = try await server.post("/v1/match", body: try scene.clip("pingus-3", start: 20, seconds: 6))
            #expect(fine.status == 200, "\(fine.text)")
            #expect(try await server.get("/v1/catalog").object["trackCount"] as? Int == 2)
        }
    }

    /// A match (or an addition) that runs past --match-timeout is answered 504 at once; it still holds its place
    /// until it ends.
    @Test func matchesPastTheTimeoutGet504() async throws {
        let scene = try await Scene("serve-timeout")
        let clip = try scene.clip("pingus-3", start: 20, seconds: 10)
        try await TestServer.with(catalog: scene.catalog, configure: {
            $0.matchTimeout = .milliseconds(1)
            $0.writeToken = WriteTests.writeToken
        }) { server in
            let reply = try await server.post("/v1/match", body: clip)
            #expect(reply.status == 504, "\(reply.text)")
            #expect(reply.errorCode == "timeout")
            let add = try await WriteTests.send(server, "POST", "/v1/tracks", body: try scene.clip("pingus-5"), headers: WriteTests.bearer)
            #expect(add.status == 504, "\(add.text)")
            #expect(add.errorCode == "timeout")
            try await waitUntil { server.server.matchesInProgress == 0 }
        }
        try await WriteTests.checkCatalog(scene.catalog)
    }

    /// `earmark serve` killed with SIGKILL while tracks are being uploaded and added, three times on one catalog:
    /// 50 and 300 ms after the uploads, then as soon as the first of them is committed (the second is being
    /// added then, or waiting for the writer). Each time the catalog passes `catalog check`, the next server
    /// opens it, and each track is either all there (a clip of it matches it at the right offset) or absent.
    @Test func killedDuringUploadsTheCatalogStaysWhole() async throws {
        let scene = try await Scene("serve-kill")
        let tokenFile = scene.folder.path("token")
        try Data("  \(WriteTests.writeToken)\n".utf8).write(to: URL(fileURLWithPath: tokenFile))
        var expectedTitles: Set<String> = ["pingus-3", "sorcerer"]
        for (round, delay) in [50, 300, nil].enumerated() {
            let process = try EarmarkCLI.start(["serve", "--catalog", scene.catalog, "--port", "0", "--json", "--token-file", tokenFile])
            var port: Int?
            for _ in 0..<15_000 where port == nil {
                let text = try process.standardOutputSoFar()
                if let object = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any] {
                    port = object["port"] as? Int
                    #expect(object["writes"] as? Bool == true)
                }
                if port == nil { try await Task.sleep(for: .milliseconds(20)) }
            }
            guard let port else {
                process.signal(SIGKILL)
                Issue.record("no listening line: \(try await process.finished())")
                return
            }
            // Two uploads sent whole (being added when the kill comes, or added), two broken off half-way; each
            // round cuts other seconds of the tracks, so no upload repeats audio already stored.
            let start = Double(5 + 15 * round)
            let uploads: [(stem: String, whole: Bool)] = [("pingus-4", true), ("pingus-5", true), ("pingus-6", false), ("goin_march", false)]
            var bodies: [Data] = []
            for u in uploads { bodies.append(try scene.clip(u.stem, start: start, seconds: 12)) }
            let sent = LockedValue(0)
            let sockets = LockedValue<[Socket]>([])
            for (u, body) in zip(uploads, bodies) {
                DispatchQueue.global().async {
                    defer { sent.withLock { $0 += 1 } }
                    guard let s = try? Socket(port: port) else { return }
                    sockets.withLock { $0.append(s) }
                    let head = "POST /v1/tracks?title=kill-\(u.stem)-\(Int(start)) HTTP/1.1\r\nHost: x\r\n"
                        + "Authorization: Bearer \(WriteTests.writeToken)\r\nContent-Length: \(body.count)\r\n\r\n"
                    try? s.write(Data(head.utf8) + (u.whole ? body : body.prefix(body.count / 2)))
                }
            }
            try await waitUntil { sent.withLock { $0 } == uploads.count }
            if let delay {
                try await Task.sleep(for: .milliseconds(delay))
            } else {
                let committed = "SELECT count(*) FROM tracks WHERE title LIKE 'kill-%-\(Int(start))'"
                try await waitUntil { (try? Run.sqlite(scene.catalog, committed).trimmingCharacters(in: .whitespacesAndNewlines)) != "0" }
            }
            process.signal(SIGKILL)
            let output = try await process.finished(timeout: 120)
            #expect(output.status != 0)
            for s in sockets.withLock({ $0 }) { s.close() }

            try await WriteTests.checkCatalog(scene.catalog)
            let list = try await HTTPTestClient.onDispatchThread { try EarmarkCLI.run(["catalog", "list", "--json", "--catalog", scene.catalog]) }
            #expect(list.status == 0, "\(list)")
            let tracks = (try JSONSerialization.jsonObject(with: list.stdout) as? [[String: Any]]) ?? []
            let titles = Set(tracks.compactMap { $0["title"] as? String })
            print("SIGKILL \(delay.map { "\($0) ms after the uploads" } ?? "at the first commit"): the catalog holds \(titles.sorted())")
            let whole = Set(uploads.filter(\.whole).map { "kill-\($0.stem)-\(Int(start))" })
            #expect(titles.subtracting(expectedTitles).isSubset(of: whole), "\(titles)")
            #expect(expectedTitles.isSubset(of: titles))
            if delay == nil { #expect(titles.count > expectedTitles.count, "nothing was added before the kill") }
            expectedTitles = titles
            // Every track added before the kill is whole: a clip of it finds it at the right offset.
            for track in tracks {
                guard let title = track["title"] as? String, title.hasPrefix("kill-"), title.hasSuffix("-\(Int(start))") else { continue }
                let stem = String(title.dropFirst(5).dropLast("-\(Int(start))".count))
                let clip = scene.folder.file("probe-\(stem)-\(round).wav")
                try Fixtures.cut(try scene.audio.reference(stem), start: start + 4, seconds: 6, to: clip)
                let match = try await HTTPTestClient.onDispatchThread {
                    try EarmarkCLI.run(["match", "--json", "--catalog", scene.catalog, clip.path])
                }
                let object = (try? JSONSerialization.jsonObject(with: match.stdout) as? [String: Any]) ?? [:]
                let first = (object["matches"] as? [[String: Any]])?.first
                #expect((first?["track"] as? [String: Any])?["id"] as? Int == track["id"] as? Int, "\(title): \(match)")
                #expect(abs((first?["matchOffset"] as? Double ?? -1) - 4) < 0.1)
            }
        }
    }
}
