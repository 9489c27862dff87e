import EarmarkTestSupport
import Foundation
import Testing

@Suite("earmark CLI: what match prints")
struct MatchTextTests {
    /// `match` on a clip of `stem` at `offset` s changed by sox `effect` (empty: unchanged); the one output line.
    func matchLine(_ f: CLIFixture, _ stem: String, at offset: Double, effect: [String]) throws -> String {
        let clip = try f.clip(stem, at: offset)
        var path = clip.path
        if !effect.isEmpty {
            path = f.dir.path("fx-\(UUID().uuidString.prefix(6)).wav")
            try Run.sox([clip.path, path] + effect)
        }
        let out = try EarmarkCLI.run(["match", "--catalog", f.catalog, path])
        #expect(out.status == 0, "\(out)")
        return out.stdoutText
    }

    @Test("a pitch shift prints as pitch (with semitones), a tempo change as tempo, a speed change as speed, none as nothing",
          arguments: [("pitch 100", "pitch +"), ("tempo 1.06", "tempo +"), ("speed 1.05", "speed +"), ("", "")])
    func skews(effect: String, expected: String) async throws {
        let f = try await CLIFixture.shared.value()
        let line = try matchLine(f, "pingus-4", at: 40, effect: effect.split(separator: " ").map(String.init))
        #expect(line.contains("pingus-4"), "\(line)")
        let kinds = ["pitch +", "tempo +", "speed +"].filter { line.contains($0) }
        #expect(kinds == (expected.isEmpty ? [] : [expected]), "\(line)")
        if expected == "pitch +" {
            // sox pitch 100 is one semitone up; the measured factor is within a fifth of a semitone of it.
            let semitones = line.range(of: #"\(\+[0-9.]+ semitones\)"#, options: .regularExpression)
                .flatMap { Double(line[$0].dropFirst(2).prefix { $0 != " " }) }
            #expect(semitones.map { abs($0 - 1) <= 0.2 } == true, "\(line)")
        }
    }

    @Test("a recording longer than a minute prints every track heard, in order of time, each with its stretch")
    func longRecording() async throws {
        let f = try await CLIFixture.shared.value()
        let tag = UUID().uuidString.prefix(6)
        let a = f.dir.path("la-\(tag).wav"), b = f.dir.path("lb-\(tag).wav"), both = f.dir.path("long-\(tag).wav")
        try Run.sox([try f.audio.reference("pingus-4").path, "-r", "44100", "-c", "1", a, "trim", "20", "40"])
        try Run.sox([try f.audio.reference("sorcerer").path, "-r", "44100", "-c", "1", b, "trim", "5", "40"])
        try Run.sox([a, b, both])
        let out = try EarmarkCLI.run(["match", "--catalog", f.catalog, both])
        #expect(out.status == 0, "\(out)")
        let lines = out.stdoutText.split(separator: "\n").map(String.init)
        #expect(lines.count == 2, "\(out.stdoutText)")
        #expect(lines.first?.contains("pingus-4  0:2") == true, "\(out.stdoutText)")
        #expect(lines.last?.contains("sorcerer  0:0") == true && lines.last?.hasPrefix("    also:") == true, "\(out.stdoutText)")
    }

    @Test("a clip holding two tracks prints each with the stretch of it that was heard, and what decided")
    func twoTracks() async throws {
        let f = try await CLIFixture.shared.value()
        let a = try f.clip("pingus-3", at: 30, seconds: 6), b = try f.clip("sorcerer", at: 50, seconds: 6)
        let tag = UUID().uuidString.prefix(6)
        let both = f.dir.path("two-\(tag).wav"), a1 = f.dir.path("a-\(tag).wav"), b1 = f.dir.path("b-\(tag).wav")
        try Run.sox([a.path, "-r", "44100", "-c", "1", a1])
        try Run.sox([b.path, "-r", "44100", "-c", "1", b1])
        try Run.sox([a1, b1, both])
        let out = try EarmarkCLI.run(["match", "--catalog", f.catalog, both])
        #expect(out.status == 0, "\(out)")
        let text = out.stdoutText
        // pingus-3 from 0:30 for the clip's first 6 s; sorcerer from 0:50 for its last 6 s.
        let p3 = text.split(separator: "\n").first { $0.contains("pingus-3") }.map(String.init) ?? ""
        let so = text.split(separator: "\n").first { $0.contains("sorcerer") }.map(String.init) ?? ""
        #expect(p3.contains("0:30."), "\(text)")
        #expect(so.contains("0:50."), "\(text)")
        #expect(!text.contains("-0:"), "no offset before a track's start: \(text)")
        #expect(text.contains("peaks verified") && text.contains("decades"), "\(text)")
    }
}
