import Foundation

/// Plays a file into a live pipeline as a microphone would hear it: 44.1 kHz mono buffers, released at
/// real-time pace (or as fast as they decode, with `realTime: false`).
public final class FileReplay: AudioSource {
    private let reader: AudioFileReader
    private let realTime: Bool
    private var start: Double?
    private var delivered = 0.0

    /// Opens `path` (any format ``AudioFileReader`` reads); `bufferDuration` seconds per buffer.
    public init(path: String, realTime: Bool = true, bufferDuration: Double = 0.1) throws {
        reader = try AudioFileReader(path: path, chunkFrames: max(256, Int(bufferDuration * 44_100)))
        self.realTime = realTime
    }

    public func next() throws -> PCMBuffer? {
        guard let chunk = try reader.next() else { return nil }
        if realTime {
            let now = monotonicSeconds()
            if start == nil { start = now }
            // Release each buffer when its last sample would have been heard.
            let due = start! + delivered + Double(chunk.count) / AudioConstants.sampleRate
            if due > now { usleep(UInt32((due - now) * 1_000_000)) }
        }
        delivered += Double(chunk.count) / AudioConstants.sampleRate
        return PCMBuffer(samples: chunk, sampleRate: AudioConstants.sampleRate, channels: 1)
    }
}

/// Seconds on the system's monotonic clock (unaffected by changes to the wall-clock time).
public func monotonicSeconds() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) * 1e-9
}
