import EarmarkKit
import EarmarkServer
import EarmarkTestSupport
import Foundation
import Testing

/// The curl examples of README.md's "Serve" section, run against a real server over the six reference tracks (the
/// demo catalog of tools/demo.sh), so they cannot go stale.
///
/// Syntax, as the README says: each ```sh block of the section that calls curl runs as one bash script (in order,
/// one server for all, so a write shows in later blocks); the `# ` lines right under a command are its output
/// (standard output and error), matched with ``OutputPattern`` (`...` is any text; a line of just `...`, any
/// lines); a command with no such lines is run but its output not compared; a blank line ends them, so a `# `
/// line after a blank line is an ordinary comment. Every command must exit 0. `localhost:8080` is the test
/// server, `~/.cache/earmark-test-audio` the test audio, and `write.token` holds the server's write token.
@Suite struct ReadmeServeTests {
    struct Step: Sendable {
        var command: String
        var expected: [String]
        var line: Int
    }

    /// The ```sh blocks with curl between `## Serve` and the next `## ` heading.
    static func blocks(_ text: String) -> [[Step]] {
        var blocks: [[Step]] = []
        var inSection = false, collecting = false, continuing = false
        var fence: String?   // the info string of the open fence
        var steps: [Step] = []
        for (i, raw) in text.components(separatedBy: "\n").enumerated() {
            let line = raw.replacingOccurrences(of: #"\s+$"#, with: "", options: .regularExpression)
            if fence == nil, line.hasPrefix("## ") { inSection = line == "## Serve" }
            guard inSection else { continue }
            if line.hasPrefix("```") {
                if let open = fence {
                    if open == "sh", steps.contains(where: { $0.command.contains("curl ") }) { blocks.append(steps) }
                    steps = []
                    fence = nil
                } else {
                    fence = String(line.dropFirst(3))
                }
                collecting = false
                continuing = false
                continue
            }
            guard fence == "sh" else { continue }
            if continuing, var last = steps.popLast() {
                last.command += "\n" + line
                continuing = line.hasSuffix("\\")
                steps.append(last)
            } else if line.trimmingCharacters(in: .whitespaces).isEmpty {
                collecting = false
            } else if line.hasPrefix("#") {
                guard collecting, var last = steps.popLast() else { continue }
                last.expected.append(line == "#" ? "" : String(line.dropFirst(2)))
                steps.append(last)
            } else {
                steps.append(Step(command: line, expected: [], line: i + 1))
                collecting = true
                continuing = line.hasSuffix("\\")
            }
        }
        return blocks
    }

    @Test func curlExamplesAnswerAsShown() async throws {
        let readme = try String(contentsOf: TestPaths.repositoryRoot.appendingPathComponent("README.md"), encoding: .utf8)
        let blocks = Self.blocks(readme)
        #expect(blocks.count >= 3)
        let commands = blocks.joined().map(\.command).joined(separator: "\n")
        for endpoint in ["/healthz", "/readyz", "/v1/match", "/v1/tracks?", "/v1/tracks/3", "/v1/catalog", "/v1/catalog/export",
                         "/timeline.svg", "/metrics", "-X PATCH", "-X DELETE", "/v1/listen", "/v1/catalog/import"] {
            #expect(commands.contains(endpoint), "README.md's Serve section has no curl example of \(endpoint)")
        }

        let audio = try await ReferenceCatalog.shared.value().audio
        let folder = try TemporaryDirectory("readme-serve")
        let catalog = folder.path("demo.earcat")
        let tracks = try await Fixtures.index(audio.reference, into: catalog)
        #expect(tracks.first { $0.id == 3 }?.title == "pingus-4", "the README's track 3 is pingus-4, as in the demo catalog")
        let token = "readme-0123456789abcdef"
        let work = try TemporaryDirectory("readme-serve-work")
        try Data((token + "\n").utf8).write(to: work.file("write.token"))
        try await TestServer.with(catalog: catalog, configure: {
            $0.writeToken = token
            $0.maxBodyBytes = ServerConfiguration(catalogPath: catalog).maxBodyBytes   // the default, as the README's server
        }) { server in
            for steps in blocks {
                let port = server.port
                let results = try await HTTPTestClient.onDispatchThread { try Self.run(steps, in: work, port: port, audio: audio.root.path) }
                for (step, (output, status)) in zip(steps, results) {
                    let place = "README.md:\(step.line): \(step.command)"
                    #expect(status == 0, "\(place)\nexited \(status):\n\(output.joined(separator: "\n"))")
                    if !step.expected.isEmpty {
                        #expect(OutputPattern.matches(step.expected, output),
                                "\(place)\n--- README shows ---\n\(step.expected.joined(separator: "\n"))\n--- printed ---\n\(output.joined(separator: "\n"))")
                    }
                }
            }
        }
    }

    /// Runs one block's commands in one shell in `folder`; each step's output lines and exit status.
    static func run(_ steps: [Step], in folder: TemporaryDirectory, port: Int, audio: String) throws -> [([String], Int32)] {
        let commands = steps.map {
            $0.command.replacingOccurrences(of: "localhost:8080", with: "127.0.0.1:\(port)")
                .replacingOccurrences(of: "~/.cache/earmark-test-audio", with: ShellSteps.quoted(audio))
        }
        return try ShellSteps.run(commands, in: folder.path, environment: ["LC_ALL": "C.UTF-8"], timeout: 300)
            .map { (ShellSteps.Result.lines($0.text), $0.status) }
    }
}
