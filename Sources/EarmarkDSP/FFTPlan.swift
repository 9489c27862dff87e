import CFFTW3
import Foundation

/// FFTW's planner is not thread-safe; only `fftwf_execute` is. Every plan is made and destroyed under this lock.
private let plannerLock = NSLock()

/// A real-to-complex forward FFT of a fixed size with its own aligned buffers.
///
/// The FFTW plan is made once in `init` and reused for every frame. An instance is not
/// thread-safe; give each task its own.
public final class FFTPlan {
    /// Transform length in samples.
    public let size: Int
    /// Number of complex output bins: `size / 2 + 1`.
    public var binCount: Int { size / 2 + 1 }
    private let input: UnsafeMutablePointer<Float>
    private let output: UnsafeMutablePointer<fftwf_complex>
    private let plan: fftwf_plan

    /// - Parameter size: any length ≥ 2 (FFTW is fastest on products of small primes: 400 = 2⁴·5² for Whisper).
    public init(size: Int) {
        precondition(size >= 2, "FFT size must be at least 2")
        self.size = size
        input = fftwf_alloc_real(size)
        output = fftwf_alloc_complex(size / 2 + 1)
        plannerLock.lock()
        plan = fftwf_plan_dft_r2c_1d(Int32(size), input, output, UInt32(FFTW_ESTIMATE))
        plannerLock.unlock()
    }

    deinit {
        plannerLock.lock()
        fftwf_destroy_plan(plan)
        plannerLock.unlock()
        fftwf_free(input)
        fftwf_free(output)
    }

    /// Windows `frame` (length `size`) and writes |X[k]|² for `k` in `bins` into `power[k - bins.lowerBound]`.
    public func powerSpectrum(frame: UnsafePointer<Float>, window: [Float], bins: Range<Int>,
                              into power: UnsafeMutablePointer<Float>) {
        window.withUnsafeBufferPointer { w in
            for i in 0..<size { input[i] = frame[i] * w[i] }
        }
        fftwf_execute(plan)
        let raw = UnsafeMutableRawPointer(output).assumingMemoryBound(to: Float.self)
        for k in bins {
            let re = raw[2 * k], im = raw[2 * k + 1]
            power[k - bins.lowerBound] = re * re + im * im
        }
    }
}

/// Window functions.
public enum Window {
    /// Periodic Hann window of length `n`.
    public static func hann(_ n: Int) -> [Float] {
        (0..<n).map { 0.5 - 0.5 * Float(cos(2 * Double.pi * Double($0) / Double(n))) }
    }
}
