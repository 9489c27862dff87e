import EarmarkAudio
import Foundation

/// A ``SpeechAnalyzer`` on a thread of its own, for live input: ``append(_:)`` returns at once and the results
/// arrive in ``results``, an `AsyncSequence` that ends after ``finish()`` once the queued audio is transcribed.
///
/// Live input (`live`, a microphone): buffers that arrived while the analyzer was busy are taken together and
/// only the newest may start a volatile re-decode, so a slow machine re-decodes less often rather than falling
/// further behind; audio waits in a queue of at most ``maximumBacklog`` seconds, and when transcription falls
/// that far behind anyway, the oldest queued audio is replaced by silence of the same length (stream times stay
/// true, that audio is not transcribed). Otherwise (a file read as fast as it decodes) every buffer may start
/// a re-decode and ``append(_:)`` waits while the queue is full: nothing is skipped.
///
/// ```swift
/// let session = SpeechAnalysisSession(analyzer: try SpeechAnalyzer(recognizer: recognizer, detector: detector))
/// Task { for buffer in capture { session.append(buffer) }; session.finish() }
/// for try await result in session.results where result.isFinal { print(result.text) }
/// ```
public final class SpeechAnalysisSession: Sendable {
    /// Results in stream order; throws if the analyzer failed.
    public let results: AsyncThrowingStream<SpeechResult, any Error>
    /// Seconds of audio the queue holds at most before the oldest is skipped.
    public let maximumBacklog: Double
    /// Whether the input is live (see above).
    public let live: Bool
    private let state: SessionLock<Queue>
    private let wake = DispatchSemaphore(value: 0)
    /// Signalled whenever the worker empties the queue (a waiting ``append(_:)`` looks for room again).
    private let space = DispatchSemaphore(value: 0)

    private struct Queue {
        var items: [Item] = []
        var seconds = 0.0
        var finished = false
    }

    private enum Item {
        case audio(PCMBuffer)
        case silence(Double)
        var seconds: Double {
            switch self {
            case .audio(let b): return b.duration
            case .silence(let s): return s
            }
        }
    }

    /// Starts the analyzer's thread; the session owns the analyzer from now on.
    public init(analyzer: sending SpeechAnalyzer, live: Bool = true, maximumBacklog: Double = 60) {
        self.maximumBacklog = maximumBacklog
        self.live = live
        state = SessionLock(Queue())
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: SpeechResult.self, throwing: (any Error).self)
        results = stream
        let handoff = SessionHandoff(analyzer)
        let thread = Thread { [state, wake, space] in
            SpeechAnalysisSession.work(handoff.take(), live: live, state: state, wake: wake, space: space, continuation: continuation)
        }
        thread.name = "earmark-speech"
        thread.start()
    }

    /// Queues a buffer and returns at once (unless the input is not live and the queue is full: then it waits for
    /// room). Buffers with no samples, no channels or an invalid rate are ignored.
    public func append(_ buffer: PCMBuffer) {
        guard buffer.channels > 0, buffer.sampleRate.isFinite, buffer.sampleRate > 0, buffer.frameCount > 0 else { return }
        let limit = maximumBacklog
        while !live, state.withLock({ q in !q.finished && !q.items.isEmpty && q.seconds + buffer.duration > limit }) {
            wake.signal()
            space.wait()
        }
        state.withLock { q in
            guard !q.finished else { return }
            q.items.append(.audio(buffer))
            q.seconds += buffer.duration
            // Too far behind: the oldest audio becomes silence (nothing to transcribe, the times stay).
            var i = 0
            while q.seconds > limit, i < q.items.count - 1 {
                if case .audio(let old) = q.items[i] {
                    q.items[i] = .silence(old.duration)
                    q.seconds -= old.duration
                }
                i += 1
            }
        }
        wake.signal()
    }

    /// Ends the input: the queued audio is transcribed, the last stretch made final, then ``results`` ends.
    public func finish() {
        state.withLock { $0.finished = true }
        wake.signal()
    }

    private static func work(_ analyzer: SpeechAnalyzer, live: Bool, state: SessionLock<Queue>, wake: DispatchSemaphore,
                             space: DispatchSemaphore, continuation: AsyncThrowingStream<SpeechResult, any Error>.Continuation) {
        do {
            while true {
                wake.wait()
                let (items, finished) = state.withLock { q in
                    defer { q.items.removeAll(); q.seconds = 0 }
                    return (q.items, q.finished)
                }
                space.signal()
                for (i, item) in items.enumerated() {
                    // Behind real time, only the newest audio may start a volatile re-decode.
                    let newest = !live || i == items.count - 1
                    let found: [SpeechResult]
                    switch item {
                    case .audio(let b): found = try analyzer.append(b, volatile: newest)
                    case .silence(let s): found = try analyzer.appendSilence(seconds: s, volatile: newest)
                    }
                    for r in found { continuation.yield(r) }
                }
                if finished {
                    for r in try analyzer.finish() { continuation.yield(r) }
                    continuation.finish()
                    return
                }
            }
        } catch {
            continuation.finish(throwing: error)
        }
    }
}

extension SpeechAnalyzer {
    /// Transcribes a whole source (a file replay, a pipe …) on the calling thread and returns every result,
    /// volatile and final, in order.
    public func analyze(_ source: any AudioSource) throws -> [SpeechResult] {
        var out: [SpeechResult] = []
        while let buffer = try source.next() { out += try append(buffer) }
        return out + (try finish())
    }
}

/// A value behind a lock (the session's queue).
final class SessionLock<Value>: @unchecked Sendable {
    // Every access goes through `lock`, which makes the unchecked conformance sound.
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }
    func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}

/// Hands a value that is not `Sendable` to exactly one other thread.
final class SessionHandoff<Value>: @unchecked Sendable {
    // Sound because the creator never touches the value again and `take` is called once, by the receiver.
    private var value: Value?
    init(_ value: Value) { self.value = value }
    func take() -> Value {
        defer { value = nil }
        return value!
    }
}
