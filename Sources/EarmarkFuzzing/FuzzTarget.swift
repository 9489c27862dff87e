import Foundation
#if FUZZING
import CFuzzerDriver
#endif

/// A parser of outside bytes that a fuzz target (`fuzz-<name>`, see tools/fuzz.sh) feeds.
///
/// The fuzz executables and the replay tests call the same ``run(_:)``, so an input that crashed
/// a parser once is replayed by `swift test` from then on.
public enum FuzzTarget: String, CaseIterable, Sendable {
    /// `Signature(dataRepresentation:)`: a `.earsig` file.
    case signature
    /// `SoundModel(data:name:)`: an `.emodel` file.
    case model
    /// `Catalog(path:readOnly:)` and its readers: a catalog export (a SQLite file).
    case catalog
    /// `PCMStreamReader`: a WAV stream on standard input (header and samples).
    case wav
    /// `CSV.parse` and `MetadataTable`: a `catalog add --metadata` file.
    case csv
    /// `SpeechModel(data:name:)`: a speech `.emodel` file (Whisper).
    case speechModel = "speech-model"
    /// `PostgresURL(_:environment:home:)`: a `--catalog postgres://…` location, with a password file.
    case postgresURL = "postgres-url"

    /// The executable's name: `fuzz-signature`, ….
    public var executableName: String { "fuzz-\(rawValue)" }

    /// Runs one input through the parser; errors it throws are expected, crashes are findings.
    public func run(_ bytes: UnsafeRawBufferPointer) {
        switch self {
        case .signature: SignatureFuzzing.run(bytes)
        case .model: ModelFuzzing.run(bytes)
        case .catalog: CatalogFuzzing.run(bytes)
        case .wav: WAVFuzzing.run(bytes)
        case .csv: CSVFuzzing.run(bytes)
        case .speechModel: SpeechModelFuzzing.run(bytes)
        case .postgresURL: PostgresURLFuzzing.run(bytes)
        }
    }

    /// Runs one input through the parser.
    public func run(_ data: Data) {
        data.withUnsafeBytes { run($0) }
    }

    /// The fuzz executable's main. In a fuzz build (`-Xswiftc -DFUZZING`) it hands `entry` to
    /// libFuzzer with the command line; otherwise it replays every file named on the command line
    /// (folders: every file in them) through `entry` and exits 0, or 1 when nothing was given.
    public func main(_ entry: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt) -> Never {
        #if FUZZING
        var argc = CommandLine.argc
        var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
        exit(LLVMFuzzerRunDriver(&argc, &argv, entry))
        #else
        let paths = CommandLine.arguments.dropFirst()
        guard !paths.isEmpty, !paths.contains(where: { $0.hasPrefix("-") }) else {
            FileHandle.standardError.write(Data("""
                usage: \(executableName) FILE|FOLDER…
                Replays each input through the parser (a build without -DFUZZING); tools/fuzz.sh builds the fuzzer.

                """.utf8))
            exit(1)
        }
        var count = 0
        for file in FuzzTarget.inputFiles(paths.map { URL(fileURLWithPath: $0) }) {
            guard let data = FileManager.default.contents(atPath: file.path) else {
                FileHandle.standardError.write(Data("\(executableName): cannot read \(file.path)\n".utf8))
                exit(1)
            }
            _ = data.withUnsafeBytes { entry($0.bindMemory(to: UInt8.self).baseAddress, $0.count) }
            count += 1
        }
        print("\(executableName): replayed \(count) input\(count == 1 ? "" : "s")")
        exit(0)
        #endif
    }

    /// The files among `urls`, with folders replaced by the regular files in them (sorted, recursively;
    /// names starting with a dot are left out).
    public static func inputFiles(_ urls: [URL]) -> [URL] {
        var out: [URL] = []
        for url in urls {
            var isFolder: ObjCBool = false
            guard FileManager.default.fileExists(atPath: url.path, isDirectory: &isFolder) else { continue }
            guard isFolder.boolValue else { out.append(url); continue }
            let names = (try? FileManager.default.contentsOfDirectory(atPath: url.path)) ?? []
            out += inputFiles(names.sorted().filter { !$0.hasPrefix(".") }.map { url.appendingPathComponent($0) })
        }
        return out
    }
}
