import EarmarkKit
@testable import EarmarkServer
import EarmarkTestSupport
import Foundation
import Testing

/// `POST /v1/catalog/import`: a catalog file merged into the served catalog as `earmark catalog merge FILE` merges
/// it, over real HTTP on loopback. Each test serves a catalog of its own (``WriteTests/Scene``: pingus-3 and sorcerer).
@Suite struct ImportTests {
    /// Catalog files to upload, made once: an export (as `earmark catalog export` writes it) of pingus-3 (the
    /// served catalog holds it too) and pingus-5, and an export of a catalog of triplet landmarks.
    struct Files: Sendable {
        let folder: TemporaryDirectory
        let export: String
        let triplets: String

        static let shared = Shared<Files> {
            let audio = try await ReferenceCatalog.shared.value().audio
            let folder = try TemporaryDirectory("serve-import-files")
            let pairs = folder.path("pairs.earcat"), triplets = folder.path("triplets.earcat")
            _ = try await Fixtures.index([try audio.reference("pingus-3"), try audio.reference("pingus-5")], into: pairs)
            _ = try Catalog(path: triplets, create: true, configuration: .experimentalTriplets)
            _ = try await Fixtures.index([try audio.reference("pingus-6")], into: triplets)
            let files = Files(folder: folder, export: folder.path("pairs-export.earcat"), triplets: folder.path("triplets-export.earcat"))
            for (from, to) in [(pairs, files.export), (triplets, files.triplets)] {
                let made = try await HTTPTestClient.onDispatchThread { try EarmarkCLI.run(["catalog", "export", "--catalog", from, to]) }
                guard made.status == 0 else { throw TestSupportError("catalog export failed: \(made)") }
            }
            return files
        }
    }

    static func importing(_ server: TestServer, _ body: Data?, target: String = "/v1/catalog/import",
                          headers: [(String, String)] = WriteTests.bearer) async throws -> HTTPReply {
        try await WriteTests.send(server, "POST", target, body: body, headers: headers)
    }

    static func uploadsGone(_ server: TestServer) async throws {
        try await waitUntil { (try? FileManager.default.contentsOfDirectory(atPath: server.server.uploadFolder).isEmpty) == true }
    }

