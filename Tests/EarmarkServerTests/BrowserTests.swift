import EarmarkKit
import EarmarkTestSupport
import Foundation
import Testing

/// The page of `earmark serve` in headless Chromium (tools/browser-test.py): a picked file is identified (and its
/// track's timeline shown with the matched stretch highlighted), and
/// Listen, with a fake microphone playing a catalog track, shows that track within 10 s. tools/setup.sh installs
/// chromium and python3-websocket, so CI runs it; elsewhere it is skipped when they are missing.
@Suite struct BrowserTests {
    static let python = "/usr/bin/python3"
    static let available = FileManager.default.isExecutableFile(atPath: "/usr/bin/chromium")
        && FileManager.default.fileExists(atPath: "/usr/lib/python3/dist-packages/websocket/__init__.py")

    @Test(.enabled(if: available, "needs Debian's chromium and python3-websocket (bash tools/setup.sh installs them)"))
    func pageIdentifiesAFileAndListens() async throws {
        let catalog = try await ReferenceCatalog.shared.value()
        let folder = try TemporaryDirectory("browser")
        let microphone = folder.file("microphone.wav"), clip = folder.file("clip.wav")
        try Fixtures.cut(try catalog.audio.reference("pingus-4"), start: 30, seconds: 40, to: microphone)
        try Fixtures.cut(try catalog.audio.reference("pingus-4"), start: 50, seconds: 8, to: clip)
        let earmark = try EarmarkCLI.executable()
        let script = TestPaths.repositoryRoot.appendingPathComponent("tools/browser-test.py").path
        let output = try await HTTPTestClient.onDispatchThread {
            try Run.process(Self.python, [script, "--earmark", earmark, "--catalog", catalog.path, "--listen-wav", microphone.path,
                                          "--file", clip.path, "--expect", "pingus-4", "--screenshot", folder.path("page.png")],
                            timeout: 240)
        }
        #expect(output.status == 0, "\(output)")
        #expect(output.stdoutText.contains("listen: the page shows 'pingus-4'"), "\(output)")
        #expect(output.stdoutText.contains("file: the page shows 'pingus-4'"), "\(output)")
        #expect(output.stdoutText.contains("track: the page shows the timeline of 'pingus-4' with the matched stretch highlighted"),
                "\(output)")
    }
}
