import ArgumentParser
import EarmarkCatalogPostgres
import EarmarkKit
import Foundation

struct CatalogStatsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stats",
        abstract: "Show the size of the catalog.",
        discussion: """
        Tracks, hours of indexed audio, landmark postings, file size and size per hour of audio. \
        With --json: {path, schemaVersion, signatureVersion, trackCount, totalDuration (s), \
        landmarkCount, fileBytes, bytesPerHour}, and for a sharded PostgreSQL catalog shards: [{name, location}]. \
        The size of a PostgreSQL catalog is its tables' on the server (a sharded one's: the coordinator's only).
        """
    )

    @OptionGroup var options: GlobalOptions

    mutating func run() async throws {
        let options = options
        try await reportingErrors {
            let store = try options.openReadOnly()
            let s = try store.stats()
            let shards = (store as? PostgresCatalog)?.shards ?? []
            if options.json {
                if shards.isEmpty { try printJSON(s) } else { try printJSON(ShardedStats(stats: s, shards: shards)) }
                return
            }
            let mb = 1_048_576.0
            print("catalog:    \(s.path)")
            print("tracks:     \(s.trackCount)")
            print(String(format: "audio:      %.2f h", s.totalDuration / 3600))
            print("postings:   \(s.landmarkCount)")
            print(String(format: "size:       %.1f MB", Double(s.fileBytes) / mb))
            print(s.totalDuration > 0 ? String(format: "per hour:   %.2f MB", s.bytesPerHour / mb) : "per hour:   —")
            let keys = UInt16(exactly: s.signatureVersion).flatMap(SignatureConfiguration.released(version:))
                .map { $0.landmarkShape == .triplets ? " (triplet keys, experimental)" : " (pair keys)" } ?? ""
            print("versions:   schema \(s.schemaVersion), signature algorithm \(s.signatureVersion)\(keys)")
            if !shards.isEmpty {
                print("shards:     \(shards.count)")
                for shard in shards { print("  \(shard.name): \(shard.location)") }
            }

        }
    }
}

/// `catalog stats --json` of a sharded catalog: the stats' fields and the shards.
struct ShardedStats: Encodable {
    var stats: CatalogStats
    var shards: [PostgresShard]

    func encode(to encoder: any Encoder) throws {
        try stats.encode(to: encoder)
        var c = encoder.container(keyedBy: Key.self)
        try c.encode(shards, forKey: .shards)
    }

    enum Key: String, CodingKey { case shards }
}
