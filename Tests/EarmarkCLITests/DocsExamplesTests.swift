import EarmarkTestSupport
import Foundation
import Testing

// The examples in README.md and docs/*.md are run here, so they cannot go stale.
//
// Syntax (README.md's "Examples are tested" section says the same for readers):
//
//   ```console
//   $ sox ~/.cache/earmark-test-audio/reference/pingus-4.flac clip.wav trim 40 10
//   $ earmark match clip.wav --catalog catalogs/demo.earcat
//   clip.wav: pingus-4  at 0:40.00 (offset 40.00 s), confidence 1.00, score ≈252±10 (runner-up 5), clip 0.0–10.0 s (clip -12.4 LUFS)
//   $ echo $?
//   0
//   ```
//
// - Only ```console blocks run. A line starting with `$ ` is a command (a trailing `\` continues it on the next
//   line); the lines after it, up to the next command, are its expected output: standard output and standard
//   error together (`2>&1`). No lines means no output.
// - A block runs as one bash script in a fresh folder holding `catalogs/demo.earcat`, the catalog
//   `bash tools/demo.sh` builds (the six reference tracks of `~/.cache/earmark-test-audio/reference`), with
//   `earmark` on PATH, `$EARMARK_MODEL` set to the model `tools/fetch-model.sh` makes, and `$EARMARK_CATALOG`
//   pointing nowhere. Commands must start with one of ``DocsHarness/allowedPrograms``.
// - A command that exits non-zero fails the example unless the next command is `echo $?` showing its status.
// - Patterns in expected output: a line of just `...` matches any number of lines (also none); `...` inside
//   a line matches any text; `≈12.3` matches a number within one unit of its last digit (12.2…12.4), `≈12.3±0.5`
//   within the tolerance given. Everything else must match exactly (trailing spaces ignored).
// - Placeholders: in commands `~/.cache/earmark-test-audio` is the test audio folder (`$EARMARK_TEST_AUDIO`
//   when set); in output, that folder's absolute path reads `~/.cache/earmark-test-audio`, and the block's
//   own folder reads `$PWD`.

/// One ```console block of a Markdown file.
struct DocExample: Sendable, CustomTestStringConvertible {
    struct Step: Sendable {
        var command: String
        var expected: [String]
        var line: Int
    }
    var file: String
    var line: Int
    var steps: [Step]
    var testDescription: String { "\(file):\(line)" }
}

enum DocsHarness {
    /// First words a documented command may start with.
    static let allowedPrograms: Set<String> = ["earmark", "sox", "ffmpeg", "echo", "printf", "head", "tail", "cp", "rm",
                                               "sqlite3", "dd"]

    /// README.md and docs/*.md, relative to the repository root.
    static var documentFiles: [String] {
        let root = TestPaths.repositoryRoot
        let docs = (try? FileManager.default.contentsOfDirectory(atPath: root.appendingPathComponent("docs").path)) ?? []
        return ["README.md"] + docs.filter { $0.hasSuffix(".md") }.sorted().map { "docs/\($0)" }
    }

    static func text(_ file: String) -> String {
        (try? String(contentsOf: TestPaths.repositoryRoot.appendingPathComponent(file), encoding: .utf8)) ?? ""
    }

    /// Every ```console block of every document.
    static let examples: [DocExample] = documentFiles.flatMap { parse(text($0), file: $0) }

    static func parse(_ text: String, file: String) -> [DocExample] {
        var out: [DocExample] = []
        var current: DocExample?
        var inOtherFence = false
        var continuing = false
        for (i, raw) in text.components(separatedBy: "\n").enumerated() {
            let line = raw.trimmingTrailingWhitespace
            if current == nil {
                if line.hasPrefix("```") {
                    if inOtherFence { inOtherFence = false } else if line == "```console" {
                        current = DocExample(file: file, line: i + 1, steps: [])
                    } else { inOtherFence = true }
                }
                continue
            }
            if line == "```" {
                out.append(current!)
                current = nil
                continue
            }
            if continuing, var last = current!.steps.popLast() {
                last.command += "\n" + line
                continuing = line.hasSuffix("\\")
                current!.steps.append(last)
            } else if line.hasPrefix("$ ") {
                current!.steps.append(.init(command: String(line.dropFirst(2)), expected: [], line: i + 1))
                continuing = line.hasSuffix("\\")
            } else if current!.steps.isEmpty {
                // Output before any command: kept as a step with no command, reported by the test.
                current!.steps.append(.init(command: "", expected: [line], line: i + 1))
            } else {
                current!.steps[current!.steps.count - 1].expected.append(line)
            }
        }
        return out
    }

