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
