import EarmarkCatalog
import EarmarkTestSupport
import Foundation
import Testing

@Suite("PostgresURL: the forms libpq takes")
struct PostgresURLTests {
    @Test("a full URL: user, password, host, port, database, sslmode; the location leaves the password out")
    func fullURL() throws {
        let u = try PostgresURL("postgres://earmark:s3cr%40t@db.example:6543/music?sslmode=require", environment: [:], home: "/nonexistent")
        #expect(u.host == .tcp("db.example") && u.port == 6543 && u.user == "earmark" && u.password == "s3cr@t")
        #expect(u.database == "music" && u.sslMode == .require)
        #expect(u.redacted == "postgres://earmark@db.example:6543/music?sslmode=require")
        #expect(u.endpoint == "db.example:6543")
        let q = try PostgresURL("postgresql://earmark@db.example/music?password=hidden&sslmode=disable", environment: [:], home: "/nonexistent")
        #expect(q.password == "hidden" && q.port == 5432 && q.sslMode == .disable)
        #expect(q.redacted == "postgresql://earmark@db.example/music?sslmode=disable")
        // No user name, only a password (found by fuzz-postgres-url: the password was shown as the user).
        let p = try PostgresURL("postgres://:s3cret@db.example/music", environment: [:], home: "/nonexistent")
        #expect(p.password == "s3cret" && p.redacted == "postgres://@db.example/music")
    }

    @Test("a unix socket folder as ?host= or %-encoded host, an IPv6 address, and libpq's defaults")
    func hostsAndDefaults() throws {
        let s = try PostgresURL("postgres://me@/cat?host=/tmp/pg&port=5999", environment: [:], home: "/nonexistent")
        #expect(s.host == .socket(folder: "/tmp/pg") && s.port == 5999 && s.endpoint == "/tmp/pg/.s.PGSQL.5999")
        let e = try PostgresURL("postgres://me@%2Fvar%2Frun%2Fpostgresql/cat", environment: [:], home: "/nonexistent")
        #expect(e.host == .socket(folder: "/var/run/postgresql"))
        let v6 = try PostgresURL("postgres://me@[::1]:5433/cat", environment: [:], home: "/nonexistent")
        #expect(v6.host == .tcp("::1") && v6.port == 5433 && v6.endpoint == "[::1]:5433")
        let d = try PostgresURL("postgres://", environment: ["PGUSER": "alice"], home: "/nonexistent")
        #expect(d.host == .socket(folder: "/var/run/postgresql") && d.port == 5432 && d.user == "alice" && d.database == "alice")
        #expect(d.sslMode == .prefer && d.password == nil)
        let env = try PostgresURL("postgres://h/db", environment: ["PGPORT": "7000", "PGPASSWORD": "envpass", "PGUSER": "bob"], home: "/nonexistent")
        #expect(env.port == 7000 && env.password == "envpass" && env.user == "bob")
        let wins = try PostgresURL("postgres://bob:urlpass@h/db", environment: ["PGPASSWORD": "envpass"], home: "/nonexistent")
        #expect(wins.password == "urlpass")
    }

    @Test("~/.pgpass as libpq reads it: first matching line, * wildcards, \\: escapes; ignored when others may read it")
    func passwordFile() throws {
        let dir = try TemporaryDirectory("pgpass")
        let file = dir.path(".pgpass")
        try """
        # comment
        other.example:5432:*:earmark:wrong
        db.example:6543:music:earmark:pa\\:ss
        *:*:*:earmark:fallback
        /tmp/pg:5999:*:*:socketpass

        """.write(toFile: file, atomically: true, encoding: .utf8)
        chmod(file, 0o600)
        #expect(try PostgresURL("postgres://earmark@db.example:6543/music", environment: [:], home: dir.path).password == "pa:ss")
        #expect(try PostgresURL("postgres://earmark@elsewhere/x", environment: [:], home: dir.path).password == "fallback")
        #expect(try PostgresURL("postgres://zed@/x?host=/tmp/pg&port=5999", environment: [:], home: dir.path).password == "socketpass")
        #expect(try PostgresURL("postgres://zed@db.example/x", environment: [:], home: dir.path).password == nil)
        #expect(try PostgresURL("postgres://earmark@elsewhere/x", environment: ["PGPASSFILE": file], home: "/nonexistent").password == "fallback")
        chmod(file, 0o644)
        #expect(try PostgresURL("postgres://earmark@elsewhere/x", environment: [:], home: dir.path).password == nil)
    }

    @Test("what is not a PostgreSQL URL is .invalidArgument, and the message holds no password",
          arguments: ["mysql://u:pw@h/db", "postgres://u:pw@h/db?sslmode=maybe", "postgres://u:pw@h:99999/db",
                      "postgres://u:pw@h/db?color=red", "postgres://u:pw@[::1/db", "/tmp/x.earcat"])
    func invalid(url: String) throws {
        var e: CatalogError?
        do { _ = try PostgresURL(url, environment: [:], home: "/nonexistent") } catch let error as CatalogError { e = error }
        #expect(e?.code == .invalidArgument)
        #expect(!(e?.description.contains("pw") ?? true), "\(String(describing: e))")
    }
}
