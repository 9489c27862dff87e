import Foundation

/// Index buckets fetched from PostgreSQL, kept for the process's later lookups (every store of the process shares it).
///
/// A bucket of a segment never changes: merges and compaction write new segments under new ids and delete the old
/// ones, so a cached bucket is right for as long as a lookup's segment list names its segment, and the list itself
/// is read again whenever the catalog's change counter moves. What the cache spares is the server's work, a
/// primary-key probe per bucket, which is most of a query's time on a server (docs/postgres.md).
///
/// Bounded by `EARMARK_PG_CACHE_MB` (default 512; 0 turns it off), evicting by the clock algorithm: a bucket read
/// since the hand last passed it stays for one more turn.
final class BucketCache: @unchecked Sendable {
    struct Key: Hashable {
        var catalog: Int32
        var segment: Int64
        var bucket: Int32
    }

    /// The process's cache.
    static let shared = BucketCache(limitBytes: {
        let mb = ProcessInfo.processInfo.environment["EARMARK_PG_CACHE_MB"].flatMap { Int($0) } ?? 512
        return max(0, mb) << 20
    }())

    let limitBytes: Int
    private let lock = NSLock()
    private var slotOf: [Key: Int] = [:]
    private var keys: [Key] = []
    private var data: [[UInt8]] = []
    private var referenced: [Bool] = []
    private var freeSlots: [Int] = []
    private var hand = 0
    private var bytes = 0
    private var catalogs: [String: Int32] = [:]

    init(limitBytes: Int) { self.limitBytes = limitBytes }

    var enabled: Bool { limitBytes > 0 }

    /// A small number that stands for the catalog `identity` in keys.
    func catalogNumber(_ identity: String) -> Int32 {
        lock.withLock {
            if let n = catalogs[identity] { return n }
            let n = Int32(catalogs.count)
            catalogs[identity] = n
            return n
        }
    }

    /// Appends each cached bucket of `wanted` to `out` (its bytes to `out.bytes`, its range to `out.ranges`) and
    /// returns the indices of `wanted` that are not cached.
    func read(_ wanted: [Key], into out: inout PostgresCatalog.FetchedBuckets) -> [Int] {
        var missing: [Int] = []
        lock.withLock {
            for (i, k) in wanted.enumerated() {
                guard let slot = slotOf[k] else { missing.append(i); continue }
                referenced[slot] = true
                guard !data[slot].isEmpty else { continue }   // known to hold nothing
                let start = out.bytes.count
                out.bytes += data[slot]
                out.ranges[PostgresCatalog.FetchedBuckets.key(k.segment, Int(k.bucket))] = start..<out.bytes.count
            }
        }
        return missing
    }

    /// Keeps each bucket under its key (an empty one: known to hold no postings), evicting others while the cache
    /// holds more than its limit.
    func store(_ entries: [(Key, [UInt8])]) {
        guard enabled else { return }
        lock.withLock {
            for (key, bucket) in entries where slotOf[key] == nil && bucket.count < limitBytes / 64 {
                let slot: Int
                if let free = freeSlots.popLast() {
                    slot = free
                    keys[slot] = key
                    data[slot] = bucket
                    referenced[slot] = false
                } else {
                    slot = keys.count
                    keys.append(key)
                    data.append(bucket)
                    referenced.append(false)
                }
                slotOf[key] = slot
                bytes += bucket.count + Self.overhead
            }
            while bytes > limitBytes, !slotOf.isEmpty {
                if hand >= keys.count { hand = 0 }
                defer { hand += 1 }
                guard slotOf[keys[hand]] == hand else { continue }   // a free slot
                if referenced[hand] {
                    referenced[hand] = false
                    continue
                }
                slotOf[keys[hand]] = nil
                bytes -= data[hand].count + Self.overhead
                data[hand] = []
                freeSlots.append(hand)
            }
        }
    }

    /// Bytes a cached bucket costs beside its own: its array's header and the tables' entries.
    static let overhead = 96
}
