import EarmarkCatalog
@testable import EarmarkMatching
import EarmarkSignature
import EarmarkTestSupport
import Foundation
import Testing

/// Queries and catalogs are untrusted: a signature from another machine, a catalog with a damaged byte.
/// Each must give a clear error, never a crash or an unbounded allocation.
@Suite("Matching: untrusted queries and damaged catalogs")
struct UntrustedInputTests {
    func clipSignature(_ fixture: ReferenceCatalog, dir: TemporaryDirectory) throws -> Signature {
        let clip = try fixture.clip("pingus-4", at: 12.9, into: dir)
        return SignatureGenerator.signature(of: try Fixtures.decode(clip))
    }

    @Test("a query whose peaks leave the band or the duration is refused before it is matched",
          arguments: [0, 1, 2])
    func badQuery(kind: Int) async throws {
        let fixture = try await ReferenceCatalog.shared.value()
        let dir = try TemporaryDirectory("bad-query")
        var sig = try clipSignature(fixture, dir: dir)
        #expect(try fixture.match(sig).matches.first?.track.id == fixture.ids["pingus-4"], "the unedited clip matches")
        let i = sig.peaks.count / 2
        switch kind {
        case 0: sig.peaks[i].bin = UInt16(SignatureConfiguration.current.maxBin)
        case 1: sig.peaks[i].bin = 0
        default: sig.peaks[sig.peaks.count - 1].frame = 1 << 31
        }
        #expect(throws: SignatureError.self) { _ = try fixture.match(sig) }
    }

    /// A copy of the reference catalog in which every tenth stored peak of `stem` has the bin one past the band,
    /// as a damaged byte would leave it.
    func damagedCopy(_ fixture: ReferenceCatalog, stem: String, dir: TemporaryDirectory) throws -> String {
        let path = dir.path("damaged.earcat")
        try Catalog(path: fixture.path, readOnly: true).export(to: path)
        let id = fixture.ids[stem]!
        let hex = try Run.sqlite(path, "SELECT hex(data) FROM track_peaks WHERE track_id = \(id)")
            .trimmingCharacters(in: .whitespacesAndNewlines)
        var bytes = stride(from: 0, to: hex.count, by: 2).map { k -> UInt8 in
            let start = hex.index(hex.startIndex, offsetBy: k)
            return UInt8(hex[start..<hex.index(start, offsetBy: 2)], radix: 16)!
        }
        // Blob: per peak a varint frame delta, then one byte (bin − minBin).
        var k = 0, peak = 0
        let band = SignatureConfiguration.current.maxBin - SignatureConfiguration.current.minBin
        while k < bytes.count {
            while bytes[k] >= 0x80 { k += 1 }
            k += 1
            if peak % 10 == 0 { bytes[k] = UInt8(band) }
            k += 1
            peak += 1
        }
        #expect(peak > 1000, "the track has its peaks stored")
        let newHex = bytes.map { String(format: "%02X", $0) }.joined()
        try Run.sqlite(path, "UPDATE track_peaks SET data = X'\(newHex)' WHERE track_id = \(id)")
        return path
    }

    @Test("stored peaks with a bin past the band are reported as a damaged catalog, by match and by check")
    func damagedPeaks() async throws {
        let fixture = try await ReferenceCatalog.shared.value()
        let dir = try TemporaryDirectory("damaged-peaks")
        let path = try damagedCopy(fixture, stem: "pingus-4", dir: dir)
        let catalog = try Catalog(path: path, readOnly: true)
        let sig = try clipSignature(fixture, dir: dir)
        do {
            _ = try Matcher(catalog: catalog).match(sig)
            Issue.record("matching against damaged peaks did not fail")
        } catch let e as CatalogError {
            #expect(e.code == .damaged)
            #expect(e.message.contains("earmark catalog check"), "\(e)")
        }
        let problems = try catalog.check()
        #expect(problems.contains { $0.contains("track \(fixture.ids["pingus-4"]!)") }, "\(problems)")
        // The undamaged original checks clean.
        #expect(try Catalog(path: fixture.path, readOnly: true).check().isEmpty)
    }

    @Test("pending landmarks cut inside a landmark, or an index segment with a damaged directory, are reported as a damaged catalog")
    func damagedPostings() async throws {
        let fixture = try await ReferenceCatalog.shared.value()
        let dir = try TemporaryDirectory("damaged-postings")
        let sig = try clipSignature(fixture, dir: dir)
        // An export holds every track's landmarks as pending rows: cut the last byte of each.
        let path = dir.path("damaged.earcat")
        try Catalog(path: fixture.path, readOnly: true).export(to: path)
        try Run.sqlite(path, "UPDATE pending_postings SET data = substr(data, 1, length(data) - 1)")
        let catalog = try Catalog(path: path, readOnly: true)
        #expect(throws: CatalogError.self) { _ = try Matcher(catalog: catalog).match(sig) }
        #expect(!(try catalog.check()).isEmpty)
        // A copy whose index segment's bucket directory points past its data.
        let copy = dir.path("segment.earcat")
        try Catalog(path: fixture.path, readOnly: true).export(to: copy)
        try Catalog(path: copy).flushIndex()
        let folder = copy + "-index"
        let segment = try #require(try FileManager.default.contentsOfDirectory(atPath: folder).first { $0.hasSuffix(".seg") })
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: folder + "/" + segment))
        try handle.seek(toOffset: 64)
        try handle.write(contentsOf: Data(repeating: 0xFF, count: 1 << 16))
        try handle.close()
        let damaged = try Catalog(path: copy, readOnly: true)
        do {
            _ = try Matcher(catalog: damaged).match(sig)
            Issue.record("matched")
        } catch let e as CatalogError {
            #expect(e.code == .damaged)
        }
        #expect(!(try damaged.check()).isEmpty)
    }
}
