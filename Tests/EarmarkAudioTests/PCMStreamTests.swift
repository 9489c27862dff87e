@testable import EarmarkAudio
import EarmarkTestSupport
import Foundation
import Testing

/// The 44-byte header `sox in.wav -t wav -` writes for 44.1 kHz 16-bit stereo when it cannot know the
/// length (input from a pipe, SoX v14.4.2): RIFF size 0x7FFFF024, data size 0x7FFFF000.
let soxPipeHeader: [UInt8] = [
    0x52, 0x49, 0x46, 0x46, 0x24, 0xF0, 0xFF, 0x7F, 0x57, 0x41, 0x56, 0x45, 0x66, 0x6D, 0x74, 0x20,
    0x10, 0x00, 0x00, 0x00, 0x01, 0x00, 0x02, 0x00, 0x44, 0xAC, 0x00, 0x00, 0x10, 0xB1, 0x02, 0x00,
    0x04, 0x00, 0x10, 0x00, 0x64, 0x61, 0x74, 0x61, 0x00, 0xF0, 0xFF, 0x7F,
]

/// `header` with its data chunk's stated size replaced.
func withDataSize(_ header: [UInt8], _ size: UInt32) -> [UInt8] {
    var h = header
    for i in 0..<4 { h[h.count - 4 + i] = UInt8(truncatingIfNeeded: size >> (8 * i)) }
    return h
}

/// `frames` stereo 16-bit frames whose left sample is the frame number.
func countingFrames(_ frames: Int) -> [UInt8] {
    (0..<frames).flatMap { f -> [UInt8] in
        let v = UInt16(truncatingIfNeeded: f)
        return [UInt8(v & 0xFF), UInt8(v >> 8), 0, 0]
    }
}

/// Every frame the reader delivers for `bytes` (all of them, as a pipe when not `seekable`).
func readFrames(_ bytes: [UInt8], seekable: Bool) throws -> Int {
    var offset = 0
    let reader = try PCMStreamReader(seekable: seekable) { n in
        let end = min(bytes.count, offset + n)
        defer { offset = end }
        return Array(bytes[offset..<end])
    }
    var frames = 0
    while let b = try reader.next() { frames += b.frameCount }
    return frames
}

@Suite("Reading WAV streams from pipes")
struct PCMStreamTests {
    @Test("a piped sox WAV whose stated length is shorter than the stream is read to its end")
    func soxPlaceholderShorterThanStream() throws {
        // At 2 GiB the placeholder runs out while the audio goes on: the same, scaled down to 1,000 frames.
        let stream = withDataSize(soxPipeHeader, 4_000) + countingFrames(3_000)
        #expect(try readFrames(stream, seekable: false) == 3_000)
        // Through a real pipe, as `earmark listen --input -` reads it.
        let pipe = Pipe()
        try pipe.fileHandleForWriting.write(contentsOf: Data(stream))
        try pipe.fileHandleForWriting.close()
        let reader = try PCMStreamReader(fileDescriptor: pipe.fileHandleForReading.fileDescriptor)
        var last: Float = -1, frames = 0
        while let b = try reader.next() {
            frames += b.frameCount
            last = b.samples[b.samples.count - 2]
        }
        #expect(frames == 3_000)
        #expect(last == Float(2_999) / 32_768)
    }

    @Test("sox's own 2-GiB placeholder reads to the end of a short stream")
    func soxPlaceholder() throws {
        #expect(try readFrames(soxPipeHeader + countingFrames(500), seekable: false) == 500)
        #expect(try readFrames(soxPipeHeader + countingFrames(500), seekable: true) == 500)
    }

    @Test("in a file the stated length is true: what follows it is not audio")
    func fileLengthIsTrue() throws {
        let stream = withDataSize(soxPipeHeader, 4_000) + countingFrames(3_000)
        #expect(try readFrames(stream, seekable: true) == 1_000)
        let tmp = try TemporaryDirectory("pcm-stream")
        try Data(stream).write(to: tmp.file("short.wav"))
        let handle = try FileHandle(forReadingFrom: tmp.file("short.wav"))
        defer { try? handle.close() }
        var frames = 0
        let reader = try PCMStreamReader(fileDescriptor: handle.fileDescriptor)
        while let b = try reader.next() { frames += b.frameCount }
        #expect(frames == 1_000)
    }

    @Test("on a pipe a RIFF chunk right after the stated length ends the audio (also after a pad byte)")
    func trailingChunkOnPipe() throws {
        let list: [UInt8] = Array("LIST".utf8) + [12, 0, 0, 0] + Array("INFOISFT".utf8) + [2, 0, 0, 0, 0x78, 0]
        let stream = withDataSize(soxPipeHeader, 4_000) + countingFrames(1_000) + list
        #expect(try readFrames(stream, seekable: false) == 1_000)
        // An odd stated length: one stray data byte, then the pad byte before the chunk.
        let odd = withDataSize(soxPipeHeader, 4_001) + countingFrames(1_000) + [0] + [0] + list
        #expect(try readFrames(odd, seekable: false) == 1_000)
    }

    @Test("ffmpeg's unknown length (0xFFFFFFFF) and RF64's ds64 length")
    func ffmpegAndRF64() throws {
        #expect(try readFrames(withDataSize(soxPipeHeader, 0xFFFF_FFFF) + countingFrames(700), seekable: true) == 700)
        // RF64 with a ds64 chunk saying 400 bytes (100 frames): true in a file, a guess on a pipe.
        var ds64: [UInt8] = Array("ds64".utf8) + [28, 0, 0, 0] + [UInt8](repeating: 0, count: 28)
        ds64[16] = 0x90
        ds64[17] = 0x01
        let fmtAndData = Array(soxPipeHeader[12...])
        let rf64 = Array("RF64".utf8) + [0xFF, 0xFF, 0xFF, 0xFF] + Array("WAVE".utf8) + ds64
            + withDataSize(fmtAndData, 0xFFFF_FFFF) + countingFrames(700)
        #expect(try readFrames(rf64, seekable: true) == 100)
        #expect(try readFrames(rf64, seekable: false) == 700)
    }
}