    /// An exported catalog is merged in: its new track is added (and matched from the next request on), the one whose
    /// audio is served already is skipped, and the answer is what `catalog merge --json` prints for the same file.
    @Test func anExportIsMergedAndItsTracksMatch() async throws {
        let files = try await Files.shared.value()
        let scene = try await WriteTests.Scene("serve-import")
        // What the command line does with the same file, on a copy of the served catalog.
        let copy = scene.folder.path("copy.earcat")
        let cli = try await HTTPTestClient.onDispatchThread { () -> ProcessOutput in
            let made = try EarmarkCLI.run(["catalog", "export", "--catalog", scene.catalog, copy])
            guard made.status == 0 else { return made }
            return try EarmarkCLI.run(["catalog", "merge", "--json", "--catalog", copy, files.export])
        }
        #expect(cli.status == 0, "\(cli)")
        let expected = try #require(try JSONSerialization.jsonObject(with: cli.stdout) as? [String: Any])
        let body = try Data(contentsOf: URL(fileURLWithPath: files.export))

        try await TestServer.with(catalog: scene.catalog, configure: { $0.writeToken = WriteTests.writeToken }) { server in
            let reply = try await ImportTests.importing(server, body, headers: WriteTests.bearer + [("Content-Type", "application/vnd.sqlite3")])
            #expect(reply.status == 200, "\(reply.text)")
            #expect(reply.headers["content-type"]?.hasPrefix("application/json") == true)
            #expect(reply.object["added"] as? Int == 1)
            #expect(reply.object["duplicate"] as? Int == 1)
            let results = reply.object["results"] as? [[String: Any]] ?? []
            #expect(results.count == 2)
            func summary(_ r: [String: Any]) -> String {
                let t = r["track"] as? [String: Any] ?? [:]
                return "\(r["sourceId"] ?? "-") \(r["status"] ?? "-") #\(t["id"] ?? "-") \(t["title"] ?? "-") \(t["contentHash"] ?? "-")"
            }
            #expect(results.map(summary) == (expected["results"] as? [[String: Any]] ?? []).map(summary))
            let duplicate = try #require(results.first { $0["status"] as? String == "duplicate" })
            #expect((duplicate["track"] as? [String: Any])?["id"] as? Int == 1, "pingus-3 is track 1 here: \(duplicate)")
            let added = try #require(results.first { $0["status"] as? String == "added" })
            let id = try #require((added["track"] as? [String: Any])?["id"] as? Int)
            #expect((added["track"] as? [String: Any])?["title"] as? String == "pingus-5")
            try await ImportTests.uploadsGone(server)

            // Readers see the new track on the next request, as after POST /v1/tracks.
            #expect(try await server.get("/v1/catalog").object["trackCount"] as? Int == 3)
            #expect(try await server.get("/v1/tracks/\(id)").object["title"] as? String == "pingus-5")
            let match = try await server.post("/v1/match", body: try scene.clip("pingus-5", start: 20, seconds: 8))
            let first = (match.object["matches"] as? [[String: Any]])?.first
            #expect((first?["track"] as? [String: Any])?["id"] as? Int == id, "\(match.text)")
            #expect(abs((first?["matchOffset"] as? Double ?? -1) - 20) < 0.1, "\(match.text)")

            // The same file again (curl's default type): every track is a duplicate now, nothing changes.
            let again = try await ImportTests.importing(server, body,
                                                        headers: WriteTests.bearer + [("Content-Type", "application/x-www-form-urlencoded")])
            #expect(again.status == 200, "\(again.text)")
            #expect(again.object["added"] as? Int == 0)
            #expect(again.object["duplicate"] as? Int == 2)
            #expect(try await server.get("/v1/catalog").object["trackCount"] as? Int == 3)
            try await ImportTests.uploadsGone(server)

            let metrics = try await server.get("/metrics").text
            #expect(metrics.contains(#"earmark_http_requests_total{method="POST",route="/v1/catalog/import",status="200"} 2"#), "\(metrics)")
        }
        try await WriteTests.checkCatalog(scene.catalog)
    }

    /// The import is a write: without the write token 401, without --token-file 403; nothing is merged.
    @Test func importNeedsTheWriteToken() async throws {
        let files = try await Files.shared.value()
        let scene = try await WriteTests.Scene("serve-import-tokens")
        let body = try Data(contentsOf: URL(fileURLWithPath: files.export))
        try await TestServer.with(catalog: scene.catalog, configure: {
            $0.writeToken = WriteTests.writeToken
            $0.readToken = WriteTests.readToken
        }) { server in
            let attempts: [([(String, String)], String)] = [
                ([], "unauthorized"),
                ([("Authorization", "Bearer w-0123456789abcdeX")], "invalid_token"),
                ([("Authorization", "Bearer \(WriteTests.readToken)")], "invalid_token"),
            ]
            for (headers, code) in attempts {
                let reply = try await ImportTests.importing(server, body, headers: headers)
                #expect(reply.status == 401, "\(headers): \(reply.text)")
                #expect(reply.errorCode == code, "\(headers): \(reply.text)")
                #expect(reply.headers["www-authenticate"]?.hasPrefix("Bearer") == true)
            }
            // `Expect: 100-continue` without the token: the 401 comes at once, not a `100` asking for the body.
            let early = try await HTTPTestClient.onDispatchThread { () -> HTTPReply in
                let s = try Socket(port: server.port)
                defer { s.close() }
                try s.write(Data("POST /v1/catalog/import HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 9\r\n\r\n".utf8))
                return try s.readReply()
            }
            #expect(early.status == 401, "\(early.text)")
            #expect(try await WriteTests.send(server, "GET", "/v1/catalog", headers: WriteTests.bearer).object["trackCount"] as? Int == 2)
            try await ImportTests.uploadsGone(server)
        }
        try await TestServer.with(catalog: scene.catalog) { server in
            let reply = try await ImportTests.importing(server, body, headers: [("Authorization", "Bearer anything")])
            #expect(reply.status == 403, "\(reply.text)")
            #expect(reply.errorCode == "writes_disabled")
            #expect(try await server.get("/v1/catalog").object["trackCount"] as? Int == 2)
        }
    }

