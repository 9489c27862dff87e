import EarmarkKit
import EarmarkTestSupport
import Foundation
import Testing

/// Key, rhythm, structure and pace in one pass, told music by the sound classifier (YAMNet).
private func analyze(_ path: String, musicOnly: Bool = true) throws -> FingerprintedFile {
    var analyses = Analyses(key: true, rhythm: true, structure: true, pace: true,
                            sound: try SoundModel(path: try TestModel.set().model.path))
    analyses.musicOnly = musicOnly
    return try Fingerprinter.analyze(path: path, analyses: analyses)
}

@Suite("Music only: the classifier keeps key, rhythm and structure off speech")
struct MusicOnlyTests {
    @Test("real telephone speech gets no key, no beats, no sections, with the reason", arguments: [0, 1])
    func speech(index: Int) throws {
        let url = try TestAudio.set().speech[index]
        let f = try analyze(url.path)
        let music = try #require(f.music)
        #expect(music.method == "classifier" && music.ranges.isEmpty && music.reason == .speech, "\(music)")
        #expect(f.key == nil)
        #expect(f.rhythm?.beats.isEmpty == true && f.rhythm?.bpm == nil && f.rhythm?.reason == .speech)
        #expect(f.structure?.sections.isEmpty == true && f.structure?.reason == .speech)
        #expect(f.pace?.values.isEmpty == true && f.pace?.reason == .speech)
    }

    @Test("speech, then music: the music's range is reported and only it is measured")
    func speechThenMusic() throws {
        let set = try TestAudio.set()
        let dir = try TemporaryDirectory("music-only")
        let speech = dir.file("speech.wav"), music = dir.file("music.wav"), both = dir.file("both.wav")
        let talk = set.speech[1]
        try Fixtures.cut(talk, start: 0, seconds: 30, to: speech, rate: 44_100, channels: 1)
        try Fixtures.cut(try set.reference("pingus-4"), start: 20, seconds: 40, to: music, rate: 44_100, channels: 1)
        try Run.sox([speech.path, music.path, both.path])
        let f = try analyze(both.path), alone = try analyze(music.path)
        let ranges = try #require(f.music?.ranges)
        #expect(ranges.count == 1, "\(ranges)")
        let range = try #require(ranges.first)
        // YAMNet's windows are 0.96 s: the music starts within two of them of the join, and lasts to the end.
        #expect(abs(range.start - 30) < 2 && range.end > 69, "\(range)")
        let beats = try #require(f.rhythm?.beats)
        #expect(!beats.isEmpty && beats.allSatisfy { $0 >= range.start - 0.1 })
        #expect(f.key?.key == alone.key?.key && f.key != nil, "\(String(describing: f.key)) vs \(String(describing: alone.key))")
        let bpm = try #require(f.rhythm?.bpm), aloneBPM = try #require(alone.rhythm?.bpm)
        #expect(abs(bpm / aloneBPM - 1) < 0.02, "\(bpm) vs \(aloneBPM)")
        #expect(f.structure?.sections.allSatisfy { $0.start >= range.start - 0.1 } == true)
        // Over the whole file, as before, the speech got beats too.
        let whole = try analyze(both.path, musicOnly: false)
        #expect(whole.music == nil && (whole.rhythm?.beats.contains { $0 < 25 } ?? false))
    }
}
