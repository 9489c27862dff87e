// earmark-bench: indexes a corpus built by ../shared/corpus/build_corpus.py, runs a query set made
// by make_queries.py, and prints accuracy, speed and size figures. See tools/bench.sh.
import EarmarkKit
import Foundation

struct Options {
    var corpus = ""
    var queries = ""
    var catalog = "/tmp/earmark-bench.earcat"
    var reuse = false
    var limit = Int.max
    var dump: String?
    var open = false
    /// Landmark design of a new catalog: "pairs" (the default) or "triplets" (experimental).
    var landmarks = "pairs"
    /// `NAME=VALUE` replacements of the matcher's options (``MatchOptions/override(_:)``).
    var matchOptions: [String] = []
}

func parseOptions() -> Options {
    var o = Options()
    var args = CommandLine.arguments.dropFirst().makeIterator()
    while let a = args.next() {
        switch a {
        case "--corpus": o.corpus = args.next() ?? ""
        case "--queries": o.queries = args.next() ?? ""
        case "--catalog": o.catalog = args.next() ?? o.catalog
        case "--reuse": o.reuse = true
        case "--limit": o.limit = Int(args.next() ?? "") ?? Int.max
        case "--dump": o.dump = args.next()
        case "--open": o.open = true
        case "--landmarks": o.landmarks = args.next() ?? ""
        case "--match-option":
            let text = args.next() ?? ""
            var probe = MatchOptions.default
            guard probe.override(text) else { print("--match-option: NAME=VALUE, NAME one of \(MatchOptions.overridable.joined(separator: ", "))"); exit(2) }
            o.matchOptions.append(text)
        default:
            FileHandle.standardError.write(Data("""
            usage: earmark-bench --corpus DIR/corpus/public --queries DIR/queries/NAME [--catalog PATH] [--reuse] [--limit N] [--dump results.tsv] [--open] [--landmarks pairs|triplets] [--match-option NAME=VALUE]…
              --reuse   keep an existing catalog at --catalog instead of re-indexing
              --open    report the best candidate of every query even below the no-match threshold (for calibration)
              --landmarks  the landmark design of a new catalog: pairs (default) or triplets (experimental)
              --match-option  replaces one of the matcher's options, for experiments (e.g. skewFanout=12); repeatable

            """.utf8))
            exit(a == "--help" ? 0 : 2)
        }
    }
    guard !o.corpus.isEmpty, !o.queries.isEmpty else { print("need --corpus and --queries"); exit(2) }
    guard ["pairs", "triplets"].contains(o.landmarks) else { print("--landmarks: pairs or triplets"); exit(2) }
    return o
}

func readTSV(_ path: String) -> [[String: String]] {
    guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { print("cannot read \(path)"); exit(2) }
    let lines = text.split(separator: "\n").map { $0.split(separator: "\t", omittingEmptySubsequences: false).map(String.init) }
    guard let header = lines.first else { return [] }
    return lines.dropFirst().map { row in
        Dictionary(uniqueKeysWithValues: zip(header, row + Array(repeating: "", count: max(0, header.count - row.count))))
    }
}

func seconds(_ d: Duration) -> Double { Double(d.components.seconds) + Double(d.components.attoseconds) * 1e-18 }
func peakRSSMB() -> Double {
    var u = rusage()
    getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &u)
    return Double(u.ru_maxrss) / 1024
}
func percentile(_ xs: [Double], _ p: Double) -> Double {
    guard !xs.isEmpty else { return .nan }
    let s = xs.sorted()
    return s[min(s.count - 1, Int((Double(s.count - 1) * p).rounded()))]
}
func pad(_ s: String, _ n: Int) -> String { s.count >= n ? s : s + String(repeating: " ", count: n - s.count) }
func fmt(_ x: Double, _ d: Int = 1) -> String { String(format: "%.\(d)f", x) }

