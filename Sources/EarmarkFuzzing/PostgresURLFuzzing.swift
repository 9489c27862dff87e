import EarmarkCatalog
import Foundation

/// `--catalog postgres://…` locations: the input's first line is the URL, the lines up to one holding `--` are
/// `NAME=VALUE` environment variables (PGHOST, PGPORT, …; PGPASSFILE is left out so that no other file is read), and
/// what follows is the user's password file. A URL that parses must name a port in 1…65535, and its redacted form
/// (what messages and `location` show) must parse to the same server, user, database and TLS mode, with no password.
enum PostgresURLFuzzing {
    static func run(_ bytes: UnsafeRawBufferPointer) {
        guard let text = String(bytes: bytes, encoding: .utf8) else { return }
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        guard let url = lines.first.map(String.init) else { return }
        var environment: [String: String] = [:]
        var rest = lines.dropFirst()
        while let line = rest.first, line != "--" {
            rest = rest.dropFirst()
            let parts = line.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            if parts.count == 2, parts[0] != "PGPASSFILE" { environment[String(parts[0])] = String(parts[1]) }
        }
        let home = (CatalogFuzzing.folder as NSString).appendingPathComponent("earmark-fuzz-pg-\(getpid())-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(atPath: home) }
        if rest.first == "--" {
            let passFile = (home as NSString).appendingPathComponent(".pgpass")
            guard (try? FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: false)) != nil,
                  FileManager.default.createFile(atPath: passFile, contents: Data(rest.dropFirst().joined(separator: "\n").utf8),
                                                 attributes: [.posixPermissions: 0o600]) else { fatalError("cannot write \(passFile)") }
        }
        guard let parsed = try? PostgresURL(url, environment: environment, home: home) else { return }
        precondition((1...65535).contains(parsed.port) && !parsed.endpoint.isEmpty, "port \(parsed.port) of \(url)")
        let again: PostgresURL
        do { again = try PostgresURL(parsed.redacted, environment: environment, home: home) } catch {
            preconditionFailure("the redacted \(parsed.redacted) of \(url) does not parse: \(error)")
        }
        precondition(again.endpoints == parsed.endpoints && again.sessionAttributes == parsed.sessionAttributes && again.user == parsed.user
                     && again.database == parsed.database && again.sslMode == parsed.sslMode
                     && again.connectTimeout == parsed.connectTimeout, "the redacted \(parsed.redacted) of \(url) names another server")
        let bare = try? PostgresURL(parsed.redacted, environment: [:], home: "/nonexistent")
        precondition(bare?.password == nil, "the redacted \(parsed.redacted) of \(url) holds a password")
    }
}
