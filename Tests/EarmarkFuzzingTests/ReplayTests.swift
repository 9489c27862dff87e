import EarmarkFuzzing
import EarmarkKit
import EarmarkTestSupport
import Foundation
import Testing

/// Fuzz/corpus/NAME: the seed inputs of `fuzz-NAME`; Fuzz/regressions/NAME: inputs that once crashed
/// it. Fuzz/open/NAME holds crashes found in parsers not yet fixed; they are not replayed here.
let fuzzRoot = TestPaths.repositoryRoot.appendingPathComponent("Fuzz")

func inputs(_ folder: String, _ target: FuzzTarget) -> [URL] {
    FuzzTarget.inputFiles([fuzzRoot.appendingPathComponent(folder).appendingPathComponent(target.rawValue)])
}

@Suite("Fuzz targets replay their seeds and past crashes")
struct ReplayTests {
    @Test("every seed input runs through its parser", arguments: FuzzTarget.allCases)
    func seeds(target: FuzzTarget) throws {
        let files = inputs("corpus", target)
        #expect(files.count >= 3, "Fuzz/corpus/\(target.rawValue) has \(files.count) inputs")
        for file in files { target.run(try Data(contentsOf: file)) }
    }

    @Test("every input that once crashed a parser runs through it", arguments: FuzzTarget.allCases)
    func regressions(target: FuzzTarget) throws {
        for file in inputs("regressions", target) { target.run(try Data(contentsOf: file)) }
    }

    @Test("the seeds are real, valid files, so fuzzing starts past the format checks")
    func seedsAreValid() throws {
        for file in inputs("corpus", .signature) {
            _ = try Signature(dataRepresentation: try Data(contentsOf: file))
        }
        for file in inputs("corpus", .model) {
            let model = try SoundModel(data: try Data(contentsOf: file), name: file.lastPathComponent)
            #expect(model.embeddingSize == 2)
        }
        let tracks = try inputs("corpus", .catalog).map { try Catalog(path: $0.path, readOnly: true).tracks().count }
        #expect(tracks.contains(0) && tracks.contains { $0 >= 2 }, "\(tracks)")
        for file in inputs("corpus", .wav) {
            let bytes = [UInt8](try Data(contentsOf: file))
            var offset = 0
            let reader = try PCMStreamReader(seekable: !file.lastPathComponent.contains("pipe")) { n in
                defer { offset = min(bytes.count, offset + n) }
                return Array(bytes[offset..<min(bytes.count, offset + n)])
            }
            var frames = 0
            while let b = try reader.next() { frames += b.frameCount }
            #expect(frames == 441, "\(file.lastPathComponent)")
        }
        for file in inputs("corpus", .speechModel) where !file.lastPathComponent.contains("cut") {
            let model = try SpeechModel(data: try Data(contentsOf: file), name: file.lastPathComponent)
            #expect(model.architecture.audioState == 8)
        }
        for file in inputs("corpus", .csv) {
            _ = try MetadataTable(text: try String(contentsOf: file, encoding: .utf8), path: file.path)
        }
    }

    @Test("the replay lists files in folders, sorted, without dot files")
    func inputFiles() throws {
        let tmp = try TemporaryDirectory("replay")
        try FileManager.default.createDirectory(at: tmp.file("sub"), withIntermediateDirectories: true)
        for name in ["b", ".hidden", "sub/a"] { try Data([1]).write(to: tmp.file(name)) }
        let found = FuzzTarget.inputFiles([tmp.url]).map { $0.lastPathComponent }
        #expect(found == ["b", "a"])
    }
}
