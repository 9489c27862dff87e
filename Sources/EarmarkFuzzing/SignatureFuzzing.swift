import EarmarkSignature
import Foundation

/// Signature files: decoded as they are, and again with their checksum made right, so that mutated
/// peaks get past the checksum; a decoded signature is re-encoded and paired into landmarks.
enum SignatureFuzzing {
    static func run(_ bytes: UnsafeRawBufferPointer) {
        let data = Data(bytes)
        decode(data)
        guard data.count >= 28 else { return }
        var fixed = data
        let sum = fnv1a32(fixed.prefix(fixed.count - 4))
        for i in 0..<4 { fixed[fixed.count - 4 + i] = UInt8(truncatingIfNeeded: sum >> (8 * i)) }
        if fixed != data { decode(fixed) }
    }

    static func decode(_ data: Data) {
        guard let signature = try? Signature(dataRepresentation: data) else { return }
        // What the reader accepts, the writer writes back bit for bit (the reserved field aside).
        let again = signature.dataRepresentation()
        guard let reread = try? Signature(dataRepresentation: again), reread.dataRepresentation() == again else {
            fatalError("a decoded signature does not survive encoding and decoding again")
        }
        _ = try? signature.validateForMatching()
        for role in [LandmarkRole.reference, .query, .deepQuery] {
            _ = Landmarks.extract(from: signature, role: role)
        }
    }

    static func fnv1a32(_ data: Data) -> UInt32 {
        data.reduce(0x811C_9DC5 as UInt32) { ($0 ^ UInt32($1)) &* 0x0100_0193 }
    }
}
