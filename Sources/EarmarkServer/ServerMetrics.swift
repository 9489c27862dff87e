import Foundation
import Hummingbird
import Prometheus

/// The figures `GET /metrics` reports, in Prometheus text format (docs/serve.md lists them).
final class ServerMetrics: Sendable {
    let registry = PrometheusCollectorRegistry()
    /// Matches admitted now (receiving, waiting or running); set when scraped.
    let matchesInProgress: Gauge
    /// Tracks in the catalog; set when scraped.
    let catalogTracks: Gauge
    /// `GET /v1/listen` streams running now; set when scraped.
    let listenStreams: Gauge

    /// Latency buckets, in seconds: 5 ms to 60 s.
    static let buckets: [Duration] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60].map {
        .milliseconds(Int64(($0 * 1000).rounded()))
    }

    private static var requests: MetricNameDescriptor {
        MetricNameDescriptor(namespace: "earmark", subsystem: "http", metricName: "requests", unitName: "total",
                             helpText: "HTTP requests answered, by method, route and status.")
    }
    private static var latency: MetricNameDescriptor {
        MetricNameDescriptor(
        namespace: "earmark", subsystem: "http", metricName: "request_duration", unitName: "seconds",
        helpText: "Time from a request's head to its answer (before a streamed body is sent), by method and route.")
    }

    init() {
        matchesInProgress = registry.makeGauge(descriptor: MetricNameDescriptor(
            namespace: "earmark", metricName: "matches", unitName: "in_progress",
            helpText: "Matches admitted now: receiving their clip, waiting for a worker or running."))
        catalogTracks = registry.makeGauge(descriptor: MetricNameDescriptor(
            namespace: "earmark", subsystem: "catalog", metricName: "tracks", unitName: "", helpText: "Tracks in the catalog."))
        listenStreams = registry.makeGauge(descriptor: MetricNameDescriptor(
            namespace: "earmark", subsystem: "listen", metricName: "streams", unitName: "",
            helpText: "GET /v1/listen WebSocket streams running now."))
    }

    /// Counts one answered request under its route (`/v1/tracks/{id}`; `other` for paths not served).
    func record(method: HTTPRequest.Method, route: String, status: Int, duration: Duration) {
        registry.makeCounter(descriptor: ServerMetrics.requests,
                             labels: [("method", method.rawValue), ("route", route), ("status", String(status))]).increment()
        registry.makeDurationHistogram(descriptor: ServerMetrics.latency, labels: [("method", method.rawValue), ("route", route)],
                                       buckets: ServerMetrics.buckets).record(duration)
    }

    /// The text of `GET /metrics`.
    func text() -> String { registry.emitToString() }
}

/// Records every request's route, status and latency in ``ServerMetrics``; outside ``ErrorMiddleware``, so it sees
/// the status of error answers too.
struct MetricsMiddleware<Context: RequestContext>: RouterMiddleware {
    let metrics: ServerMetrics

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let start = ContinuousClock.now
        let route = API.route(of: request.uri.path) ?? "other"
        do {
            let response = try await next(request, context)
            metrics.record(method: request.method, route: route, status: response.status.code, duration: ContinuousClock.now - start)
            return response
        } catch {
            metrics.record(method: request.method, route: route, status: APIError.from(error).status.code, duration: ContinuousClock.now - start)
            throw error
        }
    }
}
