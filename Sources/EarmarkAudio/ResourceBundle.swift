import Foundation

/// Where SwiftPM puts a target's resources, for the targets that ship some (the instrument head, the server's page).
public enum ResourceBundle {
    /// Paths where `item` of target `target`'s resources may be, most likely first: the resource bundle beside
    /// the executable (Linux: `Earmark_TARGET.resources/`, macOS: `Earmark_TARGET.bundle/`), beside its folder's
    /// parents (a test runner inside an .xctest bundle), and in the main bundle.
    public static func candidates(target: String, item: String) -> [String] {
        var dirs: [URL] = []
        var dir = URL(fileURLWithPath: CommandLine.arguments.first ?? ".").resolvingSymlinksInPath().deletingLastPathComponent()
        for _ in 0..<4 {
            dirs.append(dir)
            dir = dir.deletingLastPathComponent()
        }
        dirs.append(Bundle.main.bundleURL)
        if let r = Bundle.main.resourceURL { dirs.append(r) }
        var out: [String] = []
        for d in dirs {
            for sub in ["Earmark_\(target).resources", "Earmark_\(target).bundle", "Earmark_\(target).bundle/Contents/Resources"] {
                let p = d.appendingPathComponent(sub).appendingPathComponent(item).path
                if !out.contains(p) { out.append(p) }
            }
        }
        return out
    }
}

/// Where the model files that Earmark's scripts fetch and convert (the sound model, the speech model) are looked for.
public enum ModelFiles {
    /// Paths where model file `fileName` may be, in order: `$environmentVariable` (alone, when set); `models/fileName`
    /// in the folder of the executable or any of its parents (a build inside the source tree finds the tree's
    /// `models/`, where the tools/fetch-*.sh scripts put them); the same in the working directory;
    /// `$XDG_DATA_HOME/earmark/models/` (else `~/.local/share/earmark/models/`).
    public static func candidates(fileName: String, environmentVariable: String) -> [String] {
        let env = ProcessInfo.processInfo.environment
        if let explicit = env[environmentVariable], !explicit.isEmpty { return [explicit] }
        var out: [String] = []
        var dir = URL(fileURLWithPath: CommandLine.arguments.first ?? ".").resolvingSymlinksInPath().deletingLastPathComponent()
        for _ in 0..<6 {
            out.append(dir.appendingPathComponent("models/\(fileName)").path)
            dir = dir.deletingLastPathComponent()
        }
        out.append(FileManager.default.currentDirectoryPath + "/models/\(fileName)")
        let data = env["XDG_DATA_HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? ((env["HOME"] ?? NSHomeDirectory()) + "/.local/share")
        out.append(data + "/earmark/models/\(fileName)")
        return out
    }
}
