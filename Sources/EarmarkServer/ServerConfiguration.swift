import Foundation

/// How `earmark serve` runs: the catalog it serves, where it listens and its limits.
public struct ServerConfiguration: Sendable {
    /// The catalog file, opened read-only (never created).
    public var catalogPath: String
    /// Catalogs to read from instead of ``catalogPath``: hot standbys of a PostgreSQL primary (`postgres://…`), or
    /// any copies kept in step with it. Matches, browsing and listen streams use them in turn, one connection per
    /// worker; writes still go to ``catalogPath``. Empty (the default): everything reads ``catalogPath``.
    public var replicaPaths: [String] = []
    /// Where reads go: ``replicaPaths``, or ``catalogPath`` when there are none.
    public var readPaths: [String] { replicaPaths.isEmpty ? [catalogPath] : replicaPaths }
    /// Address to listen on. Default: loopback only.
    public var host = "127.0.0.1"
    /// TCP port; 0 takes a free one (``EarmarkServer/run(handlingSignals:onListening:)`` reports which).
    public var port = 8080
    /// Largest request body accepted, in bytes; a larger one is refused with 413. Default 200 MiB.
    public var maxBodyBytes = 200 * 1_048_576
    /// Threads that decode and match, each with its own read-only catalog connection. Default: the cores.
    public var workers: Int
    /// Matches accepted at once (receiving, waiting for a worker or running); one more is refused with 503
    /// and `Retry-After`. Default: twice ``workers``.
    public var maxConcurrentMatches: Int
    /// `GET /v1/listen` WebSocket streams at once (each has a catalog connection and two threads of its own);
    /// one more is refused with 503 and `Retry-After`. Default 64.
    public var maxConcurrentStreams = 64
    /// Catalog reads (tracks, stats) accepted at once; one more is refused with 503. Default 64.
    public var maxConcurrentReads = 64
    /// Seconds to wait while another process holds the catalog's write lock.
    public var lockTimeout: Double = 30
    /// The sound model for `classify=true`; nil: the default one (see `earmark classify --help`).
    public var soundModelPath: String?
    /// The speech model for `POST /v1/transcribe` and `transcribe` streams; nil: the default one (see `earmark transcribe --help`).
    public var speechModelPath: String?
    /// Folder in which a private folder for uploaded clips is made. Default: the system's temporary folder.
    public var temporaryDirectory = FileManager.default.temporaryDirectory.path
    /// The bearer token that writes (`POST`, `PATCH`, `DELETE /v1/tracks`, `POST /v1/catalog/import`) need in
    /// `Authorization: Bearer …`;
    /// nil: every write is refused with 403 `writes_disabled`. With a token, the catalog must be writable.
    public var writeToken: String?
    /// The bearer token that reads (every endpoint but `/healthz` and `/readyz`) need as well; nil: reads are open.
    /// The write token is accepted for reads too.
    public var readToken: String?
    /// Longest pause between two pieces of an upload's body; a longer one is answered with 408 and the
    /// partial upload is deleted. Default 30 s.
    public var uploadTimeout: Duration = .seconds(30)
    /// Longest time a match or a track's addition may take once its upload is received; longer is answered with
    /// 504 `timeout` (the work itself cannot be interrupted and finishes in the background). Default 60 s.
    public var matchTimeout: Duration = .seconds(60)
    /// Longest wait, after a shutdown signal, for the requests that are running before they are cancelled.
    public var shutdownGracePeriod: Duration = .seconds(30)

    /// A configuration with the defaults above for the catalog at `catalogPath`.
    public init(catalogPath: String) {
        self.catalogPath = catalogPath
        workers = max(1, ProcessInfo.processInfo.activeProcessorCount)
        maxConcurrentMatches = 2 * workers
    }
}
