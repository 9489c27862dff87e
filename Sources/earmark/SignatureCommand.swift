import ArgumentParser
import EarmarkKit
import Foundation

struct SignatureCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "signature",
        abstract: "Write the fingerprint of an audio file to a .earsig file.",
        discussion: """
        A signature holds the spectral peaks of the audio, not the audio itself, and is a few \
        kilobytes per minute. `earmark match` accepts .earsig files in place of audio, so clips can \
        be fingerprinted on one machine and matched on another. The output name must end in \
        .earsig (that is how match recognises signature files); an existing file is replaced.

        With --json: {path, output, duration, peaks, bytes}. Exit code 2 when the file cannot be read.
        """
    )

    @Argument(help: ArgumentHelp("The audio file.", valueName: "file"))
    var file: String

    @Option(name: .shortAndLong, help: ArgumentHelp("The signature file to write.", valueName: "out.earsig"))
    var output: String

    @Flag(name: .long, help: "Print machine-readable JSON on standard output instead of text.")
    var json = false

    func validate() throws {
        guard output.lowercased().hasSuffix(".earsig") else {
            throw ValidationError("The output file name must end in .earsig (got '\(output)').")
        }
    }

    mutating func run() async throws {
        let (file, output, json) = (file, (output as NSString).expandingTildeInPath, json)
        try await reportingErrors {
            let fingerprinted = try Fingerprinter.fingerprint(path: file, digest: false)
            let signature = fingerprinted.signature
            let data = signature.dataRepresentation()
            do {
                try data.write(to: URL(fileURLWithPath: output), options: .atomic)
            } catch {
                throw CLIError("\(output): cannot write: \(describe(error))")
            }
            if json {
                try printJSON(SignatureReport(path: file, output: output, duration: signature.duration,
                                              peaks: signature.peaks.count, bytes: data.count))
            } else {
                print("\(output): \(formatDuration(signature.duration))"
                      + String(format: " (%.3f s), %d peaks, %d bytes", signature.duration, signature.peaks.count, data.count))
            }
        }
    }
}

struct SignatureReport: Encodable {
    var path: String
    var output: String
    var duration: Double
    var peaks: Int
    var bytes: Int
}
