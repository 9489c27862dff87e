import EarmarkKit
@testable import EarmarkServer
import EarmarkTestSupport
import Foundation
import Testing

/// `serve --replica`: a PostgreSQL primary and a hot standby (throwaway servers), the API over real HTTP.
@Suite(.enabled(if: PostgresServer.testsEnabled)) struct ReplicaTests {
    static func firstTitle(_ reply: HTTPReply) -> String? {
        ((reply.object["matches"] as? [[String: Any]])?.first?["track"] as? [String: Any])?["title"] as? String
    }

    @Test("reads go to the standby, writes to the primary and reach the standby; the primary lost, reads go on and writes get 503; the standby promoted, writes reach it through the same --catalog URL; the standby lost, 503 catalog_unavailable")
    func primaryAndStandby() async throws {
        let scene = try await WriteTests.Scene("serve-replica")
        let primary = try PostgresServer()
        defer { primary.stop() }
        let copy = try await HTTPTestClient.onDispatchThread { try EarmarkCLI.run(["catalog", "copy", scene.catalog, primary.url]) }
        #expect(copy.status == 0, "\(copy)")
        let standby = try PostgresServer(standbyOf: primary)
        defer { standby.stop() }
        try standby.waitForReplay(of: primary)
        let configure: @Sendable (inout ServerConfiguration) -> Void = {
            $0.writeToken = WriteTests.writeToken
            $0.replicaPaths = [standby.url]
        }
        // --catalog names both servers (libpq's multi-host URL): writes go to whichever is not a standby.
        let both = "postgres://postgres@127.0.0.1:\(primary.port),127.0.0.1:\(standby.port)/\(primary.database)?sslmode=disable"
        try await TestServer.with(catalog: both, configure: configure) { server in
            #expect(server.server.configuration.readPaths == [standby.url])
            let known = try await server.post("/v1/match", body: try scene.clip("sorcerer", start: 20, seconds: 8))
            #expect(known.status == 200 && ReplicaTests.firstTitle(known) == "sorcerer", "\(known.text)")

            // An addition goes to the primary; once the standby has replayed it, it is matched there.
            let added = try await WriteTests.send(server, "POST", "/v1/tracks?title=Replicated", body: try scene.clip("pingus-5", start: 10, seconds: 12),
                                                  headers: WriteTests.bearer + [("Content-Type", "audio/wav")])
            #expect(added.status == 201, "\(added.text)")
            let id = try #require(added.object["id"] as? Int)
            #expect(try primary.sql("SELECT title FROM tracks WHERE id = \(id)") == "Replicated")
            try standby.waitForReplay(of: primary)
            let new = try await server.post("/v1/match", body: try scene.clip("pingus-5", start: 14, seconds: 6))
            #expect(ReplicaTests.firstTitle(new) == "Replicated", "\(new.text)")

            // The primary gone: matching goes on from the standby; a write cannot be made (503, try again later).
            primary.halt()
            for _ in 0..<3 {
                let again = try await server.post("/v1/match", body: try scene.clip("sorcerer", start: 20, seconds: 8))
                #expect(again.status == 200 && ReplicaTests.firstTitle(again) == "sorcerer", "\(again.text)")
            }
            let patch = WriteTests.json(["title": "Renamed"])
            let write = try await WriteTests.send(server, "PATCH", "/v1/tracks/\(id)", body: patch,
                                                  headers: WriteTests.bearer + [("Content-Type", "application/json")])
            #expect(write.status == 503 && write.errorCode == "catalog_unavailable" && write.headers["retry-after"] != nil, "\(write.status) \(write.text)")

            // The standby promoted: the next write finds it through the same URL, and reads see the write.
            try standby.promote()
            let renamed = try await WriteTests.send(server, "PATCH", "/v1/tracks/\(id)", body: patch,
                                                    headers: WriteTests.bearer + [("Content-Type", "application/json")])
            #expect(renamed.status == 200, "\(renamed.status) \(renamed.text)")
            #expect(try standby.sql("SELECT title FROM tracks WHERE id = \(id)") == "Renamed")
            let match = try await server.post("/v1/match", body: try scene.clip("pingus-5", start: 14, seconds: 6))
            #expect(ReplicaTests.firstTitle(match) == "Renamed", "\(match.text)")

            // The standby gone too: every read is 503 catalog_unavailable (each worker's lost connection, then a
            // new one that cannot be made), and the process stays up.
            standby.halt()
            for _ in 0..<4 {
                let lost = try await server.post("/v1/match", body: try scene.clip("sorcerer", start: 20, seconds: 8))
                #expect(lost.status == 503 && lost.errorCode == "catalog_unavailable", "\(lost.status) \(lost.text)")
                #expect(lost.text.contains("127.0.0.1:\(standby.port)"), "\(lost.text)")
            }
            #expect(try await server.get("/healthz").status == 200)
        }
    }
}
