import EarmarkKit
import Foundation

/// A malformed CSV file.
struct CSVError: Error, CustomStringConvertible {
    var path: String?
    var line: Int
    var message: String
    var description: String { "\(path.map { "\($0): " } ?? "")line \(line): \(message)" }
}

/// A small RFC 4180 CSV reader: comma-separated fields, optional double quotes around a field,
/// `""` for a quote inside a quoted field, commas and line breaks (LF or CRLF) inside quotes.
/// A leading UTF-8 byte-order mark and blank lines are ignored.
enum CSV {
    struct Row: Equatable {
        /// 1-based line on which the record starts.
        var line: Int
        var fields: [String]
    }

    static func parse(_ text: String) throws -> [Row] {
        let s = Array(text.unicodeScalars)
        var rows: [Row] = []
        var fields: [String] = []
        var field = String.UnicodeScalarView()
        var i = s.first == "\u{FEFF}" ? 1 : 0
        var line = 1
        var rowLine = 1
        var inQuotes = false
        var quoted = false          // the current field was quoted (and its quote closed)
        var quoteLine = 1

        func endField() {
            fields.append(String(field))
            field = String.UnicodeScalarView()
            quoted = false
        }
        func endRow() {
            let blank = fields.isEmpty && field.isEmpty && !quoted
            endField()
            if !blank { rows.append(Row(line: rowLine, fields: fields)) }
            fields = []
        }

        while i < s.count {
            let c = s[i]
            if inQuotes {
                if c == "\"" {
                    if i + 1 < s.count, s[i + 1] == "\"" {
                        field.append("\"")
                        i += 2
                        continue
                    }
                    inQuotes = false
                    quoted = true
                } else {
                    if c == "\n" { line += 1 }
                    field.append(c)
                }
                i += 1
                continue
            }
            switch c {
            case ",":
                endField()
            case "\r", "\n":
                endRow()
                if c == "\r", i + 1 < s.count, s[i + 1] == "\n" { i += 1 }
                line += 1
                rowLine = line
            case "\"" where field.isEmpty && !quoted:
                inQuotes = true
                quoteLine = line
            default:
                if quoted {
                    throw CSVError(line: line, message: "unexpected text after a closing quote (write a quote inside a quoted field as \"\")")
                }
                field.append(c)   // a stray quote inside an unquoted field is kept as is
            }
            i += 1
        }
        if inQuotes { throw CSVError(line: quoteLine, message: "quoted field is never closed") }
        if !fields.isEmpty || !field.isEmpty || quoted { endRow() }
        return rows
    }
}

/// Track descriptions read from a metadata CSV (`catalog add --metadata`).
///
/// The header names the columns. `path` (or `file`) identifies the audio file; `title`, `artist`
/// and `album` fill those fields; every other column with a non-empty value becomes a metadata
/// string. Header names are matched case-insensitively.
struct MetadataTable {
    struct Entry {
        var line: Int
        var key: String
        var description: TrackDescription
    }

    var entries: [Entry]
    private var byKey: [String: Int] = [:]
    private var byAbsolute: [String: Int] = [:]
    private var byName: [String: Int] = [:]
    private var ambiguousNames: Set<String> = []

    init(path csvPath: String) throws {
        let text: String
        do {
            text = try String(contentsOfFile: csvPath, encoding: .utf8)
        } catch {
            throw CLIError("\(csvPath): cannot read metadata file (it must be UTF-8 text): \(describe(error))")
        }
        let rows: [CSV.Row]
        do { rows = try CSV.parse(text) } catch var e as CSVError {
            e.path = csvPath
            throw e
        }
        guard let header = rows.first else { throw CLIError("\(csvPath): the metadata file is empty") }
        let names = header.fields.map { $0.trimmingCharacters(in: .whitespaces) }
        let lower = names.map { $0.lowercased() }
        guard let keyColumn = lower.firstIndex(of: "path") ?? lower.firstIndex(of: "file") else {
            throw CLIError("\(csvPath): the header row needs a `path` or `file` column (found: \(names.joined(separator: ", ")))")
        }
        let csvFolder = (absolutePath(csvPath) as NSString).deletingLastPathComponent
        entries = []
        for row in rows.dropFirst() {
            guard row.fields.count <= names.count else {
                throw CSVError(path: csvPath, line: row.line,
                               message: "\(row.fields.count) fields but the header has \(names.count) (quote fields that contain commas)")
            }
            let key = row.fields[keyColumn].trimmingCharacters(in: .whitespaces)
            guard !key.isEmpty else { throw CSVError(path: csvPath, line: row.line, message: "empty \(names[keyColumn]) field") }
            var d = TrackDescription()
            for (c, value) in row.fields.enumerated() where c != keyColumn && !value.isEmpty && !names[c].isEmpty {
                switch lower[c] {
                case "title": d.title = value
                case "artist": d.artist = value
                case "album": d.album = value
                default: d.metadata[names[c]] = .string(value)
                }
            }
            let index = entries.count
            if byKey[key] != nil {
                throw CSVError(path: csvPath, line: row.line, message: "\(key) is listed twice")
            }
            entries.append(Entry(line: row.line, key: key, description: d))
            byKey[key] = index
            let expanded = (key as NSString).expandingTildeInPath
            if expanded.hasPrefix("/") {
                byAbsolute[absolutePath(expanded)] = index
            } else {
                // Relative paths may be relative to the current folder or to the CSV's folder.
                byAbsolute[absolutePath(expanded)] = index
                let besideCSV = absolutePath((csvFolder as NSString).appendingPathComponent(expanded))
                if byAbsolute[besideCSV] == nil { byAbsolute[besideCSV] = index }
            }
            let name = (key as NSString).lastPathComponent
            if byName[name] != nil { ambiguousNames.insert(name) } else { byName[name] = index }
        }
    }

    /// The entry for an audio file: by the path as given, then its absolute path, then its file name
    /// (when only one row has that name).
    func entryIndex(for file: String) -> Int? {
        if let i = byKey[file] { return i }
        if let i = byAbsolute[absolutePath(file)] { return i }
        let name = (file as NSString).lastPathComponent
        if !ambiguousNames.contains(name), let i = byName[name] { return i }
        return nil
    }
}
