@_exported import EarmarkDSP
import Foundation

/// A small seeded generator, so that "random" test input is the same on every run.
public typealias SeededRandom = SplitMix64

extension SplitMix64 {
    public init(seed: UInt64) { self.init(state: seed) }

    /// A standard normal deviate (Box–Muller).
    public mutating func gaussian() -> Double {
        let u1 = max(Double.leastNonzeroMagnitude, Double.random(in: 0..<1, using: &self))
        let u2 = Double.random(in: 0..<1, using: &self)
        return (-2 * log(u1)).squareRoot() * cos(2 * Double.pi * u2)
    }
}

/// Synthetic signals and simple measurements of them.
public enum Signal {
    /// `amplitude · sin(2π f t)` sampled at `sampleRate` for `seconds`.
    public static func sine(frequency: Double, sampleRate: Double, seconds: Double, amplitude: Float = 0.5) -> [Float] {
        let n = Int((seconds * sampleRate).rounded())
        let w = 2 * Double.pi * frequency / sampleRate
        return (0..<n).map { amplitude * Float(sin(w * Double($0))) }
    }

    /// Gaussian white noise with standard deviation `rms`.
    public static func whiteNoise(count: Int, rms: Double, seed: UInt64) -> [Float] {
        var rng = SeededRandom(seed: seed)
        return (0..<count).map { _ in Float(rng.gaussian() * rms) }
    }

    /// Root mean square.
    public static func rms<C: Collection>(_ x: C) -> Double where C.Element == Float {
        guard !x.isEmpty else { return 0 }
        var sum = 0.0
        for v in x { sum += Double(v) * Double(v) }
        return (sum / Double(x.count)).squareRoot()
    }

    /// `signal` plus white noise scaled so that signal power / noise power is `snrDB` decibels.
    public static func addingNoise(to signal: [Float], snrDB: Double, seed: UInt64) -> [Float] {
        let noiseRMS = rms(signal) / pow(10, snrDB / 20)
        let noise = whiteNoise(count: signal.count, rms: noiseRMS, seed: seed)
        return zip(signal, noise).map { $0 + $1 }
    }

    /// `signal` plus `noise` (as long as `signal` or longer) scaled so that signal power / noise power is `snrDB` decibels.
    public static func mixing(_ noise: [Float], into signal: [Float], snrDB: Double) -> [Float] {
        let gain = Float(rms(signal) / pow(10, snrDB / 20) / max(1e-12, rms(noise.prefix(signal.count))))
        return zip(signal, noise).map { $0 + gain * $1 }
    }

    /// Frequency of a (roughly) pure tone from its upward zero crossings, with linear interpolation
    /// between samples; uses the middle of the signal to skip filter edges.
    public static func toneFrequency(_ x: [Float], sampleRate: Double) -> Double {
        let body = x[(x.count / 10)..<(x.count - x.count / 10)]
        var first: Double?
        var last = 0.0
        var crossings = 0
        var prev = body.first ?? 0
        var i = body.startIndex + 1
        while i < body.endIndex {
            let v = body[i]
            if prev < 0, v >= 0 {
                let t = Double(i - 1) + Double(-prev / (v - prev))
                if first == nil { first = t } else { crossings += 1 }
                last = t
            }
            prev = v
            i += 1
        }
        guard let first, crossings > 0 else { return 0 }
        return Double(crossings) * sampleRate / (last - first)
    }

    /// Samples between `start` and `start + seconds` of 44.1 kHz audio (clamped to the buffer).
    public static func slice(_ x: [Float], start: Double, seconds: Double, sampleRate: Double = 44_100) -> [Float] {
        let a = max(0, min(x.count, Int((start * sampleRate).rounded())))
        let b = max(a, min(x.count, a + Int((seconds * sampleRate).rounded())))
        return Array(x[a..<b])
    }
}

/// Writes PCM WAV files (16-bit integer or 32-bit float), interleaving the given channels.
public enum WAVFile {
    public enum Encoding: Sendable { case int16, float32 }

    public static func write(channels: [[Float]], sampleRate: Int, to url: URL, encoding: Encoding = .int16) throws {
        precondition(!channels.isEmpty && channels.allSatisfy { $0.count == channels[0].count })
        let frames = channels[0].count
        let bytesPerSample = encoding == .int16 ? 2 : 4
        let dataBytes = frames * channels.count * bytesPerSample
        var d = Data()
        d.reserveCapacity(44 + dataBytes)
        func u32(_ v: UInt32) { withUnsafeBytes(of: v.littleEndian) { d.append(contentsOf: $0) } }
        func u16(_ v: UInt16) { withUnsafeBytes(of: v.littleEndian) { d.append(contentsOf: $0) } }
        d.append(contentsOf: Array("RIFF".utf8)); u32(UInt32(36 + dataBytes)); d.append(contentsOf: Array("WAVE".utf8))
        d.append(contentsOf: Array("fmt ".utf8)); u32(16)
        u16(encoding == .int16 ? 1 : 3)                       // PCM or IEEE float
        u16(UInt16(channels.count)); u32(UInt32(sampleRate))
        u32(UInt32(sampleRate * channels.count * bytesPerSample)); u16(UInt16(channels.count * bytesPerSample))
        u16(UInt16(bytesPerSample * 8))
        d.append(contentsOf: Array("data".utf8)); u32(UInt32(dataBytes))
        for i in 0..<frames {
            for c in channels {
                switch encoding {
                case .int16: u16(UInt16(bitPattern: Int16(max(-32768, min(32767, (c[i] * 32767).rounded())))))
                case .float32: u32(c[i].bitPattern)
                }
            }
        }
        try d.write(to: url)
    }

    /// Mono convenience.
    public static func write(_ samples: [Float], sampleRate: Int = 44_100, to url: URL, encoding: Encoding = .int16) throws {
        try write(channels: [samples], sampleRate: sampleRate, to: url, encoding: encoding)
    }
}

extension Signal {
    /// Whether `seconds` of `track` (44.1 kHz mono) from `a` s and from `b` s are the same music: the two
    /// stretches' samples correlate at `threshold` or more at the best lag within ±30 ms of b − a. Tracker
    /// modules play whole patterns again, so a clip of one can have more than one true offset.
    public static func sameMusic(_ track: [Float], _ a: Double, _ b: Double, seconds: Double,
                                 threshold: Double = 0.95, sampleRate: Double = 44_100) -> Bool {
        let start = [a, b].map { Int(($0 * sampleRate).rounded()) }
        let search = Int(0.03 * sampleRate)
        let length = min(Int(seconds * sampleRate), track.count - max(start[0], start[1]) - search)
        guard start.allSatisfy({ $0 >= search }), length >= Int(sampleRate) else { return false }
        return track.withUnsafeBufferPointer { x in
            func correlation(lag: Int, from: Int, count: Int) -> Double {
                var xy = 0.0, xx = 0.0, yy = 0.0
                for i in from..<(from + count) {
                    let p = Double(x[start[0] + i]), q = Double(x[start[1] + lag + i])
                    xy += p * q; xx += p * p; yy += q * q
                }
                return xx > 0 && yy > 0 ? xy / (xx * yy).squareRoot() : 0
            }
            // The lag from half a second in the middle, then the whole stretch at that lag.
            let probe = min(length, Int(sampleRate / 2))
            let lag = (-search...search).map { ($0, correlation(lag: $0, from: (length - probe) / 2, count: probe)) }
                .max { $0.1 < $1.1 }!.0
            return correlation(lag: lag, from: 0, count: length) >= threshold
        }
    }
}
