import EarmarkCatalog
import EarmarkCatalogPostgres
import EarmarkMatching
import EarmarkSignature
import EarmarkTestSupport
import Foundation
import Testing

// A primary and a hot standby (streaming replication, PostgresServer(standbyOf:)), both throwaway servers.
@Suite("PostgresCatalog on a hot standby", .enabled(if: PostgresServer.testsEnabled))
struct StandbyTests {
    @Test("a standby answers as its primary; with replay paused a new track is not seen at all, then whole; it refuses writes; promoted, it takes them, also through one URL naming both servers")
    func standby() async throws {
        let reference = try await ReferenceCatalog.shared.value()
        let primary = try PostgresServer()
        defer { primary.stop() }
        let dir = try TemporaryDirectory("pg-standby")
        try Catalog(path: reference.path, readOnly: true).export(to: dir.path("s.earcat"))
        let writer = try PostgresCatalog(url: primary.url, create: true)
        writer.flushPostings = 20_000
        _ = try writer.merge(from: try Catalog(path: dir.path("s.earcat"), readOnly: true))
        #expect(try writer.indexLayout().segments >= 1)
        let standby = try PostgresServer(standbyOf: primary)
        defer { standby.stop() }
        try standby.waitForReplay(of: primary)

        // The same answers on degraded real clips from either server.
        let onPrimary = try PostgresCatalog(url: primary.url, readOnly: true)
        let onStandby = try PostgresCatalog(url: standby.url, readOnly: true)
        #expect(try onStandby.trackCount() == onPrimary.trackCount())
        for (k, (stem, offset)) in [("pingus-4", 40.0), ("sorcerer", 30.0)].enumerated() {
            let clip = dir.file("\(stem).wav")
            try Fixtures.cut(try reference.audio.reference(stem), start: offset, seconds: 10, to: clip)
            let signature = SignatureGenerator.signature(of: Signal.addingNoise(to: try Fixtures.decode(clip), snrDB: 5, seed: UInt64(k + 7)))
            let answer = try Matcher(catalog: onStandby).match(signature)
            #expect(answer.matches.first?.track.title == stem, "\(stem)")
            #expect(answer == (try Matcher(catalog: onPrimary).match(signature)))
        }

        // Replay paused: a track added and indexed on the primary is invisible on the standby, postings included.
        let before = try onStandby.trackCount()
        try standby.sql("SELECT pg_wal_replay_pause()")
        let (track, landmarks) = syntheticTracks(1, seed: 900)[0]
        guard case .added(let added) = try writer.add(track, landmarks: landmarks, peaks: randomPeaks(seed: 9, count: 300)) else {
            Issue.record("the synthetic track was a duplicate")
            return
        }
        try writer.flushIndex()
        let hashes = Array(Set(landmarks.map(\.hash))).sorted()
        func postingsOfNew(_ store: PostgresCatalog) throws -> Int {
            try postingMultiset(store, hashes).filter { $0.track == track.contentHash }.count
        }
        #expect(try postingsOfNew(onPrimary) == added.landmarkCount)
        try await Task.sleep(for: .milliseconds(300))
        #expect(try onStandby.trackCount() == before)
        #expect(try postingsOfNew(onStandby) == 0)
        #expect(try onStandby.tracks(ids: [added.id]).isEmpty)
        try standby.sql("SELECT pg_wal_replay_resume()")
        try standby.waitForReplay(of: primary)
        #expect(try onStandby.trackCount() == before + 1)
        #expect(try postingsOfNew(onStandby) == added.landmarkCount)

        // Writes: refused on a standby, whether opened read-only or not.
        #expect(catalogError { _ = try onStandby.add(NewTrack(duration: 10, contentHash: "x"), landmarks: [], peaks: []) }?.code == .readOnly)
        let refused = catalogError { _ = try PostgresCatalog(url: standby.url) }
        #expect(refused?.code == .readOnly && refused?.message.contains("standby") == true, "\(String(describing: refused))")

        // One URL naming both servers, the standby first (libpq's form): a writer takes the primary; a reader the first
        // that answers, or the kind target_session_attrs asks for.
        func both(_ first: PostgresServer, _ second: PostgresServer, _ attributes: String? = nil) -> String {
            "postgres://postgres@127.0.0.1:\(first.port),127.0.0.1:\(second.port)/\(primary.database)?sslmode=disable"
                + (attributes.map { "&target_session_attrs=\($0)" } ?? "")
        }
        let at = (primary: "127.0.0.1:\(primary.port)", standby: "127.0.0.1:\(standby.port)")
        #expect(try PostgresCatalog(url: both(standby, primary)).target.endpoint == at.primary)
        #expect(try PostgresCatalog(url: both(standby, primary), readOnly: true).target.endpoint == at.standby)
        #expect(try PostgresCatalog(url: both(primary, standby, "standby"), readOnly: true).target.endpoint == at.standby)
        #expect(try PostgresCatalog(url: both(primary, standby, "prefer-standby"), readOnly: true).target.endpoint == at.standby)
        #expect(try PostgresCatalog(url: both(standby, primary, "read-write"), readOnly: true).target.endpoint == at.primary)
        #expect(try PostgresCatalog(url: both(standby, primary, "primary"), readOnly: true).trackCount() == before + 1)
        let noStandby = catalogError { _ = try PostgresCatalog(url: primary.url + "&target_session_attrs=standby", readOnly: true) }
        #expect(noStandby?.code == .unavailable && noStandby?.message.contains("not a standby") == true, "\(String(describing: noStandby))")

        // The primary lost: no server of the two takes writes (unavailable: try again later); the standby promoted, the
        // same URL finds it. What it held is whole.
        primary.halt()
        let lost = catalogError { _ = try PostgresCatalog(url: both(standby, primary)) }
        #expect(lost?.code == .unavailable && lost?.message.contains(at.primary) == true && lost?.message.contains(at.standby) == true,
                "\(String(describing: lost))")
        try standby.promote()
        let promoted = try PostgresCatalog(url: both(primary, standby))
        #expect(promoted.target.endpoint == at.standby)
        let (late, lateLandmarks) = syntheticTracks(1, seed: 901)[0]
        guard case .added = try promoted.add(late, landmarks: lateLandmarks, peaks: []) else {
            Issue.record("the late track was a duplicate")
            return
        }
        #expect(try promoted.trackCount() == before + 2)
        #expect(try promoted.check().isEmpty)
    }
}