let o = parseOptions()
let manifest = readTSV(o.corpus + "/manifest.tsv")
let clock = ContinuousClock()

// --- Index ---------------------------------------------------------------------------------------
var idOf: [String: String] = [:]  // catalog track title → corpus id
if !o.reuse || !FileManager.default.fileExists(atPath: o.catalog) {
    for suffix in ["", "-wal", "-shm", "-index"] { try? FileManager.default.removeItem(atPath: o.catalog + suffix) }
    let files = manifest.map { $0["path"]! }
    // The ingestor keeps the design a catalog was created with.
    if o.landmarks == "triplets" { _ = try Catalog(path: o.catalog, create: true, configuration: .experimentalTriplets) }
    let ingestor = Ingestor(catalogPath: o.catalog)
    let t0 = clock.now
    let outcomes = try await ingestor.add(files: files)
    let wall = seconds(clock.now - t0)
    let audio = outcomes.reduce(0) { $0 + $1.audioSeconds }
    let failed = outcomes.filter { $0.status == .failed }
    for f in failed { print("index failure: \(f.path): \(f.error ?? "")") }
    print("indexing: \(outcomes.count) files, \(fmt(audio / 3600, 2)) h of audio in \(fmt(wall, 2)) s wall = \(fmt(audio / wall, 0)) x real-time (decode included, \(ProcessInfo.processInfo.activeProcessorCount) cores)")
}
let catalog = try Catalog(path: o.catalog, readOnly: true)
let stats = try catalog.stats()
for t in try catalog.tracks() { if let title = t.title { idOf[title] = title } }
print("index: \(stats.trackCount) tracks, \(fmt(stats.totalDuration / 3600, 2)) h, \(stats.landmarkCount) postings (\(fmt(Double(stats.landmarkCount) / stats.totalDuration, 1))/s), \(stats.fileBytes) bytes = \(fmt(stats.bytesPerHour / 1e6, 3)) MB per hour of audio")

// Either track of an overlapping pair is a right answer.
var overlaps: [String: Set<String>] = [:]
let overlapPath = (o.corpus as NSString).deletingLastPathComponent + "/overlaps.tsv"
if FileManager.default.fileExists(atPath: overlapPath) {
    for r in readTSV(overlapPath) {
        if let a = r["id_a"], let b = r["id_b"] { overlaps[a, default: []].insert(b); overlaps[b, default: []].insert(a) }
    }
}

// --- Queries -------------------------------------------------------------------------------------
let queries = Array(readTSV(o.queries + "/queries.tsv").prefix(o.limit))
let matcher = Matcher(catalog: catalog)
if let v = ProcessInfo.processInfo.environment["EARMARK_VERIFY_RANK"].flatMap(Int.init) { matcher.options.verifyRankLimit = v }
for text in o.matchOptions { _ = matcher.options.override(text) }
if o.open {
    matcher.options.decisiveSignificance = matcher.options.minimumSignificance + 5
    matcher.options.minimumSignificance = -1e9
    matcher.options.minimumHits = 0
    matcher.options.minimumVerifiedPeaks = 0
}
struct Outcome { var q: [String: String]; var top: Match?; var ms: Double; var error: String?; var matchMs: Double = 0; var signature: Signature? }
var results: [Outcome] = []
for q in queries {
    let t0 = clock.now
    var top: Match?
    var err: String?
    var matchMs = 0.0
    var signature: Signature?
    do {
        let f = try Fingerprinter.fingerprint(path: q["path"]!, digest: false)
        let t1 = clock.now
        top = try matcher.match(f.signature).matches.first
        matchMs = seconds(clock.now - t1) * 1000
        signature = f.signature
    } catch { err = "\(error)" }
    results.append(Outcome(q: q, top: top, ms: seconds(clock.now - t0) * 1000, error: err, matchMs: matchMs,
                           signature: q["kind"] == "pos" ? signature : nil))
}

