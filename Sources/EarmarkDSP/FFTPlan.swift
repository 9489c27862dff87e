import CFFTW3
import Foundation

/// FFTW's planner is not thread-safe; only executing a plan is. Every plan is made under this lock.
private let plannerLock = NSLock()

/// One FFTW plan per transform size for the whole process, made on first use and kept: making an
/// `FFTW_ESTIMATE` plan costs about a millisecond, more than transforming a 10-s clip's frames of that size
/// takes in part, and every signature, spectrum and front end asked for one of its own.
///
/// Each ``FFTPlan`` runs the shared plan on its own buffers with `fftwf_execute_dft_r2c`, which FFTW allows
/// from any thread at once, on arrays aligned as the ones the plan was made for (all come from
/// `fftwf_alloc_*`). The same plan gives the same numbers as a plan of one's own: the same algorithm.
private final class SharedPlans: @unchecked Sendable {
    // Guarded by `plannerLock`; plans are never destroyed.
    private var plans: [Int: fftwf_plan] = [:]

    func plan(size: Int) -> fftwf_plan {
        plannerLock.lock()
        defer { plannerLock.unlock() }
        if let plan = plans[size] { return plan }
        let input = fftwf_alloc_real(size)
        let output = fftwf_alloc_complex(size / 2 + 1)
        defer {
            fftwf_free(input)
            fftwf_free(output)
        }
        guard let plan = fftwf_plan_dft_r2c_1d(Int32(size), input, output, UInt32(FFTW_ESTIMATE)) else {
            fatalError("FFTW made no plan for a real transform of \(size) points")
        }
        plans[size] = plan
        return plan
    }
}

private let sharedPlans = SharedPlans()

/// A real-to-complex forward FFT of a fixed size with its own aligned buffers.
///
/// The FFTW plan of that size is shared by the process (made once) and run on this instance's buffers.
/// An instance is not thread-safe; give each task its own.
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
        plan = sharedPlans.plan(size: size)
    }

    deinit {
        fftwf_free(input)
        fftwf_free(output)
    }

    /// Windows `frame` (length `size`) and writes |X[k]|² for `k` in `bins` into `power[k - bins.lowerBound]`.
    public func powerSpectrum(frame: UnsafePointer<Float>, window: [Float], bins: Range<Int>,
                              into power: UnsafeMutablePointer<Float>) {
        window.withUnsafeBufferPointer { w in
            for i in 0..<size { input[i] = frame[i] * w[i] }
        }
        fftwf_execute_dft_r2c(plan, input, output)
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
