import Foundation

/// Descriptive fields for files being added, from the command line or a metadata CSV.
public struct TrackDescription: Sendable, Equatable {
    public var title: String?
    public var artist: String?
    public var album: String?
    public var metadata: [String: JSONValue]
    public init(title: String? = nil, artist: String? = nil, album: String? = nil, metadata: [String: JSONValue] = [:]) {
        self.title = title
        self.artist = artist
        self.album = album
        self.metadata = metadata
    }
}

/// A malformed or unusable CSV file.
public struct CSVError: Error, CustomStringConvertible, Sendable, Equatable {
    public var path: String?
    /// 1-based line of the problem, or nil for the file as a whole.
    public var line: Int?
    public var message: String
    public init(path: String? = nil, line: Int?, message: String) {
        self.path = path
        self.line = line
        self.message = message
    }
    public var description: String { "\(path.map { "\($0): " } ?? "")\(line.map { "line \($0): " } ?? "")\(message)" }
}

/// A small RFC 4180 CSV reader: comma-separated fields, optional double quotes around a field,
/// `""` for a quote inside a quoted field, commas and line breaks (LF or CRLF) inside quotes.
/// A leading UTF-8 byte-order mark and blank lines are ignored.
public enum CSV {
    /// One record.
    public struct Row: Equatable, Sendable {
        /// 1-based line on which the record starts.
        public var line: Int
        public var fields: [String]
        public init(line: Int, fields: [String]) {
            self.line = line
            self.fields = fields
        }
    }

    /// Splits `text` into records; throws ``CSVError`` for a quote that is never closed or text after a closing quote.
    public static func parse(_ text: String) throws -> [Row] {
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
public struct MetadataTable: Sendable {
    /// One row: the line it starts on, its path as written, and what it describes.
    public struct Entry: Sendable {
        public var line: Int
        public var key: String
        public var description: TrackDescription
    }

    /// The rows in file order.
    public var entries: [Entry]
    private var byKey: [String: Int] = [:]
    private var byAbsolute: [String: Int] = [:]
    private var byName: [String: Int] = [:]
    private var ambiguousNames: Set<String> = []

    /// Reads the CSV file at `csvPath` (UTF-8); throws ``CSVError``.
    public init(path csvPath: String) throws {
        let text: String
        do {
            text = try String(contentsOfFile: csvPath, encoding: .utf8)
        } catch {
            throw CSVError(path: csvPath, line: nil,
                           message: "cannot read metadata file (it must be UTF-8 text): \(error.localizedDescription)")
        }
        try self.init(text: text, path: csvPath)
    }

    /// Parses CSV text read from `csvPath` (relative keys are also looked up beside it); throws ``CSVError``.
    public init(text: String, path csvPath: String) throws {
        let rows: [CSV.Row]
        do { rows = try CSV.parse(text) } catch var e as CSVError {
            e.path = csvPath
            throw e
        }
        guard let header = rows.first else { throw CSVError(path: csvPath, line: nil, message: "the metadata file is empty") }
        let names = header.fields.map { $0.trimmingCharacters(in: .whitespaces) }
        let lower = names.map { $0.lowercased() }
        guard let keyColumn = lower.firstIndex(of: "path") ?? lower.firstIndex(of: "file") else {
            throw CSVError(path: csvPath, line: nil,
                           message: "the header row needs a `path` or `file` column (found: \(names.joined(separator: ", ")))")
        }
        let csvFolder = URL(fileURLWithPath: MetadataTable.absolutePath(csvPath)).deletingLastPathComponent().path
        entries = []
        for row in rows.dropFirst() {
            guard row.fields.count <= names.count else {
                throw CSVError(path: csvPath, line: row.line,
                               message: "\(row.fields.count) fields but the header has \(names.count) (quote fields that contain commas)")
            }
            // A row may stop before the key column (fewer fields than the header): its key is empty.
            let key = (keyColumn < row.fields.count ? row.fields[keyColumn] : "").trimmingCharacters(in: .whitespaces)
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
                byAbsolute[MetadataTable.absolutePath(expanded)] = index
            } else {
                // Relative paths may be relative to the current folder or to the CSV's folder.
                byAbsolute[MetadataTable.absolutePath(expanded)] = index
                let besideCSV = MetadataTable.absolutePath((csvFolder as NSString).appendingPathComponent(expanded))
                if byAbsolute[besideCSV] == nil { byAbsolute[besideCSV] = index }
            }
            let name = PathName.last(key)
            if byName[name] != nil { ambiguousNames.insert(name) } else { byName[name] = index }
        }
    }

    /// The entry for an audio file: by the path as given, then its absolute path, then its file name
    /// (when only one row has that name).
    public func entryIndex(for file: String) -> Int? {
        if let i = byKey[file] { return i }
        if let i = byAbsolute[MetadataTable.absolutePath(file)] { return i }
        let name = PathName.last(file)
        if !ambiguousNames.contains(name), let i = byName[name] { return i }
        return nil
    }

    /// `path` with `~` expanded, made absolute from the current folder and standardised.
    static func absolutePath(_ path: String) -> String {
        URL(fileURLWithPath: (path as NSString).expandingTildeInPath).standardizedFileURL.path
    }
}