func trackID(_ m: Match?) -> String? { m?.track.title }
@MainActor func correct(_ r: Outcome) -> Bool {
    guard let want = r.q["track_id"], let got = trackID(r.top) else { return false }
    return got == want || overlaps[want, default: []].contains(got)
}

// A clip cut where the reference itself is digital silence (P0018 is silent from 22.6 s to its end) has
// nothing to identify: it is reported apart and left out of the recall table.
let catalogTracks = try catalog.tracks()
let trackIDOf = Dictionary(catalogTracks.compactMap { t in t.title.map { ($0, t.id) } }, uniquingKeysWith: { a, _ in a })
var silentTruth = 0
@MainActor func silentReference(_ r: Outcome) -> Bool {
    guard r.error != nil, let id = r.q["track_id"].flatMap({ trackIDOf[$0] }), let start = Double(r.q["offset_s"] ?? ""),
          let length = Double(r.q["duration_s"] ?? ""), let peaks = try? catalog.peaks(trackID: id) else { return false }
    let fd = catalog.configuration.frameDuration
    let lo = UInt32(max(0, start / fd)), hi = UInt32((start + length * 1.1) / fd)
    return !peaks.contains { $0.frame >= lo && $0.frame <= hi }
}
let positives = results.filter { r in
    guard r.q["kind"] == "pos" else { return false }
    if silentReference(r) { silentTruth += 1; return false }
    return true
}
let negatives = results.filter { $0.q["kind"] == "neg" }
let degs = Array(Set(positives.map { $0.q["degradation"]! })).sorted()
let durs = Array(Set(positives.map { Double($0.q["duration_s"]!)! })).sorted()
print("")
print("recall@1 (correct / clips) by degradation and clip length")
print(pad("degradation", 12) + durs.map { pad(fmt($0, 0) + " s", 16) }.joined() + "all")
for d in degs {
    var line = pad(d, 12)
    var allC = 0, allN = 0
    for s in durs {
        let cell = positives.filter { $0.q["degradation"] == d && Double($0.q["duration_s"]!)! == s }
        let c = cell.filter(correct).count
        allC += c; allN += cell.count
        line += pad(cell.isEmpty ? "-" : "\(fmt(100 * Double(c) / Double(cell.count)))% (\(c)/\(cell.count))", 16)
    }
    print(line + "\(fmt(100 * Double(allC) / Double(max(1, allN))))%")
}
if silentTruth > 0 { print("left out: \(silentTruth) clips cut from digital silence in their reference (no peaks there; the matcher answers \"no usable sound\")") }
let totalCorrect = positives.filter(correct).count
print("overall recall@1: \(fmt(100 * Double(totalCorrect) / Double(max(1, positives.count)), 2))% (\(totalCorrect)/\(positives.count))")

// The clips were cut on ffmpeg's timeline. Decoders can disagree on where a track starts (an Ogg stream
// whose first granule position says to drop leading samples: libsndfile and libvorbisfile drop them,
// ffmpeg keeps them), so each track's lag is measured by matching ffmpeg's decode of its first 30 s.
var timelineLag: [String: Double] = [:]
let lagClip = NSTemporaryDirectory() + "earmark-bench-lag-\(getpid()).wav"
defer { try? FileManager.default.removeItem(atPath: lagClip) }
for t in manifest {
    let ffmpeg = Process()
    ffmpeg.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    ffmpeg.arguments = ["ffmpeg", "-v", "error", "-y", "-t", "30", "-i", t["path"]!, "-ac", "1", "-ar", "44100", "-c:a", "pcm_s16le", lagClip]
    guard (try? ffmpeg.run()) != nil else { break }
    ffmpeg.waitUntilExit()
    guard ffmpeg.terminationStatus == 0, let f = try? Fingerprinter.fingerprint(path: lagClip, digest: false),
          let m = try? matcher.match(f.signature).matches.first(where: { $0.track.title == t["id"] }) else { continue }
    // A track that repeats can match elsewhere too: a lag counts only when the start fits clearly worse.
    let atStart = (try? matcher.evidence(of: f.signature, trackID: m.track.id, offset: 0)) ?? 0
    let atMatch = (try? matcher.evidence(of: f.signature, trackID: m.track.id, offset: m.matchOffset)) ?? 0
    if abs(m.matchOffset) > 0.02, atStart < 0.9 * atMatch { timelineLag[t["id"]!] = m.matchOffset }
}
if !timelineLag.isEmpty {
    let list = timelineLag.sorted { $0.key < $1.key }.map { "\($0.key) \(fmt($0.value, 3)) s" }.joined(separator: ", ")
    print("reference timelines: ffmpeg's decode (which cut the clips) starts elsewhere in earmark's for \(timelineLag.count) of \(manifest.count) tracks (\(list)); their truths are shifted by that")
}

