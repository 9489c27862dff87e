import EarmarkKit
import Foundation
import NIOCore
import NIOWebSocket
import ServiceLifecycle

/// The live `GET /v1/listen` streams: admission (at most `capacity` at once, no queue) and, at shutdown, the
/// one place that tells each to end.
final class ListenStreams: Sendable {
    let capacity: Int
    private let state = LockedValue(State())

    private struct State {
        var open: [Int: ListenControl] = [:]
        var nextID = 0
        var draining = false
        var idle: [CheckedContinuation<Void, Never>] = []
    }

    init(capacity: Int) { self.capacity = max(1, capacity) }

    /// Streams running now.
    var count: Int { state.withLock { $0.open.count } }

    /// Whether a new stream would be admitted now (checked before the upgrade; ``enter(_:)`` decides).
    var admits: Bool { state.withLock { !$0.draining && $0.open.count < capacity } }

    var draining: Bool { state.withLock { $0.draining } }

    /// Admits a stream (its id, for ``leave(_:)``), or gives the error to send when all places are taken or the
    /// server is shutting down.
    func enter(_ control: ListenControl) -> Result<Int, ListenError> {
        state.withLock { s in
            if s.draining {
                return .failure(ListenError(code: "shutting_down", message: "the server is shutting down", close: .goingAway))
            }
            guard s.open.count < capacity else {
                return .failure(ListenError(code: "busy", message: "\(capacity) streams are running (--max-streams); try again shortly",
                                            close: ListenError.tryAgainLater))
            }
            s.nextID += 1
            s.open[s.nextID] = control
            return .success(s.nextID)
        }
    }

    func leave(_ id: Int) {
        let waiters = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            s.open[id] = nil
            guard s.open.isEmpty else { return [] }
            defer { s.idle = [] }
            return s.idle
        }
        waiters.forEach { $0.resume() }
    }

    /// Refuses new streams, tells every running one to end (each sends its `end` event and closes with 1001)
    /// and waits until all have.
    func endAll() async {
        let running = state.withLock { s -> [ListenControl] in
            s.draining = true
            return Array(s.open.values)
        }
        running.forEach { $0.interrupt() }
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let done = state.withLock { s -> Bool in
                if s.open.isEmpty { return true }
                s.idle.append(c)
                return false
            }
            if done { c.resume() }
        }
    }
}

/// Ends every stream when a graceful shutdown begins. It is listed after the server (and before DrainSignal, which
/// turns `/readyz` to 503 first), so the service group tells it, and waits for it, before the server stops (which
/// would close the sockets without an `end`).
struct ListenDrain: Service {
    let streams: ListenStreams
    func run() async throws {
        try? await gracefulShutdown()
        await streams.endAll()
    }
}

/// One stream's input and how it ends: why (the `end` event's reason) and with which close code.
final class ListenControl: Sendable {
    /// The socket's audio bytes, on their way to the thread that decodes them.
    let bytes = ByteQueue(limit: 4 << 20)
    private let outcome = LockedValue<(reason: String, close: WebSocketErrorCode)?>(nil)

    /// Server shutdown: stop reading audio, finish, send `end` (reason `interrupted`), close with 1001.
    func interrupt() { stop(reason: "interrupted", close: .goingAway) }

    /// Ends the input; the first call decides the reason and the close code.
    func stop(reason: String, close: WebSocketErrorCode, discard: Bool = false) {
        outcome.withLock { if $0 == nil { $0 = (reason, close) } }
        bytes.close(discard: discard)
    }

    var reason: String { outcome.withLock { $0?.reason } ?? "input ended" }
    var closeCode: WebSocketErrorCode { outcome.withLock { $0?.close } ?? .normalClosure }
}

/// Bytes from a socket to the thread that decodes them. The socket side appends and waits while `limit` bytes
/// or more are queued (so a client sending faster than the bytes are decoded is held back by TCP); the
/// thread takes, blocking until there are bytes or the queue is closed.
final class ByteQueue: @unchecked Sendable {
    // Every stored property below `limit` is read and written only with `condition` locked.
    private let condition = NSCondition()
    private var buffer: [UInt8] = []
    private var head = 0
    private var closed = false
    private var waiting: [CheckedContinuation<Void, Never>] = []
    let limit: Int

    init(limit: Int) { self.limit = limit }

    /// Queues `bytes`; false when the queue is closed (the bytes are dropped).
    func append(_ bytes: ByteBuffer) async -> Bool {
        let (accepted, full) = push(bytes)
        if full { await withCheckedContinuation { waitForRoom($0) } }
        return accepted
    }

    private func push(_ bytes: ByteBuffer) -> (accepted: Bool, full: Bool) {
        condition.lock()
        defer { condition.unlock() }
        guard !closed else { return (false, false) }
        bytes.withUnsafeReadableBytes { buffer.append(contentsOf: $0) }
        condition.signal()
        return (true, buffer.count - head >= limit)
    }

    private func waitForRoom(_ c: CheckedContinuation<Void, Never>) {
        condition.lock()
        if closed || buffer.count - head < limit {
            condition.unlock()
            c.resume()
        } else {
            waiting.append(c)
            condition.unlock()
        }
    }

    /// Up to `count` bytes, waiting until there is at least one; empty once the queue is closed and empty.
    func read(upTo count: Int) -> [UInt8] {
        condition.lock()
        while buffer.count == head && !closed { condition.wait() }
        let n = min(count, buffer.count - head)
        let out = Array(buffer[head..<head + n])
        head += n
        if head > 65_536 && head * 2 > buffer.count {
            buffer.removeFirst(head)
            head = 0
        }
        var resumed: [CheckedContinuation<Void, Never>] = []
        if buffer.count - head < limit { swap(&resumed, &waiting) }
        condition.unlock()
        resumed.forEach { $0.resume() }
        return out
    }

    /// No more bytes: the reader gets what is queued (nothing, with `discard`), then the end.
    func close(discard: Bool = false) {
        condition.lock()
        closed = true
        if discard {
            buffer = []
            head = 0
        }
        condition.broadcast()
        var resumed: [CheckedContinuation<Void, Never>] = []
        swap(&resumed, &waiting)
        condition.unlock()
        resumed.forEach { $0.resume() }
    }
}
