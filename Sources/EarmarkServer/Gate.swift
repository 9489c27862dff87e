import EarmarkKit

/// Admission control: at most `capacity` holders at once, and no queue. A caller that finds it full is
/// refused at once (the server answers 503 with `Retry-After`) instead of waiting without bound.
final class Gate: Sendable {
    let capacity: Int
    private let holders = LockedValue(0)

    init(capacity: Int) { self.capacity = max(1, capacity) }

    /// Takes a place, or returns false when all `capacity` are taken.
    func tryEnter() -> Bool {
        holders.withLock { n in
            guard n < capacity else { return false }
            n += 1
            return true
        }
    }

    /// Gives a place back.
    func leave() { holders.withLock { $0 -= 1 } }

    /// Places taken now.
    var count: Int { holders.withLock { $0 } }
}
