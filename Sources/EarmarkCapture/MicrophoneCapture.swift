import CPulseSimple
import EarmarkAudio
import Foundation

/// An error opening or reading a capture device.
public struct CaptureError: Error, CustomStringConvertible, Sendable, Equatable {
    public enum Code: String, Sendable {
        /// No PulseAudio (or PipeWire's PulseAudio service) to connect to.
        case noSoundServer
        /// The named source does not exist.
        case noSuchDevice
        /// The server refused or dropped the stream.
        case failed
    }
    public var code: Code
    public var message: String
    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }
    public var description: String { message }
}

/// Records from a microphone (any PulseAudio source) through the PulseAudio simple API, which works
/// on PulseAudio and on PipeWire desktops (pipewire-pulse) alike.
///
/// The server converts to 44.1 kHz mono float; ``next()`` blocks until a buffer is full.
///
/// ```swift
/// let mic = try MicrophoneCapture()              // the default source
/// while let buffer = try mic.next() { session.append(buffer) }
/// ```
public final class MicrophoneCapture: AudioSource {
    public let device: String?
    public let sampleRate: Double = AudioConstants.sampleRate
    private let handle: OpaquePointer
    private let framesPerBuffer: Int

    /// Connects to the sound server and opens `device` (a source name as `pactl list short sources`
    /// prints it; nil: the default source). `bufferDuration` is the seconds per ``next()``.
    public init(device: String? = nil, bufferDuration: Double = 0.1, applicationName: String = "earmark") throws {
        self.device = device
        framesPerBuffer = max(64, Int(sampleRate * bufferDuration))
        var spec = pa_sample_spec(format: PA_SAMPLE_FLOAT32LE, rate: UInt32(sampleRate), channels: 1)
        // A fragment of one buffer keeps the delay from the microphone to the matcher short.
        let bytes = UInt32(framesPerBuffer * MemoryLayout<Float>.size)
        var attr = pa_buffer_attr(maxlength: UInt32.max, tlength: UInt32.max, prebuf: UInt32.max, minreq: UInt32.max,
                                  fragsize: bytes)
        var error: Int32 = 0
        guard let h = pa_simple_new(nil, applicationName, PA_STREAM_RECORD, device, "listen", &spec, nil, &attr, &error) else {
            throw MicrophoneCapture.describe(error, device: device)
        }
        handle = h
    }

    deinit { pa_simple_free(handle) }

    /// Blocks until the next buffer of 44.1 kHz mono audio has been recorded (never nil: a microphone does not end).
    public func next() throws -> PCMBuffer? {
        var samples = [Float](repeating: 0, count: framesPerBuffer)
        var error: Int32 = 0
        let status = samples.withUnsafeMutableBytes { pa_simple_read(handle, $0.baseAddress, $0.count, &error) }
        guard status >= 0 else { throw MicrophoneCapture.describe(error, device: device) }
        return PCMBuffer(samples: samples, sampleRate: sampleRate, channels: 1)
    }

    static func describe(_ error: Int32, device: String?) -> CaptureError {
        let text = String(cString: pa_strerror(error))
        switch Int(error) {
        case Int(PA_ERR_CONNECTIONREFUSED.rawValue), Int(PA_ERR_ACCESS.rawValue), Int(PA_ERR_INVALIDSERVER.rawValue):
            return CaptureError(.noSoundServer,
                                "cannot reach a sound server (PulseAudio or PipeWire): \(text); is one running for this user?")
        case Int(PA_ERR_NOENTITY.rawValue):
            return CaptureError(.noSuchDevice, "no input device named '\(device ?? "default")' (list them with `pactl list short sources`)")
        case Int(PA_ERR_CONNECTIONTERMINATED.rawValue), Int(PA_ERR_KILLED.rawValue):
            return CaptureError(.failed, "the sound server closed the recording: \(text)")
        default:
            return CaptureError(.failed, "recording failed: \(text)")
        }
    }
}
