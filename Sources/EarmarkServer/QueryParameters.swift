import Hummingbird
import HummingbirdCore

/// A request's query parameters, checked: a parameter the endpoint does not take, a repeated one, or a value that
/// does not parse or is out of range is a 400 ``APIError`` naming it.
struct QueryParameters {
    private var values: [String: String] = [:]

    init(_ uri: URI, allowed: Set<String>) throws {
        for (key, value) in uri.queryParameters {
            let name = String(key)
            guard allowed.contains(name) else {
                let known = allowed.isEmpty ? "none" : allowed.sorted().joined(separator: ", ")
                throw APIError(.badRequest, "unknown_parameter", "\(name): this endpoint takes no such parameter (it takes: \(known))")
            }
            guard values[name] == nil else { throw APIError.invalidParameter(name, "given more than once") }
            values[name] = String(value)
        }
    }

    /// The text of `name`, or nil when it is absent.
    func string(_ name: String, maxLength: Int = 1024) throws -> String? {
        guard let v = values[name] else { return nil }
        guard v.count <= maxLength else { throw APIError.invalidParameter(name, "longer than \(maxLength) characters") }
        return v
    }

    /// An integer in `range`, or `defaultValue` when absent.
    func int(_ name: String, default defaultValue: Int, in range: ClosedRange<Int>) throws -> Int {
        guard let text = values[name] else { return defaultValue }
        guard let v = Int(text), range.contains(v) else {
            throw APIError.invalidParameter(name, "\"\(text.prefix(40))\" is not an integer from \(range.lowerBound) to \(range.upperBound)")
        }
        return v
    }

    /// A finite number in `range`, or nil when absent.
    func double(_ name: String, in range: ClosedRange<Double>) throws -> Double? {
        guard let text = values[name] else { return nil }
        guard let v = Double(text), v.isFinite, range.contains(v) else {
            throw APIError.invalidParameter(name, "\"\(text.prefix(40))\" is not a number from \(range.lowerBound) to \(range.upperBound)")
        }
        return v
    }

    /// `true`/`false` (also `1`/`0`), or `defaultValue` when absent.
    func bool(_ name: String, default defaultValue: Bool) throws -> Bool {
        guard let text = values[name] else { return defaultValue }
        switch text.lowercased() {
        case "true", "1": return true
        case "false", "0": return false
        default: throw APIError.invalidParameter(name, "\"\(text.prefix(40))\" is not true or false")
        }
    }
}
