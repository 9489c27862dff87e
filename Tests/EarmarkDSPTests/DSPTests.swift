import EarmarkDSP
import Foundation
import Testing

/// `amplitude · sin(2π f n / rate)` for n in 0..<count (the DSP target has no test-support dependency).
func sine(frequency: Double, count: Int, sampleRate: Double = 44_100, amplitude: Float = 0.5) -> [Float] {
    (0..<count).map { amplitude * Float(sin(2 * Double.pi * frequency * Double($0) / sampleRate)) }
}

func power(of frame: [Float], size: Int, bins: Range<Int>) -> [Float] {
    let plan = FFTPlan(size: size)
    var out = [Float](repeating: 0, count: bins.count)
    frame.withUnsafeBufferPointer { f in
        out.withUnsafeMutableBufferPointer { p in
            plan.powerSpectrum(frame: f.baseAddress!, window: Window.hann(size), bins: bins, into: p.baseAddress!)
        }
    }
    return out
}

func argmax(_ x: [Float]) -> Int { x.indices.max { x[$0] < x[$1] }! }

@Suite("FFTPlan")
struct FFTPlanTests {
    @Test("a sine centred on bin k peaks at k with the Hann window's power", arguments: [5, 100, 511, 1000])
    func binCentredSine(bin: Int) {
        let n = 2048
        let spectrum = power(of: sine(frequency: Double(bin) * 44_100 / Double(n), count: n), size: n, bins: 0..<(n / 2 + 1))
        #expect(spectrum.count == 1025)
        #expect(argmax(spectrum) == bin)
        // Hann coherent gain is 1/2, so |X[k]| = A·N/4 = 256 for A = 0.5, N = 2048.
        let expected: Float = 256 * 256
        #expect(abs(spectrum[bin] - expected) / expected < 0.001, "power \(spectrum[bin])")
        // Hann leaks into the two neighbours only (a quarter of the peak's magnitude each), not beyond.
        #expect(abs(spectrum[bin - 1] / expected - 0.25) < 0.001)
        #expect(spectrum[bin + 3] / expected < 1e-6)
    }

    @Test("1 kHz peaks at the nearest bin, 1000 · 2048 / 44100 ≈ 46.4")
    func offBinSine() {
        let spectrum = power(of: sine(frequency: 1000, count: 2048), size: 2048, bins: 0..<1025)
        #expect(argmax(spectrum) == 46)
    }

    @Test("a sub-range of bins is the same slice of the full spectrum")
    func binRange() {
        let frame = sine(frequency: 3000, count: 1024, amplitude: 0.9)
        let full = power(of: frame, size: 1024, bins: 0..<513)
        let part = power(of: frame, size: 1024, bins: 60..<80)
        #expect(part == Array(full[60..<80]))
        #expect(argmax(part) + 60 == 70, "3000 Hz · 1024 / 44100 ≈ 69.7")
    }

    @Test("silence has zero power")
    func silence() {
        #expect(power(of: [Float](repeating: 0, count: 512), size: 512, bins: 0..<257).allSatisfy { $0 == 0 })
    }

    @Test("the periodic Hann window")
    func hann() {
        let w = Window.hann(8)
        #expect(w.count == 8)
        #expect(w[0] == 0)
        #expect(abs(w[4] - 1) < 1e-7)
        #expect(abs(w[2] - 0.5) < 1e-7 && abs(w[6] - 0.5) < 1e-7)
        #expect(abs(w[1] - w[7]) < 1e-7, "symmetric about n/2")
    }
}

@Suite("STFT")
struct STFTTests {
    /// Frame indices emitted for `samples` appended in chunks of `chunk` samples.
    func frames(_ samples: [Float], chunk: Int, fftSize: Int = 2048, hop: Int = 441) -> [(Int, [Float])] {
        let stft = STFT(fftSize: fftSize, hop: hop, bins: 12..<187)
        var out: [(Int, [Float])] = []
        var start = 0
        while start < samples.count {
            let end = min(samples.count, start + chunk)
            samples[start..<end].withUnsafeBufferPointer { buf in
                stft.append(buf) { index, power in out.append((index, Array(power))) }
            }
            start = end
        }
        return out
    }

    static let counts: [Int] = [0, 2047, 2048, 2048 + 440, 2048 + 441, 44_100]

    @Test("N samples give max(0, ⌊(N − fftSize) / hop⌋ + 1) frames, whatever the chunking", arguments: counts)
    func frameCount(n: Int) {
        let x = sine(frequency: 700, count: n)
        let expected = n < 2048 ? 0 : (n - 2048) / 441 + 1
        for chunk in [max(1, n), 1000, 441, 7] {
            let f = frames(x, chunk: chunk)
            #expect(f.count == expected, "N = \(n), chunks of \(chunk)")
            #expect(f.map(\.0) == Array(0..<expected), "frame indices count up from 0")
        }
    }

    @Test("frame k is the power spectrum of samples k·hop ..< k·hop + fftSize")
    func frameContents() {
        let x = zip(sine(frequency: 440, count: 8000), sine(frequency: 2500, count: 8000, amplitude: 0.2)).map { $0 + $1 }
        let f = frames(x, chunk: 333, fftSize: 1024, hop: 256)
        #expect(f.count == (8000 - 1024) / 256 + 1)
        for k in [0, 5, f.count - 1] {
            let direct = power(of: Array(x[(k * 256)..<(k * 256 + 1024)]), size: 1024, bins: 12..<187)
            let maxDiff = zip(direct, f[k].1).map { abs($0 - $1) }.max()!
            #expect(maxDiff <= 1e-3 * direct.max()!, "frame \(k)")
        }
    }

    @Test("reset(frameIndex:) drops buffered samples and renumbers frames")
    func reset() {
        let stft = STFT(fftSize: 1024, hop: 512, bins: 0..<513)
        var indices: [Int] = []
        let x = sine(frequency: 1000, count: 1500)
        x.withUnsafeBufferPointer { b in stft.append(b) { i, _ in indices.append(i) } }
        #expect(indices == [0])
        stft.reset(frameIndex: 100)
        #expect(stft.frameIndex == 100)
        // 1000 new samples: not yet a full frame, because the old 988 buffered samples were dropped.
        Array(x[0..<1000]).withUnsafeBufferPointer { b in stft.append(b) { i, _ in indices.append(i) } }
        #expect(indices == [0])
        Array(x[0..<24]).withUnsafeBufferPointer { b in stft.append(b) { i, _ in indices.append(i) } }
        #expect(indices == [0, 100])
    }
}
