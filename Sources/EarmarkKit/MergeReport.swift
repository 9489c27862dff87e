import EarmarkCatalog

/// What became of each track of a merged catalog: the object `earmark catalog merge --json` prints and
/// `POST /v1/catalog/import` answers.
///
/// Both build it from the result of ``CatalogStore/merge(from:batchPostings:progress:)``, so the two cannot drift.
/// Encoded, it is `{results: [{sourceId, status, track}], added, duplicate}`.
public struct MergeReport: Encodable, Sendable {
    /// One track of the merged file.
    public struct Entry: Encodable, Sendable {
        /// The track's id in the merged file.
        public var sourceId: Int64
        /// `added` (copied in as `track`) or `duplicate` (its audio is here already, as `track`).
        public var status: String
        /// The track as this catalog holds it: the new copy, or the stored track with the same audio.
        public var track: Track

        public init(sourceId: Int64, result: CatalogAddResult) {
            self.sourceId = sourceId
            switch result {
            case .added(let t): (status, track) = ("added", t)
            case .duplicate(let t): (status, track) = ("duplicate", t)
            }
        }
    }

    /// Every track of the merged file, in its order.
    public var results: [Entry]
    /// Tracks copied in.
    public var added: Int
    /// Tracks skipped because their audio was here already.
    public var duplicate: Int

    /// The report of a merge's result.
    public init(_ merged: [(source: Track, result: CatalogAddResult)]) {
        results = merged.map { Entry(sourceId: $0.source.id, result: $0.result) }
        added = results.count { $0.status == "added" }
        duplicate = results.count - added
    }
}
