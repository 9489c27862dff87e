import HTTPTypes
import NIOCore
import NIOHTTPTypes

/// Answers `Expect: 100-continue` with `100 Continue` as soon as a request's head arrives, so that a client that
/// waits for it before sending a body (curl does for bodies over 1 MB) sends it at once instead of after a pause.
/// Hummingbird does not answer it itself. A request whose Content-Length is already over the limit, or whose
/// token the route will refuse, gets no `100`: its 413, 401 or 403 comes first, and the client need not send
/// the body at all.
final class ExpectContinueHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundOut = HTTPResponsePart

    private let maxBodyBytes: Int
    private let access: AccessControl

    init(maxBodyBytes: Int, access: AccessControl) {
        self.maxBodyBytes = maxBodyBytes
        self.access = access
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .head(let head) = unwrapInboundIn(data), head.headerFields[.expect]?.lowercased() == "100-continue",
           (head.headerFields[.contentLength].flatMap { Int($0) } ?? 0) <= maxBodyBytes, permitted(head) {
            context.writeAndFlush(wrapOutboundOut(.head(HTTPResponse(status: .continue))), promise: nil)
        }
        context.fireChannelRead(data)
    }

    /// Whether the route of `head` (if it has one) would let its token through.
    private func permitted(_ head: HTTPRequest) -> Bool {
        let path = head.path.map { String($0.prefix { $0 != "?" }) } ?? ""
        guard let route = API.route(of: path) else { return true }
        return access.verdict(AccessControl.level(method: head.method, path: route), authorization: head.headerFields[.authorization]) == .allowed
    }
}
