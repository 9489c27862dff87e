import EarmarkKit
@testable import EarmarkServer
import EarmarkTestSupport
import Foundation
import Testing

/// `earmark serve` over real HTTP on loopback, against the catalog of the real reference tracks.
@Suite struct ServerTests {
    @Test func healthAndReadiness() async throws {
        let catalog = try await ReferenceCatalog.shared.value()
        try await TestServer.with(catalog: catalog.path) { server in
            let health = try await server.get("/healthz")
            #expect(health.status == 200)
            #expect(health.object["status"] as? String == "ok")
            #expect(health.headers["content-type"]?.hasPrefix("application/json") == true)
            let ready = try await server.get("/readyz")
            #expect(ready.status == 200)
            #expect(ready.object["status"] as? String == "ready")
        }
    }

    @Test func stoppedServerNoLongerListens() async throws {
        let catalog = try await ReferenceCatalog.shared.value()
        let server = try await TestServer.start(catalog: catalog.path) { _ in }
        #expect(await HTTPTestClient.isListening(port: server.port))
        try await server.stop()
        #expect(!(await HTTPTestClient.isListening(port: server.port)))
    }

    @Test func matchAnswersWhatTheCommandLinePrints() async throws {
        let catalog = try await ReferenceCatalog.shared.value()
        let folder = try TemporaryDirectory("serve-match")
        let clip = folder.file("pingus-4-40s.wav")
        try Fixtures.cut(try catalog.audio.reference("pingus-4"), start: 40, seconds: 10, to: clip)
        let cli = try await HTTPTestClient.onDispatchThread {
            try EarmarkCLI.run(["match", "--json", "--catalog", catalog.path, clip.path])
        }
        #expect(cli.status == 0, "\(cli)")
        let expected = try #require(try JSONSerialization.jsonObject(with: cli.stdout) as? NSDictionary)

        try await TestServer.with(catalog: catalog.path) { server in
            let name = clip.path.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
            let reply = try await server.post("/v1/match?name=\(name)", body: try Data(contentsOf: clip),
                                              headers: [("Content-Type", "audio/wav")])
            #expect(reply.status == 200, "\(reply.text)")
            #expect(reply.object as NSDictionary == expected)
            let first = try #require((reply.object["matches"] as? [[String: Any]])?.first)
            #expect((first["track"] as? [String: Any])?["id"] as? Int == Int(catalog.ids["pingus-4"] ?? -1))
            #expect(abs((first["matchOffset"] as? Double ?? -1) - 40) < 0.1)

            // The same clip as a signature file: the same track at the same offset, and no loudness.
            let signature = folder.path("clip.earsig")
            let made = try await HTTPTestClient.onDispatchThread {
                try EarmarkCLI.run(["signature", clip.path, "-o", signature])
            }
            #expect(made.status == 0, "\(made)")
            let bySignature = try await server.post("/v1/match?maxMatches=1", body: try Data(contentsOf: URL(fileURLWithPath: signature)))
            #expect(bySignature.status == 200, "\(bySignature.text)")
            let match = try #require((bySignature.object["matches"] as? [[String: Any]])?.first)
            #expect((match["track"] as? [String: Any])?["id"] as? Int == Int(catalog.ids["pingus-4"] ?? -1))
            #expect(abs((match["matchOffset"] as? Double ?? -1) - 40) < 0.1)
            #expect(bySignature.object["loudness"] is NSNull)
            #expect(bySignature.object["path"] as? String == "upload")
        }
    }

    /// classify=true answers what `match --json --classify` prints, sound classification included.
    @Test func classifyAnswersWhatTheCommandLinePrints() async throws {
        let catalog = try await ReferenceCatalog.shared.value()
        let model = try await HTTPTestClient.onDispatchThread { try TestModel.set().model.path }
        let folder = try TemporaryDirectory("serve-classify")
        let clip = folder.file("clip.wav")
        try Fixtures.cut(try catalog.audio.reference("pingus-4"), start: 30, seconds: 8, to: clip)
        let cli = try await HTTPTestClient.onDispatchThread {
            try EarmarkCLI.run(["match", "--json", "--classify", "--model", model, "--catalog", catalog.path, clip.path])
        }
        #expect(cli.status == 0, "\(cli)")
        let expected = try #require(try JSONSerialization.jsonObject(with: cli.stdout) as? NSDictionary)
        try await TestServer.with(catalog: catalog.path, configure: { $0.soundModelPath = model }) { server in
            let name = clip.path.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
            let reply = try await server.post("/v1/match?classify=true&name=\(name)", body: try Data(contentsOf: clip))
            #expect(reply.status == 200, "\(reply.text)")
            #expect(reply.object as NSDictionary == expected)
            #expect(reply.object["sound"] is [String: Any])
        }
    }

