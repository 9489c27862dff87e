import ArgumentParser
import EarmarkKit
import Foundation

// MARK: - Streams

/// Writes `text` to standard error (unbuffered).
func writeStderr(_ text: String) {
    FileHandle.standardError.write(Data(text.utf8))
}

/// Prints a warning on standard error.
func warn(_ message: String) {
    writeStderr("earmark: warning: \(message)\n")
}

/// Whether standard error is an interactive terminal.
var stderrIsTerminal: Bool { isatty(2) != 0 }

// MARK: - JSON

/// Prints `value` as pretty-printed JSON with sorted keys on standard output.
func printJSON<T: Encodable>(_ value: T) throws {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
    print(String(decoding: try encoder.encode(value), as: UTF8.self))
}

// MARK: - Errors

/// A failure of the command line itself (bad metadata file, refusing to overwrite, …); exit 2.
struct CLIError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// A readable one-line description of any error.
func describe(_ error: any Error) -> String {
    switch error {
    case let e as AudioError: return e.description
    case let e as CatalogError: return e.description
    case let e as SignatureError: return e.description
    case let e as CLIError: return e.description
    case let e as CSVError: return e.description
    case let e as CocoaError: return e.localizedDescription
    case let e as LocalizedError: return e.errorDescription ?? "\(error)"
    default: return "\(error)"
    }
}

/// Describes an error about one input file as `path: message`, naming the path exactly once.
func describe(_ error: any Error, file path: String) -> String {
    if let e = error as? AudioError { return "\(path): \(e.message)" }
    return prefixed(describe(error), with: path)
}

/// `path: message`, unless `message` already starts with `path: `.
func prefixed(_ message: String, with path: String) -> String {
    message.hasPrefix(path + ": ") ? message : "\(path): \(message)"
}

/// Loads the sound model at `path`, or the default one; a failure is reported like any other error (exit 2).
func loadSoundModel(_ path: String?) throws -> SoundModel {
    do {
        return try SoundModel.load(path: path)
    } catch {
        writeStderr("earmark: error: \(describe(error))\n")
        throw ExitCode(2)
    }
}

/// Runs a command body; library and I/O errors are printed as `earmark: error: …` and turn
/// into exit code 2. Argument-parser errors (ExitCode, ValidationError, CleanExit) pass through.
func reportingErrors<T>(_ body: () async throws -> T) async throws -> T {
    do {
        return try await body()
    } catch let e as ExitCode {
        throw e
    } catch let e as ValidationError {
        throw e
    } catch let e as CleanExit {
        throw e
    } catch {
        writeStderr("earmark: error: \(describe(error))\n")
        throw ExitCode(2)
    }
}

/// Writes an SVG timeline (``AnalysisTimeline/svg(width:emptyMessage:)``) to `path`, replacing it.
/// - Throws: ``CLIError`` naming the path when it cannot be written.
func writeTimeline(_ svg: String, to path: String) throws {
    let path = (path as NSString).expandingTildeInPath
    do {
        try Data(svg.utf8).write(to: URL(fileURLWithPath: path), options: .atomic)
    } catch {
        throw CLIError("\(path): cannot write the timeline: \(describe(error))")
    }
}

// MARK: - Formatting

/// `m:ss` (or `h:mm:ss` from one hour).
func formatDuration(_ seconds: Double) -> String {
    guard seconds.isFinite else { return "?:??" }
    let total = Int(seconds.rounded())
    let (h, m, s) = (total / 3600, total / 60 % 60, total % 60)
    return h > 0 ? String(format: "%d:%02d:%02d", h, m, s) : String(format: "%d:%02d", m, s)
}

/// `m:ss.ss` with a sign for negative values (match offsets).
func formatOffset(_ seconds: Double) -> String {
    guard seconds.isFinite else { return "?:??.??" }
    let centis = Int((abs(seconds) * 100).rounded())
    let body = String(format: "%d:%02d.%02d", centis / 6000, centis / 100 % 60, centis % 100)
    return seconds < 0 && centis > 0 ? "-" + body : body
}

/// `Title — Artist`, falling back to `#id` without a title.
func trackLabel(_ track: Track) -> String {
    var label = track.title.flatMap { $0.isEmpty ? nil : $0 } ?? "#\(track.id)"
    if let artist = track.artist, !artist.isEmpty { label += " — " + artist }
    return label
}

/// `, speed +3.0 %`, `, tempo −4.0 %` or `, pitch +5.9 % (+1.0 semitones)` for a clip that differs from its
/// reference: speed when time and pitch changed together, tempo or pitch when one alone did (both when
/// both did, apart). Empty under 0.2 %, which is measurement noise for a clip played as it was.
func skewSuffix(_ m: Match) -> String {
    let tempo = m.timeScale - 1, pitch = m.frequencySkew
    let hasTempo = abs(tempo) >= 0.002, hasPitch = abs(pitch) >= 0.002
    func semitones(_ p: Double) -> String { String(format: "%+.1f semitones", 12 * log2(1 + p)) }
    switch (hasTempo, hasPitch) {
    case (false, false): return ""
    case (true, true) where abs(tempo - pitch) < 0.005: return String(format: ", speed %+.1f %%", pitch * 100)
    case (true, true):
        return String(format: ", tempo %+.1f %%, pitch %+.1f %% (", tempo * 100, pitch * 100) + semitones(pitch) + ")"
    case (true, false): return String(format: ", tempo %+.1f %%", tempo * 100)
    case (false, true): return String(format: ", pitch %+.1f %% (", pitch * 100) + semitones(pitch) + ")"
    }
}

/// A level such as `-23.0 LUFS`, or `—` when there is none (silence).
func formatLevel(_ value: Double?, _ unit: String) -> String {
    value.map { String(format: "%.1f %@", $0, unit) } ?? "—"
}

/// A metadata value as text: strings as they are, everything else as compact JSON.
func formatJSONValue(_ value: JSONValue) -> String {
    if case .string(let s) = value { return s }
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    return (try? encoder.encode(value)).map { String(decoding: $0, as: UTF8.self) } ?? "?"
}

/// Pads `text` with spaces to `width` characters.
func pad(_ text: String, _ width: Int) -> String {
    let n = text.count
    return n >= width ? text : text + String(repeating: " ", count: width - n)
}

/// Shortens `text` to at most `width` characters, ending in `…` when cut.
func truncate(_ text: String, _ width: Int) -> String {
    text.count <= width ? text : String(text.prefix(max(0, width - 1))) + "…"
}

/// Absolute, standardized form of a path (relative to the current directory).
func absolutePath(_ path: String) -> String {
    URL(fileURLWithPath: (path as NSString).expandingTildeInPath).standardizedFileURL.path
}