var offsetErrors: [Double] = []
var offsetWithin = 0
var offsetWithinAlt = 0
var equallyGood = 0
var misplaced: [String] = []
for r in positives where correct(r) && trackID(r.top) == r.q["track_id"] {
    let m = r.top!
    let truth = Double(r.q["offset_s"]!)! + (timelineLag[r.q["track_id"]!] ?? 0)
    // For speed and tempo clips the truth is still where the clip starts in the reference.
    let e = abs(m.matchOffset - truth)
    offsetErrors.append(e)
    if e <= 0.1 { offsetWithin += 1 }
    if e <= 0.1 || m.alternativeOffsets.contains(where: { abs($0 - truth) <= 0.1 }) { offsetWithinAlt += 1 }
    guard e > 0.1, let sig = r.signature else { continue }
    // Repeated music: the clip's own peaks fit the reported place at least as well as the true one (to 10 %),
    // so no matcher could tell them apart from this clip.
    let skew = Skew(time: m.timeScale, frequency: 1 + m.frequencySkew)
    let atTruth = (try? matcher.evidence(of: sig, trackID: m.track.id, offset: truth, skew: skew)) ?? 0
    let atReported = (try? matcher.evidence(of: sig, trackID: m.track.id, offset: m.matchOffset, skew: skew)) ?? 0
    if atTruth <= 1.1 * atReported { equallyGood += 1 } else {
        misplaced.append("\(r.q["qid"]!) \(r.q["track_id"]!) \(r.q["degradation"]!) \(r.q["duration_s"]!) s: \(fmt(m.matchOffset, 2)) for \(fmt(truth, 2)) (evidence \(fmt(atReported, 1)) vs \(fmt(atTruth, 1)) there)")
    }
}
let n = offsetErrors.count
print("offset error on correct matches: median \(fmt(percentile(offsetErrors, 0.5) * 1000, 1)) ms, p95 \(fmt(percentile(offsetErrors, 0.95) * 1000, 1)) ms, max \(fmt((offsetErrors.max() ?? 0) * 1000, 1)) ms; within 0.1 s: \(offsetWithin)/\(n) (\(fmt(100 * Double(offsetWithin) / Double(max(1, n))))%); counting the alternative offsets reported for repeating music: \(offsetWithinAlt)/\(n)")
print("  of the \(n - offsetWithin) further off: \(equallyGood) where the clip fits the reported place as well as the true one (repeated music: the clip cannot tell them apart), \(misplaced.count) where it fits the truth better (\(fmt(100 * Double(offsetWithin + equallyGood) / Double(max(1, n))))% right or indistinguishable)")
for line in misplaced.prefix(12) { print("  misplaced \(line)") }

