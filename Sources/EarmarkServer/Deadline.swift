import EarmarkKit
import NIOCore
import NIOPosix

/// A time limit on work that cannot be interrupted (decoding, matching and catalog writes block a thread):
/// past the limit the caller gets 504 `timeout` at once and the work finishes in the background.
enum Deadline {
    static func run<T: Sendable>(limit: Duration, _ what: String,
                                 _ work: @escaping @Sendable () async throws -> T) async throws -> T {
        let waiting = LockedValue<CheckedContinuation<T, any Error>?>(nil)
        return try await withCheckedThrowingContinuation { continuation in
            waiting.withLock { $0 = continuation }
            // A timer on an event loop (the server's, NIO's shared group), cancelled when the work ends. Not a
            // sleeping task: a cancelled `Task.sleep` keeps its timer, and the memory of its task, until the time
            // it was to wake, and at 100 matches/s with a 60-s limit that held about 6,000 of them (the heap grew
            // by about 1 KB per match until the first ones expired).
            let timer = MultiThreadedEventLoopGroup.singleton.any().scheduleTask(in: TimeAmount(limit)) {
                waiting.withLock { w in defer { w = nil }; return w }?.resume(throwing: APIError(
                    .gatewayTimeout, "timeout", "\(what) took longer than \(limit) (--match-timeout); it was given up"))
            }
            Task {
                let result: Result<T, any Error>
                do { result = .success(try await work()) } catch { result = .failure(error) }
                timer.cancel()
                waiting.withLock { w in defer { w = nil }; return w }?.resume(with: result)
            }
        }
    }
}
