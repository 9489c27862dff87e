/// Pieces of a path, without NSString's path methods: swift-corelibs-foundation traps on some paths
/// (a single non-ASCII character after a double slash, such as "//Ҩ", ends `lastPathComponent` in a crash).
public enum PathName {
    /// The last non-empty component of `path` (the path itself when it has none).
    public static func last(_ path: String) -> String {
        path.split(separator: "/").last.map(String.init) ?? path
    }

    /// ``last(_:)`` without its extension: "music/song.flac" gives "song"; a leading dot is no extension.
    public static func stem(_ path: String) -> String {
        let name = last(path)
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return name }
        return String(name[..<dot])
    }
}
