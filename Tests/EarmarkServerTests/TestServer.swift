import EarmarkKit
import EarmarkServer
import EarmarkTestSupport
import Foundation

/// The real server, listening on a free loopback port, serving the shared reference catalog in this process.
struct TestServer: Sendable {
    let server: EarmarkServer
    let port: Int
    let running: Task<Void, any Error>

    /// Starts a server, runs `body` with it and stops it, whether `body` succeeds or throws.
    static func with<T: Sendable>(catalog: String, configure: @Sendable (inout ServerConfiguration) -> Void = { _ in },
                                  _ body: (TestServer) async throws -> T) async throws -> T {
        let server = try await start(catalog: catalog, configure: configure)
        do {
            let result = try await body(server)
            try await server.stop()
            return result
        } catch {
            try? await server.stop()
            throw error
        }
    }

    static func start(catalog: String, configure: (inout ServerConfiguration) -> Void) async throws -> TestServer {
        var configuration = ServerConfiguration(catalogPath: catalog)
        configuration.port = 0
        configuration.workers = 2
        configuration.maxBodyBytes = 4 * 1_048_576
        configuration.temporaryDirectory = TestPaths.scratchRoot.path
        configure(&configuration)
        let server = try await EarmarkServer.open(configuration)
        let (ports, continuation) = AsyncStream<Int>.makeStream()
        let running = Task {
            defer { continuation.finish() }
            try await server.run(handlingSignals: false) { _, port in continuation.yield(port) }
        }
        var port: Int?
        for await p in ports {
            port = p
            break
        }
        guard let port, port > 0 else {
            try await running.value   // rethrows why it did not listen
            throw TestSupportError("the server stopped without listening")
        }
        return TestServer(server: server, port: port, running: running)
    }

    /// Shuts the server down gracefully and waits until it has stopped.
    func stop() async throws {
        await server.shutdown()
        try await running.value
    }

    func get(_ target: String) async throws -> HTTPReply {
        try await HTTPTestClient.send(port: port, "GET", target)
    }

    func post(_ target: String, body: Data?, chunked: Bool = false, headers: [(String, String)] = []) async throws -> HTTPReply {
        try await HTTPTestClient.send(port: port, "POST", target, body: body, chunked: chunked, extraHeaders: headers)
    }
}
