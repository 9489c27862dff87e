import EarmarkAudio
import EarmarkCatalog
import EarmarkMatching
import Foundation

/// Matches a live stream against a catalog, in the spirit of ShazamKit's `SHSession` with
/// `matchStreamingBuffer`: append buffers as they arrive and read ``events``.
///
/// Appending never blocks on matching. Audio waits in a queue of at most
/// ``StreamingOptions/maximumBacklog`` seconds that a worker thread converts to 44.1 kHz mono and
/// feeds to a ``StreamMatcher``; if matching falls behind, the oldest queued audio is dropped and a
/// ``SessionEvent/dropped(at:seconds:)`` event says so. Memory stays bounded however long the stream.
///
/// ```swift
/// let session = StreamingSession(catalog: try Catalog(path: path, readOnly: true))
/// Task { for buffer in capture { session.append(buffer) }; session.finish() }
/// for await event in session.events { print(event) }
/// ```
public final class StreamingSession: Sendable {
    /// Events in stream order; the sequence ends after ``finish()`` once the queued audio is processed.
    public let events: AsyncStream<SessionEvent>
    public let options: StreamingOptions
    private let queue: LockedValue<Queue>
    private let wake = DispatchSemaphore(value: 0)
    private let go = DispatchSemaphore(value: 0)
    /// Signalled whenever the worker empties the queue (a waiting ``append(_:)`` rechecks for room).
    private let space = DispatchSemaphore(value: 0)
    private let started = LockedValue(false)
    /// Why the input ended early, reported as the last event.
    private let failure = LockedValue<String?>(nil)
    private let clock: (any SessionClock)?

    private struct Queue {
        var buffers: [(buffer: PCMBuffer, arrival: Double?)] = []
        var queuedSeconds = 0.0
        /// Stream seconds of input appended so far (stamps untimed buffers, so dropping leaves a true gap).
        var inputEnd = 0.0
        var dropped = 0.0
        var finished = false
    }

    /// Starts the worker on a catalog opened for reading, which the session owns from now on.
    /// - Parameter clock: moves the predicted offset between events; nil follows the audio's own time
    ///   (for input replayed faster than real time).
    public convenience init(catalog: sending any CatalogStore, options: StreamingOptions = .default,
                            clock: (any SessionClock)? = MonotonicClock(), start: Bool = true) {
        self.init(matcher: Matcher(catalog: catalog, options: options.match), options: options, clock: clock, start: start)
    }

    /// Starts a session on a matcher that it owns from now on (it runs on the session's thread).
    /// - Parameter start: false holds processing back until ``start()`` (audio queues up meanwhile).
    public init(matcher: sending Matcher, options: StreamingOptions = .default,
                clock: (any SessionClock)? = MonotonicClock(), start: Bool = true) {
        self.options = options
        self.clock = clock
        queue = LockedValue(Queue())
        let (stream, continuation) = AsyncStream.makeStream(of: SessionEvent.self, bufferingPolicy: .bufferingNewest(4096))
        events = stream
        let core = Transfer(StreamMatcher(matcher: matcher, options: options, clock: clock))
        let thread = Thread { [queue, wake, go, failure, space] in
            go.wait()
            StreamingSession.work(core.take(), queue: queue, wake: wake, space: space, failure: failure,
                                  continuation: continuation)
        }
        thread.name = "earmark-stream"
        thread.start()
        if start { self.start() }
    }

    /// Starts processing, if the session was made with `start: false`; later calls do nothing.
    public func start() {
        let first = started.withLock { s in defer { s = true }; return !s }
        if first { go.signal() }
    }

    /// Queues a buffer and returns at once (unless ``StreamingOptions/dropsWhenBehind`` is false and the
    /// backlog is full: then it waits for room). Buffers with no samples, no channels or an invalid rate are ignored.
    public func append(_ buffer: PCMBuffer) {
        guard buffer.channels > 0, buffer.sampleRate.isFinite, buffer.sampleRate > 0, buffer.frameCount > 0 else { return }
        let arrival = clock?.now()
        let maximum = options.maximumBacklog
        let waits = !options.dropsWhenBehind
        while true {
            let queued = queue.withLock { q -> Bool in
                guard !q.finished else { return true }
                if waits, !q.buffers.isEmpty, q.queuedSeconds + buffer.duration > maximum { return false }
                var b = buffer
                if b.time == nil { b.time = q.inputEnd }
                q.inputEnd = max(q.inputEnd, b.time! + b.duration)
                q.buffers.append((b, arrival))
                q.queuedSeconds += b.duration
                while q.queuedSeconds > maximum, q.buffers.count > 1 {
                    let old = q.buffers.removeFirst()
                    q.queuedSeconds -= old.buffer.duration
                    q.dropped += old.buffer.duration
                }
                return true
            }
            if queued { break }
            wake.signal()
            space.wait()
        }
        wake.signal()
    }

