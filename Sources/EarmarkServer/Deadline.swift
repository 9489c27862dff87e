import EarmarkKit

/// A time limit on work that cannot be interrupted (decoding, matching and catalog writes block a thread):
/// past the limit the caller gets 504 `timeout` at once and the work finishes in the background.
enum Deadline {
    static func run<T: Sendable>(limit: Duration, _ what: String,
                                 _ work: @escaping @Sendable () async throws -> T) async throws -> T {
        let waiting = LockedValue<CheckedContinuation<T, any Error>?>(nil)
        let timer = LockedValue<Task<Void, Never>?>(nil)
        return try await withCheckedThrowingContinuation { continuation in
            waiting.withLock { $0 = continuation }
            timer.withLock {
                $0 = Task {
                    try? await Task.sleep(for: limit)
                    guard !Task.isCancelled, let c = waiting.withLock({ w in defer { w = nil }; return w }) else { return }
                    c.resume(throwing: APIError(.gatewayTimeout, "timeout",
                                                "\(what) took longer than \(limit) (--match-timeout); it was given up"))
                }
            }
            Task {
                let result: Result<T, any Error>
                do { result = .success(try await work()) } catch { result = .failure(error) }
                timer.withLock { $0?.cancel() }
                waiting.withLock { w in defer { w = nil }; return w }?.resume(with: result)
            }
        }
    }
}