    // MARK: Running

    /// The folder every example starts from: `catalogs/demo.earcat` as tools/demo.sh builds it.
    struct Fixture: Sendable {
        let folder: TemporaryDirectory
        let catalog: String
        let audio: String
        let model: String
        let binFolder: String
    }

    static let fixture = Shared<Fixture> {
        let audio = try TestAudio.set()
        let folder = try TemporaryDirectory("docs-fixture")
        let catalog = folder.path("demo.earcat")
        // The same command as tools/demo.sh.
        let add = try EarmarkCLI.run(["catalog", "add", audio.root.appendingPathComponent("reference").path, "--catalog", catalog])
        guard add.status == 0 else { throw TestSupportError("building the docs' demo catalog failed: \(add)") }
        let script = TestPaths.repositoryRoot.appendingPathComponent("tools/fetch-model.sh").path
        let model = try Run.process("/bin/bash", [script], timeout: 1200)
        guard model.status == 0 else { throw TestSupportError("tools/fetch-model.sh failed: \(model)") }
        let modelPath = model.stdoutText.split(separator: "\n").last.map(String.init) ?? ""
        return Fixture(folder: folder, catalog: catalog, audio: audio.root.path, model: modelPath,
                       binFolder: URL(fileURLWithPath: try EarmarkCLI.executable()).deletingLastPathComponent().path)
    }

    /// What one step printed and how it exited.
    struct StepResult {
        var output: [String]
        var status: Int32
    }

    /// Runs an example's commands as one bash script in a fresh folder; returns each step's output and status.
    static func run(_ example: DocExample, fixture f: Fixture) throws -> [StepResult] {
        let work = try TemporaryDirectory("docs-example")
        try FileManager.default.createDirectory(at: work.file("catalogs"), withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: f.catalog, toPath: work.path("catalogs/demo.earcat"))
        let commands = example.steps.map { $0.command.replacingOccurrences(of: "~/.cache/earmark-test-audio", with: ShellSteps.quoted(f.audio)) }
        let env: [String: String?] = [
            "PATH": f.binFolder + ":" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"),
            "EARMARK_CATALOG": TestPaths.scratchRoot.appendingPathComponent("no-default-catalog.earcat").path,
            "EARMARK_MODEL": f.model, "EARMARK_BIN": nil, "LC_ALL": "C.UTF-8",
        ]
        let audioForms = [f.audio, (f.audio as NSString).resolvingSymlinksInPath]
        do {
            return try ShellSteps.run(commands, in: work.path, environment: env, timeout: 600).map { result in
                var text = result.text
                for a in Set(audioForms) { text = text.replacingOccurrences(of: a, with: "~/.cache/earmark-test-audio") }
                text = text.replacingOccurrences(of: work.path, with: "$PWD")
                return StepResult(output: ShellSteps.Result.lines(text), status: result.status)
            }
        } catch let e as TestSupportError {
            throw TestSupportError("\(example.testDescription): \(e)")
        }
    }

    /// Problems with an example's outcome: a mismatch, or a failing command whose status the text does not show.
    static func problems(_ example: DocExample, _ results: [StepResult]) -> [String] {
        var out: [String] = []
        for (i, (step, result)) in zip(example.steps, results).enumerated() {
            let place = "\(example.file):\(step.line): $ \(step.command)"
            if !OutputPattern.matches(step.expected, result.output) {
                out.append("\(place)\n--- the document shows ---\n\(step.expected.joined(separator: "\n"))\n--- the command printed ---\n\(result.output.joined(separator: "\n"))")
            }
            let next = example.steps.indices.contains(i + 1) ? example.steps[i + 1].command : nil
            if result.status != 0, next != "echo $?" {
                out.append("\(place)\nexited \(result.status); show it with `$ echo $?` on the next line, or fix the example")
            }
        }
        return out
    }
}