    /// Tracks added to the catalog while the server runs are matched by the next request.
    @Test func tracksAddedWhileServingAreMatched() async throws {
        let audio = try await ReferenceCatalog.shared.value().audio
        let folder = try TemporaryDirectory("serve-growing")
        let path = folder.path("growing.earcat")
        _ = try await Fixtures.index([try audio.reference("pingus-3"), try audio.reference("sorcerer")], into: path)
        let clip = folder.file("clip.wav")
        try Fixtures.cut(try audio.reference("pingus-5"), start: 20, seconds: 8, to: clip)
        try await TestServer.with(catalog: path) { server in
            let before = try await server.post("/v1/match", body: try Data(contentsOf: clip))
            #expect(before.status == 200, "\(before.text)")
            #expect((before.object["matches"] as? [Any])?.isEmpty == true)
            let added = try await Fixtures.index([try audio.reference("pingus-5")], into: path)
            let after = try await server.post("/v1/match", body: try Data(contentsOf: clip))
            let first = (after.object["matches"] as? [[String: Any]])?.first
            #expect((first?["track"] as? [String: Any])?["id"] as? Int == Int(added[0].id), "\(after.text)")
            #expect(abs((first?["matchOffset"] as? Double ?? -1) - 20) < 0.1)
            #expect(try await server.get("/v1/catalog").object["trackCount"] as? Int == 3)
        }
    }

    @Test func badClipsAreClientErrors() async throws {
        let catalog = try await ReferenceCatalog.shared.value()
        let folder = try TemporaryDirectory("serve-bad")
        let silence = folder.file("silence.wav"), short = folder.file("short.wav"), clip = folder.file("clip.wav")
        try WAVFile.write([Float](repeating: 0, count: 5 * 44_100), to: silence)
        try Fixtures.cut(try catalog.audio.reference("pingus-4"), start: 40, seconds: 0.3, to: short)
        try Fixtures.cut(try catalog.audio.reference("pingus-4"), start: 40, seconds: 5, to: clip)
        let truncated = try Data(contentsOf: clip).prefix(5_000)
        try await TestServer.with(catalog: catalog.path) { server in
            let cases: [(String, Data, Int, String)] = [
                ("text", Data("this is not audio, only text\n".utf8), 415, "unsupported_format"),
                ("empty", Data(), 400, "empty_body"),
                ("silence", try Data(contentsOf: silence), 422, "no_usable_sound"),
                ("too short", try Data(contentsOf: short), 422, "too_short"),
                ("truncated", truncated, 422, "corrupt_audio"),
                ("damaged signature", Data("EARSIG".utf8) + Data(repeating: 7, count: 40), 422, "invalid_signature"),
            ]
            for (label, body, status, code) in cases {
                let reply = try await server.post("/v1/match", body: body)
                #expect(reply.status == status, "\(label): \(reply.text)")
                #expect(reply.errorCode == code, "\(label): \(reply.text)")
                let message = (reply.object["error"] as? [String: Any])?["message"] as? String
                #expect(message?.isEmpty == false, "\(label)")
                #expect(message?.contains(TestPaths.scratchRoot.path) == false, "\(label): leaks the upload's path: \(message ?? "")")
            }
            // Still serving after all of them.
            let fine = try await server.post("/v1/match", body: try Data(contentsOf: clip))
            #expect(fine.status == 200)
        }
    }

    @Test func bodiesOverTheLimitGet413() async throws {
        let catalog = try await ReferenceCatalog.shared.value()
        try await TestServer.with(catalog: catalog.path, configure: { $0.maxBodyBytes = 1_048_576 }) { server in
            // Announced too large: refused before any of it is read.
            let announced = try await server.post("/v1/match", body: nil, headers: [("Content-Length", "300000000")])
            #expect(announced.status == 413)
            #expect(announced.errorCode == "body_too_large")
            // Streamed without a length: refused once the limit is passed.
            let streamed = try await server.post("/v1/match", body: Data(repeating: 0x55, count: 2 * 1_048_576), chunked: true)
            #expect(streamed.status == 413)
            #expect(streamed.errorCode == "body_too_large")
            #expect(try await server.get("/healthz").status == 200)
        }
    }

