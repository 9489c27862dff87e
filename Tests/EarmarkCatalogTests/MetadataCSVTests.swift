import EarmarkCatalog
import Foundation
import Testing

@Suite("Metadata CSV")
struct MetadataCSVTests {
    @Test("RFC 4180 records: quotes, doubled quotes, line breaks in quotes, CRLF, a byte-order mark, blank lines")
    func records() throws {
        let rows = try CSV.parse("\u{FEFF}a,\"b, c\"\r\n\r\n\"say \"\"hi\"\"\",\"two\nlines\"\n")
        #expect(rows == [CSV.Row(line: 1, fields: ["a", "b, c"]), CSV.Row(line: 3, fields: ["say \"hi\"", "two\nlines"])])
        #expect(throws: CSVError(line: 1, message: "quoted field is never closed")) { try CSV.parse("\"open") }
    }

    @Test("a row with fewer fields than the key column is an empty key, not a crash (found by fuzz-csv)")
    func shortRow() throws {
        #expect(throws: CSVError(path: "m.csv", line: 2, message: "empty path field")) {
            try MetadataTable(text: "title,path\nOnly a title\n", path: "m.csv")
        }
        let table = try MetadataTable(text: "path,title,artist\na.flac,A\nb.flac\n", path: "m.csv")
        #expect(table.entries.map(\.key) == ["a.flac", "b.flac"])
        #expect(table.entries[0].description.title == "A" && table.entries[1].description.title == nil)
    }

    @Test("a key Foundation's lastPathComponent traps on (\"//Ҩ\") is looked up by its file name (found by fuzz-csv)")
    func foundationTrapKey() throws {
        let table = try MetadataTable(text: "path,title\n//\u{04A8},T\nmusic/b.flac,B\n", path: "m.csv")
        #expect(table.entryIndex(for: "/elsewhere/\u{04A8}") == 0)
        #expect(table.entryIndex(for: "//\u{04A8}") == 0)
        #expect(table.entryIndex(for: "other/b.flac/") == 1)
    }

    @Test("errors about the whole file name no line")
    func wholeFileErrors() {
        #expect(throws: CSVError(path: "m.csv", line: nil, message: "the metadata file is empty")) {
            try MetadataTable(text: "\n\n", path: "m.csv")
        }
        #expect(CSVError(path: "m.csv", line: nil, message: "the metadata file is empty").description == "m.csv: the metadata file is empty")
        #expect(CSVError(path: "m.csv", line: 3, message: "x").description == "m.csv: line 3: x")
    }
}
