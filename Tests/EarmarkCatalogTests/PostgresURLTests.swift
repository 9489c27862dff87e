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

    @Test("several servers: host:port lists, ?host= and ?port= lists, one port for all, target_session_attrs; each server's own password")
    func severalServers() throws {
        let u = try PostgresURL("postgres://me@db1:5433,[::1]:5434,db3/music?target_session_attrs=read-write", environment: [:], home: "/nonexistent")
        #expect(u.endpoints == [.init(host: .tcp("db1"), port: 5433), .init(host: .tcp("::1"), port: 5434), .init(host: .tcp("db3"), port: 5432)])
        #expect(u.host == .tcp("db1") && u.port == 5433 && u.sessionAttributes == .readWrite)
        #expect(u.endpoint == "db1:5433,[::1]:5434,db3:5432")
        #expect(u.redacted == "postgres://me@db1:5433,[::1]:5434,db3/music?target_session_attrs=read-write")
        #expect(u.servers.map(\.endpoint) == ["db1:5433", "[::1]:5434", "db3:5432"])
        #expect(u.servers.allSatisfy { $0.database == "music" && $0.user == "me" && $0.endpoints.count == 1 && $0.sessionAttributes == .readWrite })
        let q = try PostgresURL("postgres://me@/music?host=db1,db2&port=6000", environment: [:], home: "/nonexistent")
        #expect(q.endpoints.map(\.description) == ["db1:6000", "db2:6000"] && q.sessionAttributes == .any)
        let lists = try PostgresURL("postgres://me@/music?host=/tmp/a,db2&port=6000,6001&target_session_attrs=prefer-standby",
                                    environment: [:], home: "/nonexistent")
        #expect(lists.endpoints == [.init(host: .socket(folder: "/tmp/a"), port: 6000), .init(host: .tcp("db2"), port: 6001)])
        #expect(lists.sessionAttributes == .preferStandby)
        let env = try PostgresURL("postgres:///music", environment: ["PGHOST": "h1,h2", "PGPORT": "7001,7002", "PGTARGETSESSIONATTRS": "standby"],
                                  home: "/nonexistent")
        #expect(env.endpoint == "h1:7001,h2:7002" && env.sessionAttributes == .standby)
        var refused: CatalogError?
        do { _ = try PostgresURL("postgres://h/db", environment: ["PGTARGETSESSIONATTRS": "master"], home: "/nonexistent") } catch let e as CatalogError { refused = e }
        #expect(refused?.code == .invalidArgument)
        // A password given applies to every server; otherwise each server's line of the password file.
        let dir = try TemporaryDirectory("pgpass-several")
        let file = dir.path(".pgpass")
        try "db1:5432:*:me:one\ndb2:5432:*:me:two\n".write(toFile: file, atomically: true, encoding: .utf8)
        chmod(file, 0o600)
        let looked = try PostgresURL("postgres://me@db1,db2,db3/music", environment: [:], home: dir.path)
        #expect(looked.password == "one" && looked.servers.map(\.password) == ["one", "two", nil])
        let given = try PostgresURL("postgres://me:pw@db1,db2/music", environment: [:], home: dir.path)
        #expect(given.servers.map(\.password) == ["pw", "pw"])
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
                      "postgres://u:pw@h/db?color=red", "postgres://u:pw@[::1/db", "/tmp/x.earcat",
                      "postgres://u:pw@h1,h2/db?port=1,2,3", "postgres://u:pw@h1:5432,h2:0/db", "postgres://u:pw@h/db?target_session_attrs=master"])
    func invalid(url: String) throws {
        var e: CatalogError?
        do { _ = try PostgresURL(url, environment: [:], home: "/nonexistent") } catch let error as CatalogError { e = error }
        #expect(e?.code == .invalidArgument)
        #expect(!(e?.description.contains("pw") ?? true), "\(String(describing: e))")
    }
}