    /// `Expect: 100-continue` gets `100 Continue` at once (clients such as curl wait for it before sending a body),
    /// unless the announced body is over the limit: then the 413 comes instead.
    @Test func expectContinueIsAnswered() async throws {
        let catalog = try await ReferenceCatalog.shared.value()
        try await TestServer.with(catalog: catalog.path, configure: { $0.maxBodyBytes = 1_048_576 }) { server in
            let (interim, final) = try await HTTPTestClient.onDispatchThread { () -> (HTTPReply, HTTPReply) in
                let socket = try Socket(port: server.port)
                defer { socket.close() }
                let body = Data("not audio, only text".utf8)
                try socket.write(Data("POST /v1/match HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: \(body.count)\r\n\r\n".utf8))
                let interim = try socket.readReply()
                try socket.write(body)
                return (interim, try socket.readReply())
            }
            #expect(interim.status == 100)
            #expect(final.status == 415)
            #expect(final.errorCode == "unsupported_format")
            let refused = try await server.post("/v1/match", body: nil,
                                                headers: [("Expect", "100-continue"), ("Content-Length", "300000000")])
            #expect(refused.status == 413)
        }
    }

    @Test func badParametersAndUnknownIDs() async throws {
        let catalog = try await ReferenceCatalog.shared.value()
        try await TestServer.with(catalog: catalog.path) { server in
            let wav = Data("RIFF".utf8)
            let cases: [(String, String, Int, String)] = [
                ("POST", "/v1/match?maxMatches=0", 400, "invalid_parameter"),
                ("POST", "/v1/match?maxMatches=two", 400, "invalid_parameter"),
                ("POST", "/v1/match?classify=maybe", 400, "invalid_parameter"),
                ("POST", "/v1/match?colour=blue", 400, "unknown_parameter"),
                ("GET", "/v1/tracks?limit=0", 400, "invalid_parameter"),
                ("GET", "/v1/tracks?offset=-1", 400, "invalid_parameter"),
                ("GET", "/v1/tracks?limit=5&limit=6", 400, "invalid_parameter"),
                ("GET", "/v1/tracks/abc", 400, "invalid_parameter"),
                ("GET", "/v1/tracks/999999", 404, "no_such_track"),
                ("GET", "/v1/catalog?x=1", 400, "unknown_parameter"),
                ("GET", "/v2/nothing", 404, "not_found"),
                ("PUT", "/v1/tracks/1", 405, "method_not_allowed"),
                ("GET", "/v1/match", 405, "method_not_allowed"),
                ("GET", "/v1/tracks/1/more", 404, "not_found"),
            ]
            for (method, target, status, code) in cases {
                let reply = try await HTTPTestClient.send(port: server.port, method, target, body: method == "POST" ? wav : nil)
                #expect(reply.status == status, "\(method) \(target): \(reply.text)")
                #expect(reply.errorCode == code, "\(method) \(target): \(reply.text)")
            }
            let wrongMethod = try await HTTPTestClient.send(port: server.port, "PUT", "/v1/match")
            #expect(wrongMethod.headers["allow"] == "POST")
            // A request line over the decoder's limit gets 431 and its JSON error, not a connection left hanging
            // (found by tools/serve-fuzz.sh), and the server goes on.
            let long = try await HTTPTestClient.onDispatchThread {
                let socket = try Socket(port: server.port)
                defer { socket.close() }
                try socket.write(Data(("GET /v1/tracks?q=" + String(repeating: "a", count: 200_000) + " HTTP/1.1\r\nHost: x\r\n\r\n").utf8))
                return try socket.readReply()
            }
            #expect(long.status == 431, "\(long.text)")
            #expect(long.errorCode == "headers_too_large", "\(long.text)")
            #expect(try await server.get("/healthz").status == 200)
            // A page file that does not exist is a 404, not a 405 for GET (found by tools/serve-fuzz.sh).
            let noFile = try await HTTPTestClient.send(port: server.port, "GET", "/assets/nothing.js")
            #expect(noFile.status == 404, "\(noFile.text)")
            #expect(["not_found", "page_not_installed"].contains(noFile.errorCode), "\(noFile.text)")
        }
    }

