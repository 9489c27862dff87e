import HTTPTypes
import HummingbirdCore
import HummingbirdWebSocket
import Logging
import NIOCore
import NIOHTTP1

extension ListenEndpoint {
    /// HTTP/1.1 with the WebSocket upgrade of `GET /v1/listen`; every other request is served as plain HTTP/1.1
    /// with `http1`'s handlers.
    func serverBuilder(http1: HTTP1Channel.Configuration) -> HTTPServerBuilder {
        let configuration = HTTP1WebSocketUpgradeChannel.Configuration(
            http1: http1, ws: WebSocketServerConfiguration(maxFrameSize: Self.maxMessageBytes))
        return HTTPServerBuilder { responder in
            let upgrade = HTTP1WebSocketUpgradeChannel(responder: responder, configuration: configuration) { _, _, logger in
                // ListenAdmission lets only admissible upgrades of /v1/listen through.
                .upgrade([:]) { inbound, outbound, _ in await self.serve(inbound, outbound, logger: logger) }
            }
            return ListenUpgradeChannel(base: upgrade, streams: self.streams, access: self.access)
        }
    }
}

/// Hummingbird's HTTP/1.1 + WebSocket channel with ``ListenAdmission`` in front of its upgrade handler.
///
/// A refused WebSocket upgrade would get an empty 400 from the upgrade handler. To answer 401 (no valid read
/// token) or 503 with `Retry-After`, with a JSON body, an upgrade that cannot be admitted is turned into a plain request
/// before the upgrade handler sees it, and the router's `/v1/listen` route answers it.
struct ListenUpgradeChannel: ServerChildChannel {
    typealias Value = HTTP1WebSocketUpgradeChannel.Value
    let base: HTTP1WebSocketUpgradeChannel
    let streams: ListenStreams
    let access: AccessControl

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        base.setup(channel: channel, logger: logger).flatMapThrowing { value in
            let decoder = try channel.pipeline.syncOperations.handler(type: ByteToMessageHandler<HTTPRequestDecoder>.self)
            try channel.pipeline.syncOperations.addHandler(ListenAdmission(streams: streams, access: access), position: .after(decoder))
            return value
        }
    }

    func handle(value: Value, logger: Logger) async {
        await base.handle(value: value, logger: logger)
    }
}

/// Looks at a connection's first request: a WebSocket upgrade of anything but `/v1/listen`, or of `/v1/listen`
/// without a valid read token (with `--read-token-file`) or when no stream can be admitted, loses its `Upgrade` header and goes on as a plain HTTP request. Then it
/// leaves the pipeline (the upgrade handler only upgrades a connection's first request).
///
/// It also answers a first request that cannot be parsed (a request line or headers over the decoder's limit, or
/// not HTTP): the upgrade handler behind it would wait for a head that never comes, and the connection would hang.
final class ListenAdmission: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart
    private var refused = false

    private let streams: ListenStreams
    private let access: AccessControl

    init(streams: ListenStreams, access: AccessControl) {
        self.streams = streams
        self.access = access
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard case .head(var head) = unwrapInboundIn(data) else {
            context.fireChannelRead(data)
            return
        }
        if head.headers.contains(name: "upgrade") {
            let uri = URI(head.uri)
            if uri.path != ListenEndpoint.path || !ListenEndpoint.allowed(access, authorization: head.headers.first(name: "authorization"), uri: uri)
                || !streams.admits {
                head.headers.remove(name: "upgrade")
                head.headers.replaceOrAdd(name: "connection", value: "close")
            }
        }
        context.fireChannelRead(wrapInboundOut(.head(head)))
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard let parserError = error as? HTTPParserError else {
            context.fireErrorCaught(error)
            return
        }
        guard !refused else { return }
        refused = true
        let tooLarge = parserError == .headerOverflow
        let status: HTTPResponseStatus = tooLarge ? .requestHeaderFieldsTooLarge : .badRequest
        let body = ByteBuffer(string: tooLarge
            ? #"{"error":{"code":"headers_too_large","message":"the request line and headers are longer than the server takes"}}"#
            : #"{"error":{"code":"bad_request","message":"not a valid HTTP/1.1 request"}}"#)
        let headers = HTTPHeaders([("content-type", "application/json; charset=utf-8"),
                                   ("content-length", String(body.readableBytes)), ("connection", "close")])
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))), promise: nil)
        context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil)
        // Close the sending side only, so that the client, still sending its request, reads the answer rather than a
        // reset; what it still sends is dropped, and the connection is closed when it closes, or after 5 s.
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in
            channel.close(mode: .output, promise: nil)
            channel.eventLoop.scheduleTask(in: .seconds(5)) { channel.close(promise: nil) }
        }
    }
}
