extension Array where Element == UInt64 {
    /// Sorts ascending, with the result of `sort()`, by an LSD radix sort over only the bits that vary among the
    /// elements: a search sorts thousands of packed (key, index) words per lookup, and the comparison sort was
    /// a tenth of a search that matches nothing.
    package mutating func radixSort() {
        let n = count
        guard n >= 64 else {
            sort()
            return
        }
        var orAll: UInt64 = 0, andAll = UInt64.max
        for x in self {
            orAll |= x
            andAll &= x
        }
        let varying = orAll ^ andAll
        guard varying != 0 else { return }
        let low = varying.trailingZeroBitCount, high = 64 - varying.leadingZeroBitCount
        // Fewer buckets for short arrays, where clearing and summing the counts would cost more than the passes.
        let digit = n < 4096 ? 8 : 11
        let mask = UInt64((1 << digit) - 1)
        var other = [UInt64](unsafeUninitializedCapacity: n) { _, initialized in initialized = n }
        var counts = [Int](repeating: 0, count: 1 << digit)
        var inOther = false
        withUnsafeMutableBufferPointer { a in
            other.withUnsafeMutableBufferPointer { b in
                counts.withUnsafeMutableBufferPointer { c in
                    var shift = low
                    while shift < high {
                        let (src, dst) = inOther ? (b, a) : (a, b)
                        for i in c.indices { c[i] = 0 }
                        for x in src { c[Int(truncatingIfNeeded: (x >> UInt64(shift)) & mask)] += 1 }
                        var sum = 0
                        for i in c.indices {
                            let k = c[i]
                            c[i] = sum
                            sum += k
                        }
                        for x in src {
                            let d = Int(truncatingIfNeeded: (x >> UInt64(shift)) & mask)
                            dst[c[d]] = x
                            c[d] += 1
                        }
                        inOther.toggle()
                        shift += digit
                    }
                }
            }
        }
        if inOther { swap(&self, &other) }
    }
}
