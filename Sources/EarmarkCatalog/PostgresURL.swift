import Foundation

/// Where a PostgreSQL catalog is, parsed from `postgres://user:password@host:port/db?sslmode=…&host=/socket/folder`
/// (also `postgresql://`), with libpq's defaults: `PGHOST`, `PGPORT`, `PGUSER`, `PGDATABASE`, then a unix socket in
/// `/var/run/postgresql`, port 5432, the user's login name, a database named like the user. The password comes from
/// the URL, else `PGPASSWORD`, else the password file (`PGPASSFILE`, else `~/.pgpass`) as libpq reads it.
///
/// As in libpq, a URL may name several servers (`postgres://db1:5432,db2:5432/music`, or `?host=db1,db2&port=…`): they
/// are tried in order, and the first that answers and has the session ``sessionAttributes`` asks for is used
/// (`target_session_attrs`: `any`, `read-write`, `read-only`, `primary`, `standby`, `prefer-standby`). So a primary and
/// its standbys in one URL keep working after a standby is promoted.
public struct PostgresURL: Sendable, Equatable {
    /// How to reach the server.
    public enum Host: Sendable, Equatable {
        /// A TCP host name or address.
        case tcp(String)
        /// A folder holding the server's unix socket (`.s.PGSQL.PORT`).
        case socket(folder: String)
    }

    /// TLS as libpq's `sslmode` asks for it.
    public enum SSLMode: String, Sendable, Equatable {
        /// Plain TCP.
        case disable
        /// TLS when the server offers it, without checking its certificate (libpq's default).
        case prefer
        /// TLS, without checking the certificate.
        case require
        /// TLS with a certificate signed by a trusted authority, whatever host it names.
        case verifyCA = "verify-ca"
        /// TLS with a trusted certificate for the host connected to.
        case verifyFull = "verify-full"
    }

    /// One server of the URL.
    public struct Endpoint: Sendable, Equatable {
        public var host: Host
        public var port: Int

        public init(host: Host, port: Int) {
            self.host = host
            self.port = port
        }

        /// `host:port`, or the socket file, for messages.
        public var description: String {
            switch host {
            case .tcp(let h): h.contains(":") ? "[\(h)]:\(port)" : "\(h):\(port)"
            case .socket(let folder): "\(folder)/.s.PGSQL.\(port)"
            }
        }
    }

    /// Which of several servers to use: libpq's `target_session_attrs`.
    public enum SessionAttributes: String, Sendable, Equatable {
        /// The first that answers (for a writer of a catalog, the first that is not a standby: see `PostgresCatalog`).
        case any
        /// One that accepts writes (not in recovery, `transaction_read_only` off).
        case readWrite = "read-write"
        /// One that does not accept writes.
        case readOnly = "read-only"
        /// One that is not a standby.
        case primary
        /// A hot standby (in recovery).
        case standby
        /// A standby if any answers, else any.
        case preferStandby = "prefer-standby"
    }

    /// The servers, in the order they are tried (at least one).
    public var endpoints: [Endpoint]
    /// The first server.
    public var host: Host { endpoints[0].host }
    /// The first server's port.
    public var port: Int { endpoints[0].port }
    public var sessionAttributes: SessionAttributes
    public var user: String
    public var password: String?
    public var database: String
    public var sslMode: SSLMode
    /// Seconds to wait for the connection (`connect_timeout`; default 10).
    public var connectTimeout: Double
    /// The URL as given, without its password: what the store reports as its location.
    public var redacted: String

    /// Whether the password came from the URL or `PGPASSWORD` (else each server's is looked up in ``passwordFile``).
    private var passwordGiven: Bool
    private var passwordFile: String?

    /// `host:port`, or the socket file, for messages (the servers separated by commas).
    public var endpoint: String { endpoints.map(\.description).joined(separator: ",") }

    /// This URL narrowed to each of its servers in turn, each with its own password from the password file.
    public var servers: [PostgresURL] {
        endpoints.map { e in
            var one = self
            one.endpoints = [e]
            if !passwordGiven { one.password = passwordFile.flatMap { one.lookUpPassword(inFile: $0) } }
            return one
        }
    }

    /// Whether `text` is a URL this store takes (`postgres://` or `postgresql://`).
    public static func isPostgresURL(_ text: String) -> Bool {
        guard let scheme = Catalog.urlScheme(text)?.lowercased() else { return false }
        return scheme == "postgres" || scheme == "postgresql"
    }