    @Test func tracksArePagedAndSearched() async throws {
        let catalog = try await ReferenceCatalog.shared.value()
        let allIDs = catalog.ids.values.sorted()
        try await TestServer.with(catalog: catalog.path) { server in
            var seen: [Int64] = []
            var offset: Int? = 0
            while let o = offset {
                let page = try await server.get("/v1/tracks?limit=4&offset=\(o)")
                #expect(page.status == 200, "\(page.text)")
                #expect(page.object["total"] as? Int == allIDs.count)
                let tracks = page.object["tracks"] as? [[String: Any]] ?? []
                #expect(!tracks.isEmpty && tracks.count <= 4)
                seen += tracks.compactMap { ($0["id"] as? Int).map(Int64.init) }
                offset = page.object["nextOffset"] as? Int
                #expect(offset == nil || offset == o + tracks.count)
                if seen.count > allIDs.count { break }
            }
            #expect(seen == allIDs)
            let past = try await server.get("/v1/tracks?offset=1000")
            #expect(past.status == 200)
            #expect((past.object["tracks"] as? [Any])?.isEmpty == true)
            #expect(past.object["nextOffset"] is NSNull)

            let pingus = catalog.ids.filter { $0.key.contains("pingus") }.values.sorted()
            let found = try await server.get("/v1/tracks?q=PINGUS&limit=100")
            #expect((found.object["tracks"] as? [[String: Any]])?.compactMap { ($0["id"] as? Int).map(Int64.init) } == pingus)
            let one = try await server.get("/v1/tracks?q=pingus-4")
            #expect((one.object["tracks"] as? [[String: Any]])?.map { $0["title"] as? String } == ["pingus-4"])
            let none = try await server.get("/v1/tracks?q=no%20such%20title")
            #expect(none.object["total"] as? Int == 0)

            let id = try #require(catalog.ids["pingus-4"])
            let track = try await server.get("/v1/tracks/\(id)")
            #expect(track.status == 200)
            #expect(track.object["id"] as? Int == Int(id))
            #expect(track.object["title"] as? String == "pingus-4")
            #expect(track.object["analysis"] is [String: Any])

            let stats = try await server.get("/v1/catalog")
            #expect(stats.status == 200)
            #expect(stats.object["trackCount"] as? Int == allIDs.count)
            #expect(stats.object["signatureVersion"] as? Int == Int(SignatureConfiguration.current.version))
        }
    }

    /// Over --max-concurrent, a match is refused at once with 503 and Retry-After: no queue.
    @Test func matchesOverTheCapGet503() async throws {
        let catalog = try await ReferenceCatalog.shared.value()
        try await TestServer.with(catalog: catalog.path, configure: { $0.maxConcurrentMatches = 1 }) { server in
            // A client that announces a body and sends only part of it holds the one place while it uploads.
            let holder = try await HTTPTestClient.onDispatchThread { () -> Socket in
                let s = try Socket(port: server.port)
                try s.write(Data("POST /v1/match HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nRIFF".utf8))
                return s
            }
            // Wait (on the server's state, not on a clock) until it is admitted.
            try await waitUntil { server.server.matchesInProgress == 1 }
            let refused = try await server.post("/v1/match", body: Data("RIFF".utf8))
            #expect(refused.status == 503)
            #expect(refused.errorCode == "busy")
            #expect(refused.headers["retry-after"] == "1")
            holder.close()
            try await waitUntil { server.server.matchesInProgress == 0 }
            let after = try await server.post("/v1/match", body: Data("not audio".utf8))
            #expect(after.status == 415)
        }
    }

    /// Every route the server registers is in docs/openapi.yaml, and every path there is served.
    @Test func routesAreTheOpenAPIPaths() async throws {
        let catalog = try await ReferenceCatalog.shared.value()
        let yaml = try String(contentsOf: TestPaths.repositoryRoot.appendingPathComponent("docs/openapi.yaml"), encoding: .utf8)
        let documented = OpenAPIPaths.operations(in: yaml)
        #expect(!documented.isEmpty)
        let id = try #require(catalog.ids.values.min())
        try await TestServer.with(catalog: catalog.path) { server in
            #expect(Set(server.server.routes) == documented)
            for operation in documented.sorted() {
                let parts = operation.split(separator: " ", maxSplits: 1).map(String.init)
                let target = parts[1].replacingOccurrences(of: "{id}", with: String(id)).replacingOccurrences(of: "{file}", with: "app.js")
                let reply = try await HTTPTestClient.send(port: server.port, parts[0], target, body: parts[0] == "POST" ? Data() : nil)
                #expect(reply.errorCode != "not_found", "\(operation) is documented but not served")
                #expect(reply.status < 500, "\(operation): \(reply.text)")
            }
        }
    }

