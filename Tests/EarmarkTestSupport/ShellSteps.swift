import Foundation

/// Commands run one after another in one bash shell (variables carry over, and `$?` at the start of a command is
/// the previous one's status, so `echo $?` shows it), each one's output (standard output and error together) and
/// exit status kept apart: how the documents' examples are run.
public enum ShellSteps {
    public struct Result: Sendable {
        /// What the command printed, as text.
        public var text: String
        public var status: Int32

        /// `text` as lines, trailing white space and trailing empty lines removed.
        public static func lines(_ text: String) -> [String] {
            var lines = text.components(separatedBy: "\n").map { $0.replacingOccurrences(of: #"[ \t\r]+$"#, with: "", options: .regularExpression) }
            while lines.last == "" { lines.removeLast() }
            return lines
        }
    }

    /// Runs `commands` in `folder` with `environment` added to this process's.
    /// - Throws: ``TestSupportError`` when the shell runs past `timeout` seconds or a command did not run.
    public static func run(_ commands: [String], in folder: String, environment: [String: String?], timeout: Double) throws -> [Result] {
        let results = try TemporaryDirectory("shell-steps")
        var script = "cd \(quoted(folder))\n__s=0\n"
        for (i, command) in commands.enumerated() {
            script += "( exit $__s ); {\n\(command)\n} >\(quoted(results.path("\(i).out"))) 2>&1\n"
            script += "__s=$?; echo $__s >\(quoted(results.path("\(i).status")))\n"
        }
        let out = try Run.process("/bin/bash", ["--noprofile", "--norc", "-c", script], environment: environment, timeout: timeout)
        guard !out.timedOut else { throw TestSupportError("the commands timed out: \(out)") }
        return try commands.indices.map { i in
            guard let status = Int32((try? String(contentsOfFile: results.path("\(i).status"), encoding: .utf8))?
                .trimmingCharacters(in: .whitespacesAndNewlines) ?? "") else {
                throw TestSupportError("command \(i + 1) did not run: \(out)")
            }
            return Result(text: (try? String(contentsOfFile: results.path("\(i).out"), encoding: .utf8)) ?? "", status: status)
        }
    }

    /// `s` in single quotes for the shell.
    public static func quoted(_ s: String) -> String { "'" + s.replacingOccurrences(of: "'", with: "'\\''") + "'" }
}
