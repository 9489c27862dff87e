import ArgumentParser
import EarmarkCatalogPostgres
import EarmarkKit
import Foundation

struct CatalogMigrateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "migrate",
        abstract: "Bring a catalog up to this build's format and index everything pending.",
        discussion: """
        Converts a catalog of an older schema (schema 2 kept its hash index inside the file; schema 3 keeps \
        it in segment files in the folder NAME-index beside it), then moves every track not yet in the index \
        (an exported copy, tracks added by a writer that stopped early) into it. With --compact, also rewrites \
        the file without free pages and merges the index into one segment, dropping what removed tracks left \
        behind. Other writing commands migrate too; read-only ones refuse an old schema and say so. \
        On a PostgreSQL catalog (postgres://…) the schema is migrated when it is opened for writing; then every \
        pending track is indexed, and --compact merges its index segments into one. \
        Exit 0 when done, 2 when the catalog cannot be used. With --json: {path, schemaVersion, trackCount, \
        postings, segments, postingsInSegments}: a catalog of up to a million postings (about 7 h of audio) \
        keeps them in its file (0 segments).
        """
    )

    @OptionGroup var options: GlobalOptions
    @Flag(help: "Also rewrite the file compactly and merge the index into one segment.")
    var compact = false

    mutating func run() async throws {
        let options = options
        let compact = compact
        try await reportingErrors {
            let s: CatalogStats, layout: (segments: Int, postings: Int, pending: Int)
            if !CatalogStores.isFile(options.catalogPath), let server = try options.openForWriting() as? PostgresCatalog {
                try server.flushIndex()
                if compact { try server.compact() }
                s = try server.stats()
                layout = try server.indexLayout()
            } else {
                let catalog = try options.openFileForWriting(command: "catalog migrate")
                try catalog.flushIndex(ifLargerThanFile: true)
                if compact { try catalog.compact() }
                s = try catalog.stats()
                layout = try catalog.indexLayout()
            }
            if options.json {
                try printJSON(MigrateReport(path: s.path, schemaVersion: s.schemaVersion, trackCount: s.trackCount,
                                            postings: layout.postings + layout.pending, segments: layout.segments,
                                            postingsInSegments: layout.postings))
            } else {
                let total = layout.postings + layout.pending
                print("\(s.path): schema \(s.schemaVersion), \(s.trackCount) track\(s.trackCount == 1 ? "" : "s"), \(total) postings"
                      + (layout.segments == 0 ? " in the file" : ", \(layout.postings) of them in \(layout.segments) index segment\(layout.segments == 1 ? "" : "s")")
                      + (layout.pending > 0 && layout.segments > 0 ? ", \(layout.pending) pending" : ""))
            }
        }
    }
}

struct MigrateReport: Encodable {
    var path: String
    var schemaVersion: Int
    var trackCount: Int
    var postings: Int
    var segments: Int
    var postingsInSegments: Int
}
