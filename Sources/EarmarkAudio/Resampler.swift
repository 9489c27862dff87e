import CSoxr

/// Streaming sample-rate converter for mono float audio, backed by libsoxr (high quality).
///
/// Feed any number of chunks with ``process(_:)`` and call ``flush()`` once at the end to
/// receive the filter's tail. When the input rate equals the output rate samples pass through.
public final class Resampler {
    public let inputRate: Double
    public let outputRate: Double
    private var handle: soxr_t?
    private var scratch: [Float] = []

    /// - Parameters:
    ///   - inputRate: samples per second of the input, > 0.
    ///   - outputRate: samples per second of the output; default 44,100.
    public init(inputRate: Double, outputRate: Double = AudioConstants.sampleRate) throws {
        guard inputRate.isFinite, inputRate > 0, outputRate.isFinite, outputRate > 0 else {
            throw AudioError(.invalidFormat, "invalid sample rate \(inputRate) Hz")
        }
        self.inputRate = inputRate
        self.outputRate = outputRate
        if inputRate != outputRate {
            var err: soxr_error_t? = nil
            var io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I)
            var q = soxr_quality_spec(UInt(SOXR_HQ), 0)
            handle = soxr_create(inputRate, outputRate, 1, &err, &io, &q, nil)
            if let err {
                throw AudioError(.invalidFormat, "cannot create resampler: \(String(cString: err))")
            }
        }
    }

    deinit {
        if let handle { soxr_delete(handle) }
    }

    /// Converts one chunk; the output may be shorter or longer than rate × input.
    public func process(_ input: [Float]) -> [Float] {
        guard let handle else { return input }
        if input.isEmpty { return [] }
        let capacity = Int(Double(input.count) * outputRate / inputRate) + 64
        if scratch.count < capacity { scratch = [Float](repeating: 0, count: capacity) }
        var out: [Float] = []
        out.reserveCapacity(capacity)
        input.withUnsafeBufferPointer { inBuf in
            var consumed = 0
            while consumed < inBuf.count {
                var idone = 0
                var odone = 0
                scratch.withUnsafeMutableBufferPointer { outBuf in
                    _ = soxr_process(handle, inBuf.baseAddress! + consumed, inBuf.count - consumed, &idone,
                                     outBuf.baseAddress!, outBuf.count, &odone)
                    out.append(contentsOf: outBuf[0..<odone])
                }
                consumed += idone
                if idone == 0 && odone == 0 { break }
            }
        }
        return out
    }

    /// Drains the filter's delay line; call once after the last ``process(_:)``.
    public func flush() -> [Float] {
        guard let handle else { return [] }
        if scratch.count < 4096 { scratch = [Float](repeating: 0, count: 4096) }
        var out: [Float] = []
        while true {
            var odone = 0
            scratch.withUnsafeMutableBufferPointer { outBuf in
                _ = soxr_process(handle, nil, 0, nil, outBuf.baseAddress!, outBuf.count, &odone)
                out.append(contentsOf: outBuf[0..<odone])
            }
            if odone == 0 { break }
        }
        return out
    }
}

/// Fixed facts of Earmark's audio pipeline.
public enum AudioConstants {
    /// Every decoder output is converted to this rate (Hz) before fingerprinting.
    public static let sampleRate: Double = 44_100
}
