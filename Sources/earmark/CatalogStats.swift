import ArgumentParser
import EarmarkKit
import Foundation

struct CatalogStatsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stats",
        abstract: "Show the size of the catalog.",
        discussion: """
        Tracks, hours of indexed audio, landmark postings, file size and size per hour of audio. \
        With --json: {path, schemaVersion, signatureVersion, trackCount, totalDuration (s), \
        landmarkCount, fileBytes, bytesPerHour}.
        """
    )

    @OptionGroup var options: GlobalOptions

    mutating func run() async throws {
        let options = options
        try await reportingErrors {
            let s = try options.openReadOnly().stats()
            if options.json {
                try printJSON(s)
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
        }
    }
}
