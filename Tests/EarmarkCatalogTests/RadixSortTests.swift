@testable import EarmarkCatalog
import Testing

@Suite("Radix sort of packed words")
struct RadixSortTests {
    @Test("gives sort()'s order for short and long arrays, narrow and wide values, duplicates and one repeated value")
    func sameAsSort() {
        var rng = SystemRandomNumberGenerator()
        let shapes: [(count: Int, make: (inout SystemRandomNumberGenerator) -> UInt64)] = [
            (0, { _ in 0 }), (1, { $0.next() }), (63, { $0.next() }), (64, { $0.next() }), (1_000, { $0.next() }),
            (5_000, { $0.next() }),
            // Hash in the high word, a small frame in the low one, as the matcher packs landmarks.
            (3_001, { UInt64(UInt32.random(in: 0...UInt32.max, using: &$0)) << 32 | UInt64.random(in: 0..<1_000, using: &$0) }),
            // Few distinct values: long runs of duplicates.
            (4_097, { UInt64.random(in: 0..<7, using: &$0) << 40 }),
            (2_000, { _ in 0xDEAD_BEEF }),
        ]
        for shape in shapes {
            var a = (0..<shape.count).map { _ in shape.make(&rng) }
            let expected = a.sorted()
            a.radixSort()
            #expect(a == expected, "\(shape.count) elements")
        }
    }
}
