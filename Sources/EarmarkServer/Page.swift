import EarmarkKit
import Foundation
import Hummingbird

/// The page at `/`: plain HTML, JavaScript and CSS from the target's resource folder `Page`, read once when the
/// server opens and served as they are (no build step, nothing fetched from elsewhere).
struct Page: Sendable {
    static let routes: [(method: HTTPRequest.Method, path: String)] = [(.get, "/"), (.get, "/assets/{file}")]

    /// File name → (media type, bytes); empty when the resource folder was not found.
    let files: [String: (type: String, data: Data)]
    /// Where the files were read from (nil: not found).
    let folder: String?

    /// Reads the page's files from the first folder of ``candidateFolders()`` that has an index.html.
    static func load() -> Page {
        let fm = FileManager.default
        guard let folder = candidateFolders().first(where: { fm.fileExists(atPath: $0 + "/index.html") }) else {
            return Page(files: [:], folder: nil)
        }
        var files: [String: (type: String, data: Data)] = [:]
        for name in (try? fm.contentsOfDirectory(atPath: folder)) ?? [] {
            let ext = URL(fileURLWithPath: name).pathExtension.lowercased()
            guard let type = mediaTypes[ext], let data = fm.contents(atPath: folder + "/" + name) else { continue }
            files[name] = (type, data)
        }
        return Page(files: files, folder: folder)
    }

    /// `$EARMARK_PAGE_DIR` (to work on the page without rebuilding); otherwise the SwiftPM resource bundle
    /// beside the executable (Linux: `Earmark_EarmarkServer.resources/Page`, macOS: `….bundle`), or beside
    /// one of its parent folders (a test runner inside an .xctest bundle).
    static func candidateFolders() -> [String] {
        if let dir = ProcessInfo.processInfo.environment["EARMARK_PAGE_DIR"], !dir.isEmpty { return [dir] }
        return ResourceBundle.candidates(target: "EarmarkServer", item: "Page")
    }

    static let mediaTypes = [
        "html": "text/html; charset=utf-8", "js": "text/javascript; charset=utf-8", "css": "text/css; charset=utf-8",
        "svg": "image/svg+xml", "png": "image/png", "ico": "image/x-icon",
    ]

    func register<Context: RequestContext>(on router: Router<Context>) {
        router.get("/") { request, _ in
            _ = try QueryParameters(request.uri, allowed: [])
            return try self.response("index.html")
        }
        router.get("/assets/{file}") { request, context in
            _ = try QueryParameters(request.uri, allowed: [])
            return try self.response(context.parameters.get("file") ?? "")
        }
    }

    private func response(_ name: String) throws -> Response {
        guard let file = files[name] else {
            if folder == nil {
                throw APIError(.notFound, "page_not_installed",
                               "the page's files were not found beside the program (Earmark_EarmarkServer.resources); the API works without them")
            }
            throw APIError(.notFound, "not_found", "no such file")
        }
        return Response(status: .ok, headers: [.contentType: file.type, .cacheControl: "no-cache"],
                        body: .init(byteBuffer: ByteBuffer(bytes: file.data)))
    }
}