extension String {
    var trimmingTrailingWhitespace: String {
        var s = Substring(self)
        while let last = s.last, last == " " || last == "\t" || last == "\r" { s = s.dropLast() }
        return String(s)
    }
}

@Suite("The examples in README.md and docs/ match what the tool prints")
struct DocsExamplesTests {
    @Test("a ```console example runs and prints what the document shows", arguments: DocsHarness.examples)
    func example(_ example: DocExample) async throws {
        for step in example.steps {
            let first = step.command.split(separator: " ").first.map(String.init) ?? ""
            #expect(step.command == "echo $?" || DocsHarness.allowedPrograms.contains(first),
                    "\(example.file):\(step.line): `\(step.command)` is not a command the harness runs (output before the first `$ `, or a program outside \(DocsHarness.allowedPrograms.sorted()))")
        }
        let fixture = try await DocsHarness.fixture.value()
        let results = try DocsHarness.run(example, fixture: fixture)
        for problem in DocsHarness.problems(example, results) { Issue.record("\(problem)") }
    }

    @Test("README.md and every page of docs/ hold examples the harness runs")
    func examplesExist() {
        let files = Set(DocsHarness.examples.map(\.file))
        #expect(files.contains("README.md"))
        for page in ["docs/matching.md", "docs/signature-format.md", "docs/catalog.md", "docs/analysis.md", "docs/classification.md"] {
            #expect(files.contains(page), "\(page) has no ```console example")
        }
    }

    @Test("the output patterns: exact lines, ... for lines and text, ≈ for numbers")
    func patterns() {
        #expect(OutputPattern.matches(["a", "b"], ["a", "b"]))
        #expect(!OutputPattern.matches(["a", "b"], ["a", "c"]))
        #expect(!OutputPattern.matches(["a"], ["a", "b"]))
        #expect(OutputPattern.matches(["a", "...", "d"], ["a", "b", "c", "d"]))
        #expect(OutputPattern.matches(["a", "...", "d"], ["a", "d"]))
        #expect(OutputPattern.matches([], []))
        #expect(!OutputPattern.matches([], ["x"]))
        #expect(OutputPattern.lineMatches("in ... s (...× real-time)", "in 6.3 s (83× real-time)"))
        #expect(OutputPattern.lineMatches("loudness ≈-13.5 LUFS", "loudness -13.4 LUFS"))
        #expect(!OutputPattern.lineMatches("loudness ≈-13.5 LUFS", "loudness -13.3 LUFS"))
        #expect(OutputPattern.lineMatches("score ≈252±10 (runner-up 5)", "score 244 (runner-up 5)"))
        #expect(!OutputPattern.lineMatches("score ≈252±10 (runner-up 5)", "score 240 (runner-up 5)"))
        #expect(!OutputPattern.lineMatches("a (b) [c]", "a b c"))
    }

    @Test("a stale example fails: the harness compares what the tool prints with the document")
    func staleExampleFails() async throws {
        let stale = DocsHarness.parse("""
            ```console
            $ earmark catalog list --catalog catalogs/demo.earcat
            ID  TITLE       ARTIST  ALBUM  DURATION
             1  goin_march                     1:41
            ...
            $ earmark catalog info 99 --catalog catalogs/demo.earcat
            ```
            """, file: "stale.md")
        let fixture = try await DocsHarness.fixture.value()
        let problems = DocsHarness.problems(stale[0], try DocsHarness.run(stale[0], fixture: fixture))
        #expect(problems.count == 3, "\(problems)")   // a wrong duration; an error printed; an exit status not shown
    }

    /// `earmark catalog add`, `earmark match`, … wherever code in the documents names one.
    static let subcommands: [String] = {
        let re = try! NSRegularExpression(pattern: #"(?<![\w/.-])earmark ((?:catalog )?[a-z][a-z-]*)"#)
        var found = Set<String>()
        for file in DocsHarness.documentFiles {
            for code in codeSpans(DocsHarness.text(file)) {
                let ns = code as NSString
                for m in re.matches(in: code, range: NSRange(location: 0, length: ns.length)) {
                    found.insert(ns.substring(with: m.range(at: 1)))
                }
            }
        }
        return found.sorted()
    }()

    /// Fenced blocks and `inline code` of a Markdown text.
    static func codeSpans(_ text: String) -> [String] {
        var spans: [String] = []
        var fence: [String]?
        for line in text.components(separatedBy: "\n") {
            if line.hasPrefix("```") {
                if let f = fence { spans.append(f.joined(separator: "\n")); fence = nil } else { fence = [] }
                continue
            }
            if fence != nil { fence!.append(line); continue }
            let parts = line.components(separatedBy: "`")
            spans += stride(from: 1, to: parts.count, by: 2).map { parts[$0] }
        }
        return spans
    }

    @Test("every `earmark SUBCOMMAND` the documents name exists (`--help` exits 0 and shows its usage)")
    func subcommandsExist() throws {
        #expect(Self.subcommands.count >= 10, "\(Self.subcommands)")
        for sub in Self.subcommands {
            let out = try EarmarkCLI.run(sub.split(separator: " ").map(String.init) + ["--help"])
            // `earmark catalog nosuch --help` exits 0 with the catalog group's help, so the usage line must name it.
            #expect(out.status == 0 && out.stdoutText.contains("USAGE: earmark \(sub)"),
                    "`earmark \(sub)` is named in the documents but is not a subcommand: \(out)")
        }
    }

    @Test("every relative link in README.md, docs/ and catalogs/README.md points to an existing file (and heading)")
    func relativeLinks() throws {
        let root = TestPaths.repositoryRoot
        let link = try NSRegularExpression(pattern: #"\]\(([^)\s]+)\)"#)
        var checked = 0
        for file in DocsHarness.documentFiles + ["catalogs/README.md"] {
            let text = DocsHarness.text(file)
            #expect(!text.isEmpty, "\(file) is missing or empty")
            let ns = text as NSString
            for m in link.matches(in: text, range: NSRange(location: 0, length: ns.length)) {
                let target = ns.substring(with: m.range(at: 1))
                if target.range(of: #"^[a-zA-Z][a-zA-Z0-9+.-]*:"#, options: .regularExpression) != nil { continue }  // https:, mailto:
                checked += 1
                let parts = target.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
                let base = (file as NSString).deletingLastPathComponent
                let path = parts[0].isEmpty ? file : ((base as NSString).appendingPathComponent(parts[0]) as NSString).standardizingPath
                let url = root.appendingPathComponent(path)
                #expect(FileManager.default.fileExists(atPath: url.path), "\(file): link to \(target): \(path) does not exist")
                if parts.count == 2, path.hasSuffix(".md") {
                    let anchors = Self.headingAnchors(DocsHarness.text(path))
                    #expect(anchors.contains(parts[1]), "\(file): link to \(target): no heading #\(parts[1]) in \(path)")
                }
            }
        }
        #expect(checked > 5)
    }

    /// GitHub's anchors for a Markdown text's headings: lower case, spaces to hyphens, punctuation dropped.
    static func headingAnchors(_ text: String) -> Set<String> {
        var out = Set<String>()
        var inFence = false
        for line in text.components(separatedBy: "\n") {
            if line.hasPrefix("```") { inFence.toggle(); continue }
            guard !inFence, line.hasPrefix("#") else { continue }
            let title = line.drop { $0 == "#" }.trimmingCharacters(in: .whitespaces)
            var anchor = ""
            for ch in title.lowercased() {
                if ch.isLetter || ch.isNumber || ch == "-" || ch == "_" { anchor.append(ch) } else if ch == " " { anchor.append("-") }
            }
            out.insert(anchor)
        }
        return out
    }
}
