import EarmarkKit
import Foundation
import Hummingbird

extension API {
    /// `GET /v1/tracks/{id}/timeline.svg?from&to&width`: the track's stored analysis drawn as `earmark catalog info
    /// ID --svg` draws it, with the stretch `from`–`to` (seconds; either alone runs to the track's end or from its
    /// start) highlighted.
    func timeline(_ request: Request, context: some RequestContext) async throws -> Response {
        let query = try QueryParameters(request.uri, allowed: ["from", "to", "width"])
        let id = try API.trackID(context)
        let from = try query.double("from", in: 0...1e7)
        let to = try query.double("to", in: 0...1e7)
        let width = try query.int("width", default: 1000, in: 480...4000)
        if let from, let to, to < from { throw APIError.invalidParameter("to", "\(to) is before from (\(from))") }
        let svg = try await reading { catalog -> String? in
            guard let track = try catalog.track(id: id) else { return nil }
            var timeline = AnalysisTimeline(track: track, analyses: try catalog.analyses(trackID: id))
            if from != nil || to != nil { timeline.highlight = TimeRange(start: from ?? 0, end: to ?? track.duration) }
            return timeline.svg(width: Double(width), emptyMessage: AnalysisTimeline.noStoredAnalysis)
        }
        guard let svg else { throw APIError(.notFound, "no_such_track", "no track with id \(id)") }
        return Response(status: .ok, headers: [.contentType: "image/svg+xml; charset=utf-8", .cacheControl: "no-cache"],
                        body: .init(byteBuffer: ByteBuffer(string: svg)))
    }
}
