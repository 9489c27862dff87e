import COpus
import Foundation

/// Decodes Ogg Opus files (RFC 7845) with libogg and libopus directly, for mono and stereo streams
/// (channel mapping family 0); other Opus files go to libsndfile.
///
/// libsndfile decodes Opus through libopus's multistream API, which recomputes the decoder size on
/// every packet and with it queries the CPU (`cpuid`): under a hypervisor that trap cost more than
/// the decoding itself. The single-stream decoder used here skips it. The output is what libsndfile
/// gives: the header's sample rate when Opus decodes at it (8, 12, 16, 24 or 48 kHz), else 48 kHz;
/// pre-skip dropped, the end trimmed to the last granule position, the header's output gain applied.
final class OggOpusSource: FileSource {
    let kind = AudioFileReader.Decoder.libopus
    let sampleRate: Double
    let channels: Int
    let announcedFrames: Int?
    private let path: String
    private let chunkFrames: Int
    private let file: UnsafeMutablePointer<FILE>
    private let sync = UnsafeMutablePointer<ogg_sync_state>.allocate(capacity: 1)
    private let stream = UnsafeMutablePointer<ogg_stream_state>.allocate(capacity: 1)
    private var decoder: OpaquePointer
    private var serial: Int32
    /// Header packets of the current logical stream still to skip: OpusTags (OpusHead is read on opening).
    private var headerPackets = 1
    /// Output frames still to drop at the start of the current logical stream.
    private var preSkipLeft: Int
    /// Frames decoded in the current logical stream, in 48 kHz units (granule positions count those).
    private var granuleDecoded: Int64 = 0
    private var streamEnded = false
    private var pcm: [Float]
    private var pending: [Float] = []
    private var framesOut = 0
    private var atEnd = false

    /// The stream's identification header.
    struct Head {
        var channels: Int
        var preSkip: Int
        var inputRate: Int
        var gain: Int16
        var family: Int

        init?(_ p: UnsafeBufferPointer<UInt8>) {
            guard p.count >= 19, Array(p[0..<8]) == Array("OpusHead".utf8), p[8] >> 4 == 0 else { return nil }
            channels = Int(p[9])
            preSkip = Int(p[10]) | Int(p[11]) << 8
            inputRate = Int(p[12]) | Int(p[13]) << 8 | Int(p[14]) << 16 | Int(p[15]) << 24
            gain = Int16(bitPattern: UInt16(p[16]) | UInt16(p[17]) << 8)
            family = Int(p[18])
        }
    }

    /// Opens `path` when it is an Ogg Opus file this decoder takes; nil for anything else (left to libsndfile).
    static func open(path: String, chunkFrames: Int) throws -> OggOpusSource? {
        guard let f = fopen(path, "rb") else { return nil }
        var magic = [UInt8](repeating: 0, count: 4)
        let n = fread(&magic, 1, 4, f)
        guard n == 4, magic == Array("OggS".utf8) else { fclose(f); return nil }
        rewind(f)
        return try OggOpusSource(path: path, file: f, chunkFrames: chunkFrames)
    }

