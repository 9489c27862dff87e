import ArgumentParser
import EarmarkKit
import EarmarkServer
import Foundation

struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Serve the catalog over HTTP: match clips, browse tracks (JSON API under /v1).",
        discussion: """
        Opens the catalog read-only once (one warm connection per core) and answers HTTP requests \
        until SIGTERM or SIGINT (Ctrl-C), then stops accepting connections, lets running requests \
        finish (up to 30 s) and exits 0. Tracks that `earmark catalog add` adds meanwhile are matched \
        as soon as they are committed. Decoding and matching run on a pool of threads sized to the cores.

        Endpoints (docs/openapi.yaml describes each; docs/serve.md has examples):
          GET  /healthz          the process answers
          GET  /readyz           catalog open, not shutting down
          POST /v1/match         body: one clip (audio in any format `match`
                                 reads, or a .earsig); ?maxMatches=N,
                                 classify=true, name=clip.mp3; answer: the
                                 object `earmark match --json` prints
          GET  /v1/tracks        ?limit=50&offset=0&q=text (title, artist,
                                 album)
          GET  /v1/tracks/{id}   what `catalog info ID --json` prints
          GET  /v1/catalog       what `catalog stats --json` prints
          GET  /v1/listen        WebSocket: PCM in (first a JSON start message),
                                 the events `listen --json` prints out
          GET  /                 a page: identify a file, listen from the
                                 microphone, search the catalog

        Errors are JSON, {"error": {"code": "...", "message": "..."}}: 4xx for bad input (400 empty \
        body or bad parameter, 404 unknown id, 413 body over --max-body-mb, 415 not audio, 422 \
        unreadable, too short or silent clip); 503 with Retry-After when --max-concurrent matches \
        are already running or waiting, or --max-streams WebSocket streams are open.

        On start it prints `listening on http://HOST:PORT` on standard error (with --json, one JSON \
        object {url, host, port, catalog, workers, maxConcurrent, maxBodyBytes} on standard output). \
        It listens on loopback unless --host says otherwise; there is no authentication yet, so do not \
        expose it beyond machines you trust.

        Exit codes: 0 stopped by a signal; 2 the catalog cannot be opened or the port cannot be bound.
        """
    )

    @OptionGroup var options: GlobalOptions

    @Option(help: ArgumentHelp("Address to listen on (0.0.0.0: every interface).", valueName: "address"))
    var host = "127.0.0.1"

    @Option(help: ArgumentHelp("TCP port (0: any free port, printed at start).", valueName: "port"))
    var port = 8080

    @Option(name: .customLong("max-body-mb"), help: ArgumentHelp(
        "Largest request body, in MiB; a larger one gets 413.", valueName: "mb"))
    var maxBodyMB = 200

    @Option(name: .customLong("max-concurrent"), help: ArgumentHelp(
        "Matches accepted at once (receiving, waiting or running); more get 503 with Retry-After (default: twice the cores).",
        valueName: "n"))
    var maxConcurrent: Int?

    @Option(name: .customLong("max-streams"), help: ArgumentHelp(
        "GET /v1/listen WebSocket streams at once; more get 503 with Retry-After.", valueName: "n"))
    var maxStreams = 64

    @Option(help: ArgumentHelp("Sound model for classify=true (default: see `earmark classify --help`).", valueName: "path"))
    var model: String?

    func validate() throws {
        guard (0...65_535).contains(port) else { throw ValidationError("--port must be from 0 to 65535.") }
        guard (1...1_048_576).contains(maxBodyMB) else { throw ValidationError("--max-body-mb must be from 1 to 1048576.") }
        if let maxConcurrent, maxConcurrent < 1 { throw ValidationError("--max-concurrent must be at least 1.") }
        guard maxStreams >= 1 else { throw ValidationError("--max-streams must be at least 1.") }
        guard !host.isEmpty else { throw ValidationError("--host must not be empty.") }
    }

    mutating func run() async throws {
        var configuration = ServerConfiguration(catalogPath: options.catalogPath)
        configuration.host = host
        configuration.port = port
        configuration.maxBodyBytes = maxBodyMB * 1_048_576
        if let maxConcurrent { configuration.maxConcurrentMatches = maxConcurrent }
        configuration.maxConcurrentStreams = maxStreams
        configuration.lockTimeout = options.lockTimeout
        configuration.soundModelPath = model
        let json = options.json
        try await reportingErrors {
            let server = try await EarmarkServer.open(configuration)
            try await server.run { host, port in
                let c = server.configuration
                let url = "http://\(host.contains(":") ? "[\(host)]" : host):\(port)"
                if json {
                    try? printJSON(Listening(url: url, host: host, port: port, catalog: c.catalogPath, workers: c.workers,
                                             maxConcurrent: c.maxConcurrentMatches, maxBodyBytes: c.maxBodyBytes))
                    fflush(nil)
                } else {
                    writeStderr("earmark serve: listening on \(url) (catalog \(c.catalogPath); \(c.workers) workers, "
                                + "\(c.maxConcurrentMatches) matches at once); Ctrl-C or SIGTERM stops\n")
                }
            }
        }
    }

    /// The line `serve --json` prints once it listens.
    struct Listening: Encodable {
        var url: String
        var host: String
        var port: Int
        var catalog: String
        var workers: Int
        var maxConcurrent: Int
        var maxBodyBytes: Int
    }
}
