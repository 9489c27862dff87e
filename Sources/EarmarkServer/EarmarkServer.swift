import EarmarkKit
import Foundation
import Hummingbird
import Logging
import ServiceLifecycle

/// `earmark serve`: an HTTP API over one catalog, opened once and kept warm.
///
/// ```swift
/// let server = try await EarmarkServer.open(ServerConfiguration(catalogPath: "demo.earcat"))
/// try await server.run { host, port in print("listening on http://\(host):\(port)") }
/// ```
///
/// Requests are served on Hummingbird's event loops; decoding, matching and catalog reads run on the server's
/// own thread pool (see ``ServerConfiguration/workers``). Every route and its answers are in docs/openapi.yaml.
public final class EarmarkServer: Sendable {
    public let configuration: ServerConfiguration
    /// Every route served, as `METHOD /path` with path parameters in braces (`GET /v1/tracks/{id}`).
    public let routes: [String]
    private let workers: CatalogWorkers
    private let writer: CatalogWriter?
    /// The private folder uploads and exports are written to while they are received or sent.
    let uploadFolder: String
    private let api: API
    private let listen: ListenEndpoint
    private let state = LockedValue(State())

    private struct State {
        var group: ServiceGroup?
        var stopRequested = false
    }

    private init(configuration: ServerConfiguration, workers: CatalogWorkers, writer: CatalogWriter?, uploadFolder: String) {
        self.configuration = configuration
        self.workers = workers
        self.writer = writer
        self.uploadFolder = uploadFolder
        let access = AccessControl(writeToken: configuration.writeToken, readToken: configuration.readToken)
        listen = ListenEndpoint(workers: workers, configuration: configuration, access: access)
        api = API(workers: workers,
                  upload: ClipUpload(folder: uploadFolder, limit: configuration.maxBodyBytes, stallTimeout: configuration.uploadTimeout),
                  matches: Gate(capacity: configuration.maxConcurrentMatches),
                  reads: Gate(capacity: configuration.maxConcurrentReads),
                  adds: Gate(capacity: configuration.maxConcurrentMatches),
                  access: access, streams: listen.streams,
                  writer: writer, metrics: ServerMetrics(), matchTimeout: configuration.matchTimeout,
                  speechModelPath: configuration.speechModelPath)
        routes = API.allRoutes.map { "\($0.method) \($0.path)" }
    }

    /// Opens the catalog (read-only, once per worker thread, with its index loaded; with a write token, also
    /// once for writing, to check that it can be written) and the upload folder.
    /// - Throws: ``CatalogError`` when the catalog cannot be opened; nothing listens yet.
    public static func open(_ configuration: ServerConfiguration) async throws -> EarmarkServer {
        let workers = try await CatalogWorkers.open(readPaths: configuration.readPaths, threads: configuration.workers,
                                                    lockTimeout: configuration.lockTimeout, soundModelPath: configuration.soundModelPath)
        var writer: CatalogWriter?
        do {
            writer = try configuration.writeToken.map { _ in
                try CatalogWriter.open(catalogPath: configuration.catalogPath, lockTimeout: configuration.lockTimeout,
                                       soundModelPath: configuration.soundModelPath, speechModelPath: configuration.speechModelPath)
            }
            let folder = try ClipUpload.makeFolder(in: configuration.temporaryDirectory)
            return EarmarkServer(configuration: configuration, workers: workers, writer: writer, uploadFolder: folder)
        } catch {
            await writer?.close()
            await workers.close()
            throw error
        }
    }

    /// Listens and serves until ``shutdown()`` or, with `handlingSignals`, SIGTERM or SIGINT. Then it stops
    /// accepting connections, lets running requests finish (up to ``ServerConfiguration/shutdownGracePeriod``),
    /// stops the worker threads, closes the catalog and removes the upload folder. A server runs once.
    /// - Parameter onListening: called with the host and the port bound (the real one when the port was 0).
    public func run(handlingSignals: Bool = true,
                    onListening: @escaping @Sendable (_ host: String, _ port: Int) async -> Void = { _, _ in }) async throws {
        var logger = Logger(label: "earmark.serve")
        logger.logLevel = .notice
        let router = Router()
        router.add(middleware: MetricsMiddleware(metrics: api.metrics))
        router.add(middleware: ErrorMiddleware())
        api.register(on: router)
        listen.register(on: router)
        Page.load().register(on: router)
        let host = configuration.host
        let maxBody = configuration.maxBodyBytes
        let access = api.access
        let app = Application(
            router: router,
            server: listen.serverBuilder(http1: .init(additionalChannelHandlers: [ExpectContinueHandler(maxBodyBytes: maxBody, access: access)])),
            configuration: .init(address: .hostname(host, port: configuration.port), serverName: "earmark"),
            onServerRunning: { channel in await onListening(host, channel.localAddress?.port ?? 0) },
            logger: logger)
        var groupConfiguration = ServiceGroupConfiguration(
            services: [.init(service: app), .init(service: ListenDrain(streams: listen.streams), successTerminationBehavior: .ignore),
                       .init(service: DrainSignal(api: api), successTerminationBehavior: .ignore)],
            gracefulShutdownSignals: handlingSignals ? [.sigterm, .sigint] : [],
            logger: logger)
        groupConfiguration.maximumGracefulShutdownDuration = configuration.shutdownGracePeriod
        groupConfiguration.maximumCancellationDuration = .seconds(5)
        let group = ServiceGroup(configuration: groupConfiguration)
        let stopAtOnce = state.withLock { s -> Bool in
            s.group = group
            return s.stopRequested
        }
        if stopAtOnce { await group.triggerGracefulShutdown() }
        defer { try? FileManager.default.removeItem(atPath: uploadFolder) }
        do {
            try await group.run()
        } catch {
            await writer?.close()
            await workers.close()
            throw error
        }
        await writer?.close()
        await workers.close()
    }

    /// Matches admitted now: receiving their clip, waiting for a worker or running (at most
    /// ``ServerConfiguration/maxConcurrentMatches``).
    public var matchesInProgress: Int { api.matches.count }

    /// `GET /v1/listen` streams running now (at most ``ServerConfiguration/maxConcurrentStreams``).
    public var streamsInProgress: Int { listen.streams.count }

    /// Begins a graceful shutdown of ``run(handlingSignals:onListening:)`` (as SIGTERM does).
    public func shutdown() async {
        api.draining.withLock { $0 = true }
        let group = state.withLock { s -> ServiceGroup? in
            s.stopRequested = true
            return s.group
        }
        await group?.triggerGracefulShutdown()
    }
}

/// Turns `/readyz` to 503 as soon as a graceful shutdown begins. It is listed after the server, so the service
/// group tells it first.
private struct DrainSignal: Service {
    let api: API
    func run() async throws {
        try? await gracefulShutdown()
        api.draining.withLock { $0 = true }
    }
}
