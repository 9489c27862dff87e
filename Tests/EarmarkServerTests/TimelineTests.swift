import EarmarkKit
import EarmarkTestSupport
import Foundation
import Testing

/// `GET /v1/tracks/{id}/timeline.svg` over real HTTP: the picture, its highlight, and bad parameters.
@Suite struct TimelineTests {
    @Test func theTimelineOfATrackWithItsMatchedStretch() async throws {
        let catalog = try await ReferenceCatalog.shared.value()
        let id = try #require(catalog.ids["pingus-4"])
        try await TestServer.with(catalog: catalog.path) { server in
            // The reference catalog is stored without --analyze: a picture with no lanes that says so.
            let plain = try await server.get("/v1/tracks/\(id)/timeline.svg")
            #expect(plain.status == 200, "\(plain.text)")
            #expect(plain.headers["content-type"] == "image/svg+xml; charset=utf-8")
            let doc = try SVGDocument(plain.body)
            #expect(doc.root?.name == "svg")
            #expect(doc.lanes.isEmpty)
            #expect(doc.all("text", ["class": "title"]).first?.text == "pingus-4")
            #expect(doc.all("text", ["class": "empty"]).first?.text == AnalysisTimeline.noStoredAnalysis)
            #expect(doc.all("rect", ["id": "highlight"]).isEmpty)

            let marked = try await server.get("/v1/tracks/\(id)/timeline.svg?from=40&to=50.5&width=1200")
            #expect(marked.status == 200, "\(marked.text)")
            let highlighted = try SVGDocument(marked.body)
            #expect(highlighted.root?.attributes["width"] == "1200")
            let rect = try #require(highlighted.all("rect", ["id": "highlight"]).first)
            #expect(rect.attributes["data-start"] == "40" && rect.attributes["data-end"] == "50.5")
            let root = try #require(highlighted.root)
            let (plotX, plotWidth, duration) = (root.number("data-plot-x") ?? 0, root.number("data-plot-width") ?? 0, root.number("data-duration") ?? 1)
            #expect(abs((rect.number("x") ?? 0) - (plotX + 40 / duration * plotWidth)) < 0.01)
            // `from` alone runs to the end.
            let tail = try SVGDocument(try await server.get("/v1/tracks/\(id)/timeline.svg?from=60").body)
            #expect(abs((tail.all("rect", ["id": "highlight"]).first?.number("data-end") ?? 0) - duration) < 0.01)
        }
    }

    @Test func badTimelineRequestsAreClientErrors() async throws {
        let catalog = try await ReferenceCatalog.shared.value()
        let id = try #require(catalog.ids.values.min())
        try await TestServer.with(catalog: catalog.path) { server in
            for (target, status, code) in [
                ("/v1/tracks/\(id)/timeline.svg?from=50&to=40", 400, "invalid_parameter"),
                ("/v1/tracks/\(id)/timeline.svg?from=abc", 400, "invalid_parameter"),
                ("/v1/tracks/\(id)/timeline.svg?to=-1", 400, "invalid_parameter"),
                ("/v1/tracks/\(id)/timeline.svg?from=nan", 400, "invalid_parameter"),
                ("/v1/tracks/\(id)/timeline.svg?width=10", 400, "invalid_parameter"),
                ("/v1/tracks/\(id)/timeline.svg?zoom=2", 400, "unknown_parameter"),
                ("/v1/tracks/0/timeline.svg", 400, "invalid_parameter"),
                ("/v1/tracks/999999/timeline.svg", 404, "no_such_track"),
            ] {
                let reply = try await server.get(target)
                #expect(reply.status == status, "\(target): \(reply.status) \(reply.text)")
                #expect(reply.errorCode == code, "\(target): \(reply.text)")
            }
            let post = try await server.post("/v1/tracks/\(id)/timeline.svg", body: Data())
            #expect(post.status == 405)
        }
    }
}
