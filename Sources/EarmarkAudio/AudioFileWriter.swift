import CSndFile

/// Writes PCM buffers to a WAV file (32-bit float) with libsndfile; the rate and channel count are
/// fixed by the first buffer.
public final class AudioFileWriter {
    public let path: String
    private var file: OpaquePointer?
    private var format: (rate: Double, channels: Int)?

    /// Creates (or replaces) `path` when the first buffer arrives.
    public init(path: String) {
        self.path = path
    }

    deinit { close() }

    /// Appends a buffer; throws if the file cannot be written or the buffer's format differs from the first one.
    public func write(_ buffer: PCMBuffer) throws {
        if file == nil {
            var info = SF_INFO()
            info.samplerate = Int32(buffer.sampleRate.rounded())
            info.channels = Int32(buffer.channels)
            info.format = Int32(SF_FORMAT_WAV | SF_FORMAT_FLOAT)
            guard let f = sf_open(path, Int32(SFM_WRITE), &info) else {
                throw AudioError(.unreadable, "cannot write: \(String(cString: sf_strerror(nil)))", path: path)
            }
            file = f
            format = (buffer.sampleRate, buffer.channels)
        }
        guard let format, format.rate == buffer.sampleRate, format.channels == buffer.channels else {
            throw AudioError(.invalidFormat, "buffers change format mid-recording", path: path)
        }
        let frames = buffer.frameCount
        let written = buffer.samples.withUnsafeBufferPointer { sf_writef_float(file, $0.baseAddress, sf_count_t(frames)) }
        guard written == frames else {
            throw AudioError(.unreadable, "write failed: \(String(cString: sf_strerror(file)))", path: path)
        }
    }

    /// Finishes the file (its header gets the final length); later writes start a new file.
    public func close() {
        if let file { sf_close(file) }
        file = nil
    }
}

/// Passes a source's buffers through unchanged while saving them to a file.
public final class RecordingSource: AudioSource {
    private let source: any AudioSource
    private let writer: AudioFileWriter

    public init(_ source: any AudioSource, recordingTo path: String) {
        self.source = source
        writer = AudioFileWriter(path: path)
    }

    public func next() throws -> PCMBuffer? {
        guard let buffer = try source.next() else {
            writer.close()
            return nil
        }
        try writer.write(buffer)
        return buffer
    }
}