    /// Parses `url`; ``CatalogError/Code/invalidArgument`` when it is not a PostgreSQL URL this store understands.
    /// `environment` and `home` stand for the process's (tests pass their own).
    public init(_ url: String, environment: [String: String] = ProcessInfo.processInfo.environment,
                home: String? = nil) throws {
        func bad(_ why: String) -> CatalogError {
            CatalogError(.invalidArgument, "not a PostgreSQL URL this build understands: \(why)", path: PostgresURL.withoutPassword(url))
        }
        guard let schemeEnd = url.range(of: "://") else { throw bad("it has no postgres:// scheme") }
        let scheme = url[..<schemeEnd.lowerBound].lowercased()
        guard scheme == "postgres" || scheme == "postgresql" else { throw bad("the scheme is \(scheme), not postgres or postgresql") }
        var rest = Substring(url[schemeEnd.upperBound...])
        if let hash = rest.firstIndex(of: "#") { rest = rest[..<hash] }
        var query: Substring = ""
        if let q = rest.firstIndex(of: "?") {
            query = rest[rest.index(after: q)...]
            rest = rest[..<q]
        }
        var authority = rest, path: Substring = ""
        if let slash = rest.firstIndex(of: "/") {
            authority = rest[..<slash]
            path = rest[rest.index(after: slash)...]
        }
        var userInfo: Substring?
        var hostPort = authority
        if let at = authority.lastIndex(of: "@") {
            userInfo = authority[..<at]
            hostPort = authority[authority.index(after: at)...]
        }
        func decode(_ s: Substring, _ what: String) throws -> String {
            guard let d = String(s).removingPercentEncoding else { throw bad("the \(what) has an invalid %-escape") }
            return d
        }
        var user: String?, password: String?
        if let userInfo {
            if let colon = userInfo.firstIndex(of: ":") {
                user = try decode(userInfo[..<colon], "user name")
                password = try decode(userInfo[userInfo.index(after: colon)...], "password")
            } else {
                user = try decode(userInfo, "user name")
            }
            if user == "" { user = nil }
        }
        // One item per server: [v6]:port, host:port or host (libpq's comma-separated list).
        var hostTexts: [String] = [], portTexts: [String] = []
        for item in hostPort.split(separator: ",", omittingEmptySubsequences: false) {
            var hostText = "", portText = ""
            if item.hasPrefix("[") {
                guard let close = item.firstIndex(of: "]") else { throw bad("an IPv6 address without its closing ]") }
                hostText = String(item[item.index(after: item.startIndex)..<close])
                let after = item[item.index(after: close)...]
                if after.hasPrefix(":") { portText = String(after.dropFirst()) } else if !after.isEmpty { throw bad("text after the IPv6 address") }
            } else if let colon = item.lastIndex(of: ":") {
                hostText = try decode(item[..<colon], "host")
                portText = String(item[item.index(after: colon)...])
            } else {
                hostText = try decode(item, "host")
            }
            hostTexts.append(hostText)
            portTexts.append(portText)
        }
        var database: String? = path.isEmpty ? nil : try decode(path, "database name")
        var sslMode: SSLMode?
        var timeout: Double?
        var attributes: SessionAttributes?
        var kept: [Substring] = []
        for pair in query.split(separator: "&") where !pair.isEmpty {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let key = try decode(parts[0], "parameter name")
            let value = parts.count > 1 ? try decode(parts[1], "parameter \(key)") : ""
            if key != "password" { kept.append(pair) }
            switch key {
            case "host": hostTexts = value.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
            case "port": portTexts = value.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
            case "target_session_attrs":
                guard let a = SessionAttributes(rawValue: value) else {
                    throw bad("target_session_attrs \(value) (any, read-write, read-only, primary, standby or prefer-standby)")
                }
                attributes = a
            case "user": user = value.isEmpty ? nil : value
            case "password": password = value
            case "dbname": database = value.isEmpty ? nil : value
            case "sslmode":
                guard let m = SSLMode(rawValue: value) else {
                    throw bad("sslmode \(value) (disable, prefer, require, verify-ca or verify-full)")
                }
                sslMode = m
            case "connect_timeout":
                guard let t = Double(value), t >= 0 else { throw bad("connect_timeout \(value) is not a number of seconds") }
                timeout = t
            case "application_name": break
            default: throw bad("unknown parameter \(key) (host, port, user, password, dbname, sslmode, connect_timeout, target_session_attrs)")
            }
        }
        func list(_ variable: String) -> [String] {
            environment[variable].map { $0.split(separator: ",", omittingEmptySubsequences: false).map(String.init) } ?? []
        }
        if hostTexts.allSatisfy(\.isEmpty), !list("PGHOST").allSatisfy(\.isEmpty) { hostTexts = list("PGHOST") }
        if portTexts.allSatisfy(\.isEmpty), !list("PGPORT").allSatisfy(\.isEmpty) { portTexts = list("PGPORT") }
        if hostTexts.isEmpty { hostTexts = [""] }
        if portTexts.count <= 1 { portTexts = Array(repeating: portTexts.first ?? "", count: hostTexts.count) }
        guard portTexts.count == hostTexts.count else { throw bad("\(hostTexts.count) hosts but \(portTexts.count) ports") }
        guard hostTexts.count <= 64 else { throw bad("more than 64 hosts") }
        self.endpoints = try zip(hostTexts, portTexts).map { hostText, portText in
            guard let port = Int(portText.isEmpty ? "5432" : portText), (1...65535).contains(port) else {
                throw bad("port \(portText) is not 1…65535")
            }
            let name = hostText.isEmpty ? "/var/run/postgresql" : hostText
            return Endpoint(host: name.hasPrefix("/") ? .socket(folder: name) : .tcp(name), port: port)
        }
        if attributes == nil, let a = environment["PGTARGETSESSIONATTRS"], !a.isEmpty {
            guard let parsed = SessionAttributes(rawValue: a) else {
                throw bad("PGTARGETSESSIONATTRS \(a) (any, read-write, read-only, primary, standby or prefer-standby)")
            }
            attributes = parsed
        }
        self.sessionAttributes = attributes ?? .any
        self.user = user ?? environment["PGUSER"].flatMap { $0.isEmpty ? nil : $0 } ?? PostgresURL.loginName()
        self.database = database ?? environment["PGDATABASE"].flatMap { $0.isEmpty ? nil : $0 } ?? self.user
        if sslMode == nil, let m = environment["PGSSLMODE"], !m.isEmpty {
            guard let parsed = SSLMode(rawValue: m) else { throw bad("PGSSLMODE \(m) (disable, prefer, require, verify-ca or verify-full)") }
            sslMode = parsed
        }
        self.sslMode = sslMode ?? .prefer
        self.connectTimeout = timeout.map { $0 == 0 ? 3600 : $0 } ?? 10
        // The redacted URL: the same text without the password (in the user part or as a parameter).
        var shown = String(url[..<schemeEnd.upperBound])
        if let userInfo { shown += userInfo[..<(userInfo.firstIndex(of: ":") ?? userInfo.endIndex)] + "@" }
        shown += hostPort
        if !path.isEmpty || rest.hasSuffix("/") { shown += "/" + path }
        if !kept.isEmpty { shown += "?" + kept.joined(separator: "&") }
        self.redacted = shown
        self.password = password ?? environment["PGPASSWORD"].flatMap { $0.isEmpty ? nil : $0 }
        self.passwordGiven = self.password != nil
        self.passwordFile = PostgresURL.passwordFile(environment: environment, home: home)
        if self.password == nil, let file = passwordFile { self.password = lookUpPassword(inFile: file) }
    }