    /// Every body that is not a whole catalog of this catalog's algorithm is a 4xx with a JSON error; the served
    /// catalog is untouched, the upload deleted, and the catalog still passes `catalog check`.
    @Test func badImportsAreClientErrors() async throws {
        let files = try await Files.shared.value()
        let scene = try await WriteTests.Scene("serve-import-bad")
        let export = try Data(contentsOf: URL(fileURLWithPath: files.export))
        // Pages overwritten in the middle: the header says catalog, the integrity check does not.
        var scribbled = export
        let middle = scribbled.count / 2
        scribbled.replaceSubrange(middle..<middle + 8192, with: Data(repeating: 0xA5, count: 8192))
        // An SQLite file that is not a catalog.
        let other = scene.folder.path("other.sqlite")
        try Run.sqlite(other, "CREATE TABLE t(x); INSERT INTO t VALUES (1);")
        let noise = Data((0..<70_000).map { (i: UInt64) in UInt8(truncatingIfNeeded: (i &* 0x9E37_79B9_7F4A_7C15) >> 37) })
        try await TestServer.with(catalog: scene.catalog, configure: {
            $0.writeToken = WriteTests.writeToken
            $0.maxBodyBytes = 3 * 1_048_576
        }) { server in
            let before = try await server.get("/v1/tracks").object["tracks"] as? [[String: Any]] ?? []
            let cases: [(String, String, Data, [(String, String)], Int, String)] = [
                ("a WAV", "/v1/catalog/import", try scene.clip("pingus-5"), [], 415, "not_a_catalog"),
                ("random bytes", "/v1/catalog/import", noise, [], 415, "not_a_catalog"),
                ("text", "/v1/catalog/import", Data("SQLite format 3, or so it says\n".utf8), [], 415, "not_a_catalog"),
                ("another SQLite file", "/v1/catalog/import", try Data(contentsOf: URL(fileURLWithPath: other)), [], 415, "not_a_catalog"),
                ("an empty body", "/v1/catalog/import", Data(), [], 400, "empty_body"),
                ("a truncated catalog", "/v1/catalog/import", export.prefix(export.count / 2), [], 422, "damaged_catalog"),
                ("a catalog cut after its header", "/v1/catalog/import", export.prefix(4096), [], 422, "damaged_catalog"),
                ("a scribbled catalog", "/v1/catalog/import", scribbled, [], 422, "damaged_catalog"),
                ("triplet landmarks", "/v1/catalog/import", try Data(contentsOf: URL(fileURLWithPath: files.triplets)), [], 422,
                 "catalog_version_mismatch"),
                ("a JSON type", "/v1/catalog/import", export, [("Content-Type", "application/json")], 415, "unsupported_media_type"),
                ("a parameter", "/v1/catalog/import?merge=false", export, [], 400, "unknown_parameter"),
                ("too large", "/v1/catalog/import", Data(repeating: 0x53, count: 4 * 1_048_576), [], 413, "body_too_large"),
            ]
            for (what, target, body, headers, status, code) in cases {
                let reply = try await ImportTests.importing(server, body, target: target, headers: WriteTests.bearer + headers)
                #expect(reply.status == status, "\(what): \(reply.text)")
                #expect(reply.errorCode == code, "\(what): \(reply.text)")
                let message = (reply.object["error"] as? [String: Any])?["message"] as? String ?? ""
                #expect(!message.isEmpty, "\(what)")
                #expect(!message.contains(TestPaths.scratchRoot.path), "\(what) leaks the upload's path: \(message)")
                #expect(try await server.get("/v1/catalog").object["trackCount"] as? Int == 2, "\(what)")
            }
            let after = try await server.get("/v1/tracks").object["tracks"] as? [[String: Any]] ?? []
            #expect(after as NSArray == before as NSArray)
            try await ImportTests.uploadsGone(server)
            // The server still imports a good file afterwards.
            let good = try await ImportTests.importing(server, export)
            #expect(good.status == 200, "\(good.text)")
            #expect(good.object["added"] as? Int == 1)
        }
        try await WriteTests.checkCatalog(scene.catalog)
    }
}
