import EarmarkTestSupport
import Foundation
import Testing

// `earmark analyze FILE --svg OUT` and `earmark catalog info ID --svg OUT`: the SVG written is read back with
// XMLParser; exit codes as every command's (0 done, 2 an error, 64 bad usage), and nothing written on failure.

@Suite("earmark CLI: timelines as SVG")
struct TimelineCLITests {
    static let allLanes = ["loudness", "beats", "sections", "key", "instruments", "sounds", "speech"]

    @Test("catalog info --svg draws the stored analysis, an escaped title, and no lanes for a track stored without it")
    func catalogInfo() throws {
        let audio = try TestAudio.set()
        let env: [String: String?] = ["EARMARK_MODEL": try TestModel.set().model.path]
        let dir = try TemporaryDirectory("cli-timeline")
        let catalog = dir.path("t.earcat")
        let analysed = try EarmarkCLI.run(["catalog", "add", "--catalog", catalog, "--analyze", try audio.reference("pingus-4").path],
                                          environment: env, timeout: 600)
        #expect(analysed.status == 0, "\(analysed)")
        let title = "Rock <&\"> 'n' roll"
        let plain = try EarmarkCLI.run(["catalog", "add", "--catalog", catalog, "--title", title, try audio.reference("pingus-3").path])
        #expect(plain.status == 0, "\(plain)")

        let out = try EarmarkCLI.run(["catalog", "info", "1", "--catalog", catalog, "--svg", dir.path("one.svg")])
        #expect(out.status == 0, "\(out)")
        #expect(out.stdoutText.contains("timeline:   " + dir.path("one.svg")), "\(out)")
        let one = try SVGDocument(contentsOf: dir.path("one.svg"))
        #expect(one.lanes == Self.allLanes)
        #expect(one.all("text", ["class": "title"]).first?.text == "pingus-4")

        let bare = try EarmarkCLI.run(["catalog", "info", "2", "--catalog", catalog, "--json", "--svg", dir.path("two.svg")])
        #expect(bare.status == 0, "\(bare)")
        #expect((try JSONSerialization.jsonObject(with: bare.stdout) as? [String: Any])?["title"] as? String == title)
        let two = try SVGDocument(contentsOf: dir.path("two.svg"))
        #expect(two.lanes.isEmpty)
        #expect(two.all("text", ["class": "title"]).first?.text == title)
        #expect(two.all("text", ["class": "empty"]).first?.text.hasPrefix("No analysis stored for this track") == true)

        let missing = try EarmarkCLI.run(["catalog", "info", "99", "--catalog", catalog, "--svg", dir.path("none.svg")])
        #expect(missing.status == 2)
        #expect(!FileManager.default.fileExists(atPath: dir.path("none.svg")))
        let unwritable = try EarmarkCLI.run(["catalog", "info", "1", "--catalog", catalog, "--svg", dir.path("no/such/folder/x.svg")])
        #expect(unwritable.status == 2)
        #expect(unwritable.stderrText.contains("no/such/folder/x.svg: cannot write the timeline"), "\(unwritable)")
        let empty = try EarmarkCLI.run(["catalog", "info", "1", "--catalog", catalog, "--svg", ""])
        #expect(empty.status == 64, "\(empty)")
    }

    @Test("analyze --svg draws the dimensions asked for; several files, a missing file or an unwritable path are errors")
    func analyze() throws {
        let audio = try TestAudio.set()
        let dir = try TemporaryDirectory("cli-timeline-analyze")
        let clip = dir.file("clip.wav")
        try Fixtures.cut(try audio.reference("pingus-4"), start: 20, seconds: 20, to: clip)

        let out = try EarmarkCLI.run(["analyze", clip.path, "--only", "loudness,key,rhythm", "--svg", dir.path("clip.svg")])
        #expect(out.status == 0, "\(out)")
        #expect(out.stdoutText.hasSuffix("  timeline \(dir.path("clip.svg"))\n"), "\(out)")
        let doc = try SVGDocument(contentsOf: dir.path("clip.svg"))
        #expect(doc.lanes == ["loudness", "beats", "key"])
        #expect(doc.all("text", ["class": "title"]).first?.text == "clip.wav")
        #expect(abs((doc.root?.number("data-duration") ?? 0) - 20) < 0.05)

        // --json prints the report as before; the picture is written beside it.
        let json = try EarmarkCLI.run(["analyze", clip.path, "--only", "loudness", "--json", "--svg", dir.path("json.svg")])
        #expect(json.status == 0, "\(json)")
        #expect((try JSONSerialization.jsonObject(with: json.stdout) as? [String: Any])?["path"] as? String == clip.path)
        #expect(try SVGDocument(contentsOf: dir.path("json.svg")).lanes == ["loudness"])

        let two = try EarmarkCLI.run(["analyze", clip.path, clip.path, "--svg", dir.path("two.svg")])
        #expect(two.status == 64, "\(two)")
        #expect(two.stderrText.contains("--svg draws one file's timeline"), "\(two)")
        let missing = try EarmarkCLI.run(["analyze", dir.path("missing.wav"), "--only", "loudness", "--svg", dir.path("missing.svg")])
        #expect(missing.status == 2, "\(missing)")
        #expect(!FileManager.default.fileExists(atPath: dir.path("missing.svg")))
        let unwritable = try EarmarkCLI.run(["analyze", clip.path, "--only", "loudness", "--svg", dir.path("no/folder/x.svg")])
        #expect(unwritable.status == 2, "\(unwritable)")
        #expect(unwritable.stderrText.contains("cannot write the timeline"), "\(unwritable)")
    }
}
