import EarmarkAudio
import Foundation

/// WAV streams: the header and every buffer after it, read as from a pipe and as from a file, and
/// the same bytes as raw PCM in a format picked by the first byte.
enum WAVFuzzing {
    static func run(_ bytes: UnsafeRawBufferPointer) {
        let b = [UInt8](bytes)
        for seekable in [false, true] {
            drain(try? PCMStreamReader(seekable: seekable, bufferDuration: 0.01, source: reader(b)))
        }
        let formats = PCMStreamReader.SampleFormat.allCases
        let pick = Int(b.first ?? 0)
        let raw = (format: formats[pick % formats.count], sampleRate: 8_000.0, channels: 1 + pick / formats.count % 3)
        drain(try? PCMStreamReader(seekable: false, raw: raw, bufferDuration: 0.01, source: reader(b)))
    }

    /// A source handing out `b` in the pieces asked for.
    static func reader(_ b: [UInt8]) -> (Int) throws -> [UInt8] {
        var offset = 0
        return { n in
            precondition(n > 0, "the reader asked for \(n) bytes")
            let end = min(b.count, offset + n)
            defer { offset = end }
            return Array(b[offset..<end])
        }
    }

    static func drain(_ reader: PCMStreamReader?) {
        guard let reader else { return }
        while let buffer = try? reader.next() {
            precondition(buffer.samples.count % reader.channels == 0, "a buffer ends inside a frame")
        }
    }
}
