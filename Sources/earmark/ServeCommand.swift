import ArgumentParser
import EarmarkKit
import EarmarkServer
import Foundation

struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Serve the catalog over HTTP: match clips, browse, add, change and remove tracks (JSON API under /v1).",
        discussion: """
        Opens the catalog read-only once (one warm connection per core) and answers HTTP requests \
        until SIGTERM or SIGINT (Ctrl-C), then stops accepting connections, lets running requests \
        finish (up to 30 s) and exits 0. Tracks that `earmark catalog add` adds meanwhile are matched \
        as soon as they are committed. Decoding and matching run on a pool of threads sized to the cores. \
        Writes through the API run one at a time, through the same code as `catalog add`, `update` and \
        `remove`, and are seen by the next request.

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
          POST /v1/tracks        body: an audio file; ?title=&artist=&album=,
                                 metadata={json}, name=, analyze=true; as
                                 `catalog add`; 201 with the track
          PATCH /v1/tracks/{id}  JSON {title, artist, album, metadata}; as
                                 `catalog update` (a metadata key set to null
                                 is deleted)
          DELETE /v1/tracks/{id} as `catalog remove`; 204
          GET  /v1/catalog/export  the file `catalog export` writes
          POST /v1/catalog/import  body: a catalog file (as `catalog export`
                                 writes it); merged in as `catalog merge`
                                 merges it; the object `merge --json` prints
          GET  /metrics          Prometheus text format
          GET  /v1/listen        WebSocket: PCM in (first a JSON start message),
                                 the events `listen --json` prints out
          GET  /                 a page: identify a file, listen from the
                                 microphone, search the catalog

        Writes (POST, PATCH, DELETE) need `Authorization: Bearer TOKEN` with the token in --token-file; \
        without --token-file the server refuses them (403) and says so at start. With \
        --read-token-file every other endpoint but /healthz and /readyz needs that token (or the \
        write token). A missing or wrong token gets 401. Tokens are compared in constant time.

        Errors are JSON, {"error": {"code": "...", "message": "..."}}: 4xx for bad input (400 empty \
        body or bad parameter, 401 no or wrong token, 403 writes disabled, 404 unknown id, 408 upload \
        stalled for --upload-timeout, 409 same audio as a stored track, 413 body over --max-body-mb, \
        415 not audio or not a catalog, 422 unreadable, too short or silent clip, damaged catalog \
        or one of another signature algorithm); 503 with Retry-After when the catalog's server \
        cannot be reached, when \
        --max-concurrent matches are already running or waiting, or --max-streams WebSocket streams \
        are open; 504 when a match or an addition takes \
        longer than --match-timeout.

        With --replica (a PostgreSQL catalog's hot standbys), reads go to the replicas in turn and \
        writes to --catalog, the primary; a replica that lags is consistent (a track appears whole \
        or not at all), so a track just added through the API may take a moment to be matched. A \
        request whose catalog connection is lost (its server stopped or restarted) gets 503 \
        catalog_unavailable with Retry-After; the next request on that worker connects again, to \
        the next replica.

        On start it prints `listening on http://HOST:PORT` on standard error (with --json, one JSON \
        object {url, host, port, catalog, replicas, workers, maxConcurrent, maxBodyBytes, writes} on \
        standard output; locations without passwords). It listens on loopback unless --host says otherwise; use a token file (and HTTPS in a \
        reverse proxy) before exposing it beyond machines you trust.

        Exit codes: 0 stopped by a signal; 2 the catalog cannot be opened (for writing, with \
        --token-file), a token file cannot be read or is empty, or the port cannot be bound.
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

    @Option(help: ArgumentHelp("Sound model for classify=true and analyze=true (default: see `earmark classify --help`).", valueName: "path"))
    var model: String?

    @Option(name: .customLong("speech-model"), help: ArgumentHelp(
        "Speech model for POST /v1/transcribe, transcribe streams and analyze=true (default: see `earmark transcribe --help`).",
        valueName: "path"))
    var speechModelPath: String?

    @Option(name: .customLong("token-file"), help: ArgumentHelp(
        "File holding the bearer token that writes need (surrounding white space ignored); without it, writes get 403.",
        valueName: "file"))
    var tokenFile: String?

    @Option(name: .customLong("read-token-file"), help: ArgumentHelp(
        "File holding a bearer token that reads need too (the write token also serves); without it, reads are open.",
        valueName: "file"))
    var readTokenFile: String?

    @Option(name: .customLong("upload-timeout"), help: ArgumentHelp(
        "Seconds an upload may pause between two pieces of its body before it gets 408.", valueName: "seconds"))
    var uploadTimeout: Double = 30

    @Option(name: .customLong("replica"), help: ArgumentHelp(
        "A catalog to read from instead of --catalog: a hot standby of the PostgreSQL primary that --catalog names (repeat for several). Matches, browsing and listen streams go to the replicas in turn; writes go to --catalog.",
        valueName: "url"))
    var replicas: [String] = []

    @Option(name: .customLong("match-timeout"), help: ArgumentHelp(
        "Seconds a match or an addition may take once its upload is received before it gets 504.", valueName: "seconds"))
    var matchTimeout: Double = 60

    func validate() throws {
        guard (0...65_535).contains(port) else { throw ValidationError("--port must be from 0 to 65535.") }
        guard (1...1_048_576).contains(maxBodyMB) else { throw ValidationError("--max-body-mb must be from 1 to 1048576.") }
        if let maxConcurrent, maxConcurrent < 1 { throw ValidationError("--max-concurrent must be at least 1.") }
        guard maxStreams >= 1 else { throw ValidationError("--max-streams must be at least 1.") }
        guard !host.isEmpty else { throw ValidationError("--host must not be empty.") }
        guard uploadTimeout > 0, uploadTimeout <= 86_400 else { throw ValidationError("--upload-timeout must be from 0 to 86400 seconds.") }
        guard matchTimeout > 0, matchTimeout <= 86_400 else { throw ValidationError("--match-timeout must be from 0 to 86400 seconds.") }
    }

    /// The token in `path`, white space around it removed.
    static func token(from path: String, option: String) throws -> String {
        let text: String
        do {
            text = try String(contentsOfFile: (path as NSString).expandingTildeInPath, encoding: .utf8)
        } catch {
            throw CLIError("\(option) \(path): cannot be read (\(error.localizedDescription))")
        }
        let token = text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !token.isEmpty else { throw CLIError("\(option) \(path): the file is empty; put the token in it") }
        guard token.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }) else {
            throw CLIError("\(option) \(path): a token is one line of visible ASCII characters, without spaces")
        }
        return token
    }

    mutating func run() async throws {
        var configuration = ServerConfiguration(catalogPath: options.catalogPath)
        configuration.host = host
        configuration.port = port
        configuration.maxBodyBytes = maxBodyMB * 1_048_576
        if let maxConcurrent { configuration.maxConcurrentMatches = maxConcurrent }
        configuration.maxConcurrentStreams = maxStreams
        configuration.replicaPaths = replicas
        configuration.lockTimeout = options.lockTimeout
        configuration.soundModelPath = model
        configuration.speechModelPath = speechModelPath
        configuration.uploadTimeout = .milliseconds(Int64((uploadTimeout * 1000).rounded()))
        configuration.matchTimeout = .milliseconds(Int64((matchTimeout * 1000).rounded()))
        let json = options.json
        let (tokenFile, readTokenFile) = (tokenFile, readTokenFile)
        try await reportingErrors {
            configuration.writeToken = try tokenFile.map { try ServeCommand.token(from: $0, option: "--token-file") }
            configuration.readToken = try readTokenFile.map { try ServeCommand.token(from: $0, option: "--read-token-file") }
            if configuration.writeToken == nil {
                writeStderr("earmark serve: writes are disabled (no --token-file): POST /v1/tracks, PATCH and DELETE /v1/tracks/{id} and POST /v1/catalog/import answer 403\n")
            }
            let server = try await EarmarkServer.open(configuration)
            try await server.run { host, port in
                let c = server.configuration
                let url = "http://\(host.contains(":") ? "[\(host)]" : host):\(port)"
                if json {
                    try? printJSON(Listening(url: url, host: host, port: port, catalog: CatalogStores.shown(c.catalogPath),
                                             replicas: c.replicaPaths.map(CatalogStores.shown), workers: c.workers,
                                             maxConcurrent: c.maxConcurrentMatches, maxBodyBytes: c.maxBodyBytes,
                                             writes: c.writeToken != nil))
                    fflush(nil)
                } else {
                    let reads = c.replicaPaths.isEmpty ? "" : ", read from \(c.replicaPaths.map(CatalogStores.shown).joined(separator: ", "))"
                    writeStderr("earmark serve: listening on \(url) (catalog \(CatalogStores.shown(c.catalogPath))\(reads); \(c.workers) workers, "
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
        /// The catalog's location (a server's URL without its password).
        var catalog: String
        /// The replicas reads go to (--replica), likewise shown.
        var replicas: [String]
        var workers: Int
        var maxConcurrent: Int
        var maxBodyBytes: Int
        /// Whether writes are served (a write token was given).
        var writes: Bool
    }
}