    /// Ends the input. The worker processes what is queued, makes a last attempt and ends ``events``.
    public func finish() {
        queue.withLock { $0.finished = true }
        wake.signal()
    }

    /// Reads `source` on a thread of its own and appends every buffer, until the source ends, `maximumDuration`
    /// seconds of audio have been read or `shouldStop` returns true (checked between buffers); then
    /// finishes the session. A failing source ends the session with an ``SessionEvent/error(at:message:)``.
    public func feed(from source: sending any AudioSource, maximumDuration: Double? = nil,
                     shouldStop: @escaping @Sendable () -> Bool = { false }) {
        let handoff = Transfer(source)
        let thread = Thread { [self] in
            let source = handoff.take()
            var seconds = 0.0
            do {
                // A millisecond of slack: cutting the last buffer to whole frames can fall just short.
                let limit = maximumDuration ?? .infinity
                while !shouldStop(), seconds < limit - 0.001, var buffer = try source.next() {
                    if seconds + buffer.duration > limit {
                        let frames = Int(((limit - seconds) * buffer.sampleRate).rounded())
                        buffer.samples.removeLast(buffer.samples.count - frames * buffer.channels)
                    }
                    seconds += buffer.duration
                    append(buffer)
                }
            } catch {
                failure.withLock { $0 = "\(error)" }
            }
            finish()
        }
        thread.name = "earmark-input"
        thread.start()
    }

    private static func work(_ core: StreamMatcher, queue: LockedValue<Queue>, wake: DispatchSemaphore,
                             space: DispatchSemaphore, failure: LockedValue<String?>, continuation: AsyncStream<SessionEvent>.Continuation) {
        var converter: (rate: Double, resampler: Resampler)?
        var expected: Double?   // input stream time where the next buffer should start
        var pendingGap: Double?
        func emit(_ events: [SessionEvent]) { for e in events { continuation.yield(e) } }
        while true {
            wake.wait()
            let (batch, dropped, finished) = queue.withLock { q in
                defer { q.buffers.removeAll(); q.queuedSeconds = 0; q.dropped = 0 }
                return (q.buffers, q.dropped, q.finished)
            }
            space.signal()
            if dropped > 0 { emit([.dropped(at: core.streamDuration, seconds: dropped)]) }
            for (buffer, arrival) in batch {
                let time = buffer.time ?? expected ?? 0
                let gap = abs(time - (expected ?? 0)) > 0.005
                if gap || converter?.rate != buffer.sampleRate {
                    // A gap (or a jump back) or a new rate: the resampler's tail belongs before it.
                    if let c = converter { emit(core.append(c.resampler.flush(), clockTime: arrival)) }
                    converter = nil
                    if gap { pendingGap = time }
                    do {
                        converter = (buffer.sampleRate, try Resampler(inputRate: buffer.sampleRate))
                    } catch {
                        emit([.error(at: core.streamDuration, message: "\(error)")])
                        continue
                    }
                }
                expected = time + buffer.duration
                let converted = converter!.resampler.process(buffer.mono)
                emit(core.append(converted, at: pendingGap, clockTime: arrival))
                pendingGap = nil
            }
            if finished {
                if let c = converter { emit(core.append(c.resampler.flush())) }
                var last = core.finish()
                if let message = failure.withLock({ $0 }) {
                    last.insert(.error(at: core.streamDuration, message: message), at: max(0, last.count - 1))
                }
                emit(last)
                continuation.finish()
                return
            }
        }
    }
}

/// Hands a value that is not `Sendable` to exactly one other thread.
final class Transfer<Value>: @unchecked Sendable {
    // Sound because the creator never touches the value again and `take` is called once, by the receiver.
    private var value: Value?
    init(_ value: Value) { self.value = value }
    func take() -> Value {
        defer { value = nil }
        return value!
    }
}
