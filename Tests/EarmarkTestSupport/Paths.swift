import Foundation

/// Locations the tests need: the repository, a per-process scratch area, the test audio set.
public enum TestPaths {
    /// The repository root (this file is `Tests/EarmarkTestSupport/Paths.swift`).
    public static let repositoryRoot: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// A folder for this test process only; removed when the process exits.
    public static let scratchRoot: URL = {
        try? FileManager.default.createDirectory(atPath: scratchRootPath, withIntermediateDirectories: true)
        atexit { try? FileManager.default.removeItem(atPath: scratchRootPath) }
        return URL(fileURLWithPath: scratchRootPath, isDirectory: true)
    }()
}

private let scratchRootPath: String = FileManager.default.temporaryDirectory
    .appendingPathComponent("earmark-tests-\(getpid())-\(UUID().uuidString.prefix(8))").path

/// A fresh folder under ``TestPaths/scratchRoot``, deleted when the value is released.
public final class TemporaryDirectory: Sendable {
    public let url: URL
    public var path: String { url.path }

    public init(_ label: String = "tmp") throws {
        url = TestPaths.scratchRoot.appendingPathComponent("\(label)-\(UUID().uuidString.prefix(8))", isDirectory: true)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(at: url) }

    /// A path inside the folder (the file is not created).
    public func file(_ name: String) -> URL { url.appendingPathComponent(name) }
    public func path(_ name: String) -> String { file(name).path }
}

/// An error of the test harness itself (a tool missing, a command failing, …), not of Earmark.
public struct TestSupportError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// Computes a value once per process, on first use, however many tests ask for it concurrently.
public actor Shared<Value: Sendable> {
    private var task: Task<Value, any Error>?
    private let make: @Sendable () async throws -> Value

    public init(_ make: @escaping @Sendable () async throws -> Value) { self.make = make }

    public func value() async throws -> Value {
        if let task { return try await task.value }
        let t = Task { try await make() }
        task = t
        return try await t.value
    }
}
