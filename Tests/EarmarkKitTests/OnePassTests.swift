import EarmarkKit
import EarmarkTestSupport
import Foundation
import Testing

@Suite("One decoding pass")
struct OnePassTests {
    @Test("measuring loudness on the way changes neither the signature nor the content digest", arguments: ["pingus-4", "pingus-5"])
    func sameFingerprint(stem: String) async throws {
        let url = try TestAudio.set().reference(stem)
        let plain = try Fingerprinter.fingerprint(path: url.path)
        let measured = try Fingerprinter.fingerprint(path: url.path, analyses: Analyses(loudness: true))
        #expect(measured.contentHash == plain.contentHash)
        #expect(measured.signature == plain.signature)
        #expect(plain.loudness == nil)
        let loudness = try #require(measured.loudness)
        #expect(loudness == (try LoudnessMeter.measure(path: url.path)))
    }

    @Test("a container only ffmpeg reads keeps its usual fingerprint and gets a stereo loudness")
    func ffmpegContainer() async throws {
        let dir = try TemporaryDirectory("onepass")
        let m4a = dir.file("clip.m4a")
        try Run.ffmpeg(["-i", try TestAudio.set().reference("sorcerer").path, "-t", "20", "-c:a", "aac", "-b:a", "128k", m4a.path])
        let plain = try Fingerprinter.fingerprint(path: m4a.path)
        let measured = try Fingerprinter.fingerprint(path: m4a.path, analyses: Analyses(loudness: true))
        #expect(plain.decoder == .ffmpeg)
        #expect(measured.contentHash == plain.contentHash && measured.signature == plain.signature)
        let loudness = try #require(measured.loudness)
        #expect(loudness.channels == 2 && (loudness.integrated ?? 0) < -5 && (loudness.integrated ?? -99) > -40)
    }
}