// Speed clips: the reported skew against the truth (sox speed r raises pitch by r − 1).
/// speed_pN / speed_mN: played (100 ± N) % fast.
func speedRate(_ degradation: String) -> Double? {
    guard degradation.hasPrefix("speed_"), let n = Double(degradation.dropFirst(7)) else { return nil }
    return degradation.dropFirst(6).first == "p" ? 1 + n / 100 : 1 - n / 100
}
var skewErrors: [Double] = []
for r in positives where correct(r) {
    if let rate = speedRate(r.q["degradation"]!), let m = r.top { skewErrors.append(abs(m.frequencySkew - (rate - 1))) }
}
if !skewErrors.isEmpty {
    print("frequencySkew error on correct speed-change matches: median \(fmt(percentile(skewErrors, 0.5) * 100, 2)) pp, max \(fmt((skewErrors.max() ?? 0) * 100, 2)) pp; within 0.5 pp: \(skewErrors.filter { $0 <= 0.005 }.count)/\(skewErrors.count)")
}

let fps = negatives.filter { $0.top != nil }
print("false positives on negative clips: \(fps.count)/\(negatives.count) = \(fmt(100 * Double(fps.count) / Double(max(1, negatives.count)), 2))%")
for f in fps { print("  false positive \(f.q["qid"]!) \(f.q["source_id"]!) → \(trackID(f.top) ?? "") score \(f.top!.score) sig \(fmt(f.top!.significance, 2))") }
let errors = results.filter { $0.error != nil }
if !errors.isEmpty { print("query errors: \(errors.count) (e.g. \(errors[0].q["qid"]!): \(errors[0].error!))") }

let lat10 = results.filter { $0.q["duration_s"] == "10" }.map(\.ms)
let latAll = results.map(\.ms)
let skewedPrefixes = ["speed_", "pitch_", "tempo_"]
let plain10 = results.filter { r in
    r.q["duration_s"] == "10" && r.top != nil && !skewedPrefixes.contains { r.q["degradation"]!.hasPrefix($0) }
}.map(\.ms)
print("query latency, matched 10-s clips without speed/pitch/tempo change: median \(fmt(percentile(plain10, 0.5), 2)) ms, p95 \(fmt(percentile(plain10, 0.95), 2)) ms")
print("query latency (in-process, decode + signature + lookup + scoring): 10-s clips median \(fmt(percentile(lat10, 0.5), 2)) ms, p95 \(fmt(percentile(lat10, 0.95), 2)) ms; all clips median \(fmt(percentile(latAll, 0.5), 2)) ms, p95 \(fmt(percentile(latAll, 0.95), 2)) ms")
print("  of which matching (lookup + scoring + verification): 10-s clips median \(fmt(percentile(results.filter { $0.q["duration_s"] == "10" }.map(\.matchMs), 0.5), 2)) ms")
print("peak memory (max RSS): \(fmt(peakRSSMB(), 0)) MB")

if let dump = o.dump {
    var out = "qid\tkind\tdegradation\tduration_s\ttruth\toffset_s\ttop\tscore\tsignificance\trunner_up\tmatch_offset\tms\tverified\ttested\tfrequency_skew\ttime_scale\n"
    for r in results {
        out += "\(r.q["qid"]!)\t\(r.q["kind"]!)\t\(r.q["degradation"]!)\t\(r.q["duration_s"]!)\t\(r.q["track_id"] ?? "")\t\(r.q["offset_s"] ?? "")\t"
        out += "\(trackID(r.top) ?? "")\t\(r.top?.score ?? 0)\t\(r.top.map { fmt($0.significance, 2) } ?? "")\t\(r.top?.runnerUpScore ?? 0)\t\(r.top.map { fmt($0.matchOffset, 3) } ?? "")\t\(fmt(r.ms, 2))\t\(r.top?.verifiedPeaks ?? 0)\t\(r.top?.queryPeaks ?? 0)\t\(r.top.map { fmt($0.frequencySkew, 4) } ?? "")\t\(r.top.map { fmt($0.timeScale, 4) } ?? "")\n"
    }
    try out.write(toFile: dump, atomically: true, encoding: .utf8)
}
