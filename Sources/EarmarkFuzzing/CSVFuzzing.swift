import EarmarkCatalog
import Foundation

/// Metadata CSV files: UTF-8 text (as `catalog add --metadata` reads it) split into records, then
/// read as a metadata table whose every entry is looked up again.
enum CSVFuzzing {
    static func run(_ bytes: UnsafeRawBufferPointer) {
        guard let text = String(bytes: bytes, encoding: .utf8) else { return }
        _ = try? CSV.parse(text)
        guard let table = try? MetadataTable(text: text, path: "/fuzz/metadata.csv") else { return }
        for entry in table.entries {
            precondition(table.entryIndex(for: entry.key) != nil, "a row's own path does not find it")
        }
    }
}