    /// Reads the first page; nil (file closed) when its stream is not Opus with mapping family 0.
    private init?(path: String, file: UnsafeMutablePointer<FILE>, chunkFrames: Int) throws {
        self.path = path
        self.file = file
        self.chunkFrames = chunkFrames
        ogg_sync_init(sync)
        var page = ogg_page()
        var packet = ogg_packet()
        var head: Head?
        var firstSerial: Int32 = 0
        // The identification header is alone on the first page of its stream (RFC 7845 §3).
        if OggOpusSource.nextPage(sync, file, &page) {
            firstSerial = ogg_page_serialno(&page)
            ogg_stream_init(stream, firstSerial)
            if ogg_stream_pagein(stream, &page) == 0, ogg_stream_packetout(stream, &packet) == 1 {
                head = Head(UnsafeBufferPointer(start: packet.packet, count: Int(packet.bytes)))
            }
        } else {
            ogg_stream_init(stream, 0)
        }
        guard let head, head.family == 0, (1...2).contains(head.channels) else {
            OggOpusSource.release(stream, sync, file)
            return nil
        }
        serial = firstSerial
        channels = head.channels
        let rate = [8_000, 12_000, 16_000, 24_000, 48_000].contains(head.inputRate) ? head.inputRate : 48_000
        sampleRate = Double(rate)
        do {
            decoder = try OggOpusSource.makeDecoder(rate: rate, head: head, path: path)
        } catch {
            OggOpusSource.release(stream, sync, file)
            throw error
        }
        preSkipLeft = head.preSkip * rate / 48_000
        // 120 ms is the longest Opus packet.
        pcm = [Float](repeating: 0, count: rate * 120 / 1000 * head.channels)
        announcedFrames = OggOpusSource.lastGranule(file, serial: firstSerial).map { max(0, Int($0) - head.preSkip) * rate / 48_000 }
    }

    deinit {
        opus_decoder_destroy(decoder)
        OggOpusSource.release(stream, sync, file)
    }

    /// A decoder for one logical stream, with its header's output gain.
    private static func makeDecoder(rate: Int, head: Head, path: String) throws -> OpaquePointer {
        var error: Int32 = 0
        guard let d = opus_decoder_create(Int32(rate), Int32(head.channels), &error), error == OPUS_OK else {
            throw AudioError(.corrupt, "cannot start the Opus decoder: \(String(cString: opus_strerror(error)))", path: path)
        }
        _ = earmark_opus_set_gain(d, Int32(head.gain))
        return d
    }

    private static func release(_ stream: UnsafeMutablePointer<ogg_stream_state>, _ sync: UnsafeMutablePointer<ogg_sync_state>,
                                _ file: UnsafeMutablePointer<FILE>) {
        ogg_stream_clear(stream)
        ogg_sync_clear(sync)
        stream.deallocate()
        sync.deallocate()
        fclose(file)
    }

    /// The next page of the physical stream, reading more of the file as needed; false at its end.
    private static func nextPage(_ sync: UnsafeMutablePointer<ogg_sync_state>, _ file: UnsafeMutablePointer<FILE>,
                                 _ page: inout ogg_page) -> Bool {
        while true {
            // -1: bytes skipped to regain sync (damage); the next call continues from there.
            if ogg_sync_pageout(sync, &page) == 1 { return true }
            guard let buffer = ogg_sync_buffer(sync, 65_536) else { return false }
            let n = fread(buffer, 1, 65_536, file)
            if n == 0 { return false }
            ogg_sync_wrote(sync, n)
        }
    }

    /// The granule position of the last page of stream `serial` (from the file's last 64 KiB), then rewinds to the data.
    private static func lastGranule(_ file: UnsafeMutablePointer<FILE>, serial: Int32) -> Int64? {
        let here = ftello(file)
        defer { fseeko(file, here, SEEK_SET) }
        guard fseeko(file, 0, SEEK_END) == 0 else { return nil }
        let size = ftello(file)
        let span = min(size, 65_536)
        guard fseeko(file, size - span, SEEK_SET) == 0 else { return nil }
        var bytes = [UInt8](repeating: 0, count: Int(span))
        guard fread(&bytes, 1, Int(span), file) == Int(span) else { return nil }
        var best: Int64?
        var i = 0
        while i + 27 <= bytes.count {
            if bytes[i] == 0x4F, bytes[i + 1] == 0x67, bytes[i + 2] == 0x67, bytes[i + 3] == 0x53, bytes[i + 4] == 0 {
                var granule: Int64 = 0
                for k in 0..<8 { granule |= Int64(bytes[i + 6 + k]) << (8 * k) }
                var s: UInt32 = 0
                for k in 0..<4 { s |= UInt32(bytes[i + 14 + k]) << (8 * k) }
                if Int32(bitPattern: s) == serial, granule >= 0 { best = granule }
            }
            i += 1
        }
        return best
    }