    /// `earmark serve` itself: prints where it listens, answers, and exits 0 on SIGTERM.
    @Test func commandStopsOnSIGTERM() async throws {
        let catalog = try await ReferenceCatalog.shared.value()
        let process = try EarmarkCLI.start(["serve", "--catalog", catalog.path, "--port", "0", "--json"])
        var port: Int?
        for _ in 0..<15_000 where port == nil {   // up to five minutes for the first line
            let text = try process.standardOutputSoFar()
            if let object = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any] { port = object["port"] as? Int }
            if port == nil { try await Task.sleep(for: .milliseconds(20)) }
        }
        guard let port else {
            process.signal(SIGKILL)
            Issue.record("no listening line: \(try await process.finished())")
            return
        }
        let health = try await HTTPTestClient.send(port: port, "GET", "/healthz")
        #expect(health.status == 200)
        process.signal(SIGTERM)
        let output = try await process.finished(timeout: 300)
        #expect(output.status == 0, "\(output)")
    }

    @Test func clipFormatFromBytesNameAndType() {
        #expect(ClipFormat.fileExtension(head: Signature.fileMagic + [1, 0], name: "x.wav", contentType: nil) == "earsig")
        #expect(ClipFormat.fileExtension(head: Array("ID3".utf8), name: "upload", contentType: nil) == "mp3")
        #expect(ClipFormat.fileExtension(head: [0xFF, 0xFB, 0x94], name: "upload", contentType: nil) == "mp3")
        #expect(ClipFormat.fileExtension(head: [0xFF, 0xF1, 0x50], name: "upload", contentType: nil) == nil)   // AAC ADTS
        #expect(ClipFormat.fileExtension(head: Array("RIFF".utf8), name: "Clip.FLAC", contentType: nil) == "flac")
        #expect(ClipFormat.fileExtension(head: [], name: "upload", contentType: "audio/mpeg; charset=x") == "mp3")
        #expect(ClipFormat.fileExtension(head: [], name: "upload", contentType: "application/octet-stream") == nil)
    }
}

/// Polls `condition` every 10 ms; fails after ten minutes instead of hanging.
func waitUntil(_ condition: () -> Bool) async throws {
    for _ in 0..<60_000 {
        if condition() { return }
        try await Task.sleep(for: .milliseconds(10))
    }
    throw TestSupportError("condition not reached within ten minutes")
}

/// The operations of an OpenAPI file, read from its `paths:` block by indentation (no YAML library needed):
/// a path is a two-space-indented key starting with `/`, an operation a four-space-indented HTTP method under it.
enum OpenAPIPaths {
    static func operations(in yaml: String) -> Set<String> {
        let methods: Set<String> = ["get", "put", "post", "delete", "options", "head", "patch", "trace"]
        var inPaths = false
        var path: String?
        var out: Set<String> = []
        for raw in yaml.components(separatedBy: "\n") {
            let line = raw.replacingOccurrences(of: "\t", with: "    ")
            if line.trimmingCharacters(in: .whitespaces).isEmpty || line.trimmingCharacters(in: .whitespaces).hasPrefix("#") { continue }
            let indent = line.prefix { $0 == " " }.count
            let key = line.trimmingCharacters(in: .whitespaces).split(separator: ":", maxSplits: 1).first.map(String.init) ?? ""
            if indent == 0 {
                inPaths = key == "paths"
                path = nil
                continue
            }
            guard inPaths else { continue }
            if indent == 2 {
                let unquoted = key.trimmingCharacters(in: CharacterSet(charactersIn: "'\""))
                path = unquoted.hasPrefix("/") ? unquoted : nil
            } else if indent == 4, let path, methods.contains(key) {
                out.insert("\(key.uppercased()) \(path)")
            }
        }
        return out
    }
}