    /// `url` with any password dropped, for messages about a URL that does not parse.
    static func withoutPassword(_ url: String) -> String {
        guard let s = url.range(of: "://") else { return url }
        let afterScheme = url[s.upperBound...]
        let authorityEnd = afterScheme.firstIndex(where: { $0 == "/" || $0 == "?" }) ?? afterScheme.endIndex
        guard let at = afterScheme[..<authorityEnd].lastIndex(of: "@"),
              let colon = afterScheme[..<at].firstIndex(of: ":") else { return url }
        return String(url[..<colon]) + String(url[at...])
    }

    static func loginName() -> String {
        if let pw = getpwuid(geteuid()), let name = pw.pointee.pw_name { return String(cString: name) }
        return ProcessInfo.processInfo.environment["USER"] ?? "postgres"
    }

    static func passwordFile(environment: [String: String], home: String?) -> String? {
        if let f = environment["PGPASSFILE"], !f.isEmpty { return f }
        let h = home ?? environment["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? NSHomeDirectory()
        return h + "/.pgpass"
    }

    /// The password for this host, port, database and user in a libpq password file (`hostname:port:database:username:password`
    /// lines, `*` matching anything, `\:` and `\\` escapes). Like libpq, a file that others may read is ignored, and a
    /// unix-socket connection to the default folder also matches `localhost`.
    func lookUpPassword(inFile path: String) -> String? {
        var st = stat()
        // An empty file is read no further: Foundation's reader leaks its buffer on one (found by fuzz-postgres-url).
        guard stat(path, &st) == 0, st.st_mode & S_IFMT == S_IFREG, st.st_mode & 0o077 == 0, st.st_size > 0,
              let data = FileManager.default.contents(atPath: path) else { return nil }
        let hosts: [String]
        switch host {
        case .tcp(let h): hosts = [h]
        case .socket(let folder): hosts = folder == "/var/run/postgresql" || folder == "/tmp" ? [folder, "localhost"] : [folder]
        }
        let wanted: [[String]] = [hosts, [String(port)], [database], [user]]
        for line in String(decoding: data, as: UTF8.self).split(whereSeparator: { $0 == "\n" || $0 == "\r" }) {
            guard !line.hasPrefix("#") else { continue }
            var fields: [String] = [], field = ""
            var escaped = false
            for c in line {
                if escaped { field.append(c); escaped = false } else if c == "\\" { escaped = true } else if c == ":" && fields.count < 4 {
                    fields.append(field)
                    field = ""
                } else { field.append(c) }
            }
            fields.append(field)
            guard fields.count == 5 else { continue }
            if zip(fields.prefix(4), wanted).allSatisfy({ f, w in f == "*" || w.contains(f) }) { return fields[4] }
        }
        return nil
    }
}