    /// The next audio packet of the current logical stream (header packets skipped); nil at the end of the file.
    private func nextPacket(_ packet: inout ogg_packet) throws -> Bool {
        var page = ogg_page()
        while true {
            let r = ogg_stream_packetout(stream, &packet)
            if r == 1 {
                if headerPackets > 0 {
                    headerPackets -= 1
                    continue
                }
                return true
            }
            // r == -1: a hole in the stream (a page lost to damage); decoding goes on after it.
            if r == -1 { continue }
            guard OggOpusSource.nextPage(sync, file, &page) else { return false }
            let s = ogg_page_serialno(&page)
            if s != serial {
                // A chained stream starts after the previous one ended; pages of other multiplexed streams are skipped.
                guard streamEnded, ogg_page_bos(&page) != 0 else { continue }
                try startChained(page: &page, serial: s)
                continue
            }
            if ogg_page_eos(&page) != 0 { streamEnded = true }
            _ = ogg_stream_pagein(stream, &page)
        }
    }

    /// Switches to the next link of a chained file, which must keep the channel count.
    private func startChained(page: inout ogg_page, serial s: Int32) throws {
        ogg_stream_reset_serialno(stream, s)
        _ = ogg_stream_pagein(stream, &page)
        var packet = ogg_packet()
        guard ogg_stream_packetout(stream, &packet) == 1,
              let head = Head(UnsafeBufferPointer(start: packet.packet, count: Int(packet.bytes))) else {
            throw AudioError(.corrupt, "chained Ogg stream without an Opus header", path: path)
        }
        guard head.family == 0, head.channels == channels else {
            throw AudioError(.unsupportedFormat, "chained Ogg Opus streams change their channel layout", path: path)
        }
        serial = s
        streamEnded = false
        headerPackets = 1
        granuleDecoded = 0
        preSkipLeft = head.preSkip * Int(sampleRate) / 48_000
        let next = try OggOpusSource.makeDecoder(rate: Int(sampleRate), head: head, path: path)
        opus_decoder_destroy(decoder)
        decoder = next
    }

    /// Decodes packets until a chunk is full or the file ends; nil when nothing is left.
    func readInterleaved() throws -> [Float]? {
        var packet = ogg_packet()
        while pending.count < chunkFrames * channels, !atEnd {
            guard try nextPacket(&packet) else {
                atEnd = true
                break
            }
            let maxFrames = pcm.count / channels
            let n = pcm.withUnsafeMutableBufferPointer {
                opus_decode_float(decoder, packet.packet, Int32(packet.bytes), $0.baseAddress!, Int32(maxFrames), 0)
            }
            if n < 0 {
                throw AudioError(.corrupt, "Opus decode error after \(framesOut) frames: \(String(cString: opus_strerror(n)))", path: path)
            }
            var first = 0, last = Int(n)
            granuleDecoded += Int64(n) * 48_000 / Int64(sampleRate)
            // End trimming (RFC 7845 §4.5): the last page's granule position marks the end of the audio.
            if packet.e_o_s != 0, packet.granulepos >= 0, granuleDecoded > packet.granulepos {
                let extra = Int((granuleDecoded - packet.granulepos) * Int64(sampleRate) / 48_000)
                last = max(0, last - extra)
            }
            if preSkipLeft > 0 {
                let drop = min(preSkipLeft, last)
                first = drop
                preSkipLeft -= drop
            }
            if last > first { pending += pcm[(first * channels)..<(last * channels)] }
        }
        guard !pending.isEmpty else { return nil }
        // A chunk is whole packets: it may run past chunkFrames by less than one packet.
        var out: [Float] = []
        out.reserveCapacity(chunkFrames * channels + pcm.count)
        swap(&out, &pending)
        framesOut += out.count / channels
        return out
    }

    func readMono() throws -> [Float]? {
        guard let frames = try readInterleaved() else { return nil }
        return frames.withUnsafeBufferPointer { downmixToMono($0, channels: channels) }
    }
}
