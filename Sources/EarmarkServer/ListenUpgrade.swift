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
final class ListenAdmission: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart

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
}
