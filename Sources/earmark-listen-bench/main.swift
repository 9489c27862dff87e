// earmark-listen-bench: live-matching figures on the public corpus, through the same StreamMatcher and
// StreamingSession that `earmark listen` runs (audio fed as 0.1-s buffers, no sleeping). See tools/listen-bench.sh.
//
//   time to first match: a stream of non-catalog music, then a catalog track from a random place;
//                        seconds from the track's start to its first correct match (clean, babble 5 dB)
//   false matches:       every non-catalog track back to back
//   cost:                processing seconds per second of audio (= share of one core at real-time pace)
//   memory:              resident size after 3 and after 30 minutes of stream
import EarmarkDSP
import EarmarkKit
import Foundation

struct Options {
    var corpus = ""
    var negative = ""
    var catalog = "/tmp/earmark-bench.earcat"
    var babble = ""
    var tracks = 40
    var seed: UInt64 = 1
    var lead = 8.0
    var minutes = 30.0
    var negativeMinutes = 15.0
    var landmarks = "pairs"
    /// Whose stream rules to use (nil: the catalog's design), and overrides of two of them, for tuning.
    var rules: String?
    var minimumHits: Int?
    var supportingHits: Int?
}

func parseOptions() -> Options {
    var o = Options()
    var args = CommandLine.arguments.dropFirst().makeIterator()
    while let a = args.next() {
        switch a {
        case "--corpus": o.corpus = args.next() ?? ""
        case "--negative": o.negative = args.next() ?? ""
        case "--catalog": o.catalog = args.next() ?? o.catalog
        case "--babble": o.babble = args.next() ?? ""
        case "--tracks": o.tracks = Int(args.next() ?? "") ?? o.tracks
        case "--seed": o.seed = UInt64(args.next() ?? "") ?? 1
        case "--minutes": o.minutes = Double(args.next() ?? "") ?? o.minutes
        case "--negative-minutes": o.negativeMinutes = Double(args.next() ?? "") ?? o.negativeMinutes
        case "--landmarks": o.landmarks = args.next() ?? ""
        case "--rules": o.rules = args.next() ?? ""
        case "--minimum-hits": o.minimumHits = Int(args.next() ?? "") ?? -1
        case "--supporting-hits": o.supportingHits = Int(args.next() ?? "") ?? -1
        default:
            FileHandle.standardError.write(Data("""
            usage: earmark-listen-bench --corpus DIR/corpus/public --negative DIR/corpus/negative --babble babble.wav
                                        [--catalog PATH] [--tracks N] [--seed S] [--minutes M] [--negative-minutes M]
                                        [--landmarks pairs|triplets] [--rules pairs|triplets] [--minimum-hits N] [--supporting-hits N]
              --minutes: length of the memory stream; --negative-minutes: non-catalog music streamed for false matches
              The catalog must hold the public corpus (earmark-bench builds it); it is indexed here when missing.
              --landmarks: the landmark design of a new catalog (an existing one must have it): pairs (default) or triplets
              --rules: take the stream rules of this design instead of the catalog's (StreamingOptions.matchOptions(for:));
              --minimum-hits, --supporting-hits: override those two rules (for tuning)

            """.utf8))
            exit(a == "--help" ? 0 : 2)
        }
    }
    guard !o.corpus.isEmpty, !o.negative.isEmpty, !o.babble.isEmpty else { say("need --corpus, --negative and --babble"); exit(2) }
    guard design(o.landmarks) != nil, o.rules.map({ design($0) != nil }) ?? true else { say("--landmarks, --rules: pairs or triplets"); exit(2) }
    guard (o.minimumHits ?? 1) > 0, (o.supportingHits ?? 1) > 0 else { say("--minimum-hits, --supporting-hits: a number > 0"); exit(2) }
    return o
}

func readTSV(_ path: String) -> [[String: String]] {
    guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { say("cannot read \(path)"); exit(2) }
    let lines = text.split(separator: "\n").map { $0.split(separator: "\t", omittingEmptySubsequences: false).map(String.init) }
    guard let header = lines.first else { return [] }
    return lines.dropFirst().map { Dictionary(uniqueKeysWithValues: zip(header, $0 + Array(repeating: "", count: max(0, header.count - $0.count)))) }
}

func percentile(_ xs: [Double], _ p: Double) -> Double {
    guard !xs.isEmpty else { return .nan }
    let s = xs.sorted()
    return s[min(s.count - 1, Int((Double(s.count - 1) * p).rounded()))]
}
func fmt(_ x: Double, _ d: Int = 2) -> String { String(format: "%.\(d)f", x) }
func residentMB() -> Double {
    guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8),
          let pages = text.split(separator: " ").dropFirst().first.flatMap({ Double($0) }) else { return .nan }
    return pages * Double(sysconf(Int32(_SC_PAGESIZE))) / 1_048_576
}
func power(_ x: ArraySlice<Float>) -> Double { x.reduce(0.0) { $0 + Double($1) * Double($1) } / Double(max(1, x.count)) }

let o = parseOptions()
let sr = 44_100
let manifest = readTSV(o.corpus + "/manifest.tsv")
let negatives = readTSV(o.negative + "/manifest.tsv")
let clock = ContinuousClock()
func elapsed(since t: ContinuousClock.Instant) -> Double {
    let d = clock.now - t
    return Double(d.components.seconds) + Double(d.components.attoseconds) * 1e-18
}

if !FileManager.default.fileExists(atPath: o.catalog) {
    say("indexing \(manifest.count) tracks into \(o.catalog) (\(o.landmarks))")
    // The ingestor keeps the design a catalog was created with.
    _ = try Catalog(path: o.catalog, create: true, configuration: design(o.landmarks)!)
    _ = try await Ingestor(catalogPath: o.catalog).add(files: manifest.map { $0["path"]! })
}
let catalog = try Catalog(path: o.catalog, readOnly: true)
guard catalog.configuration.landmarkShape == design(o.landmarks)!.landmarkShape else {
    say("\(o.catalog) was built with \(catalog.configuration.landmarkShape.rawValue) keys, not \(o.landmarks): remove it or name another --catalog")
    exit(2)
}
let streaming: StreamingOptions = { [configuration = catalog.configuration] in
    var s = StreamingOptions.default
    if o.rules != nil || o.minimumHits != nil || o.supportingHits != nil {
        var custom = StreamingOptions.matchOptions(for: o.rules.flatMap(design) ?? configuration)
        if let n = o.minimumHits { custom.minimumHits = n }
        if let n = o.supportingHits { custom.supportingHits = n }
        s.match = custom
    }
    return s
}()
let rules = streaming.match ?? StreamingOptions.matchOptions(for: catalog.configuration)
say("== \(catalog.configuration.landmarkShape.rawValue) catalog (\(catalog.configuration.keyDesign)), stream rules: minimumHits \(rules.minimumHits), "
      + "candidateHits \(rules.candidateHits), supportingHits \(rules.supportingHits), skewFanout \(rules.skewFanout), deepPass \(rules.deepPass)")
var idByPath: [String: Int64] = [:]
for t in try catalog.tracks() { if let p = t.sourcePath { idByPath[p] = t.id } }
// Track pairs that share passages (the corpus's overlaps.tsv): either one is a right answer.
var catalogID: [String: Int64] = [:]
for m in manifest { if let id = idByPath[m["path"]!] { catalogID[m["id"]!] = id } }
let overlapsPath = (o.corpus as NSString).deletingLastPathComponent + "/overlaps.tsv"
let overlapping: Set<[Int64]> = Set((FileManager.default.fileExists(atPath: overlapsPath) ? readTSV(overlapsPath) : []).flatMap { row -> [[Int64]] in
    guard let a = catalogID[row["id_a"] ?? ""], let b = catalogID[row["id_b"] ?? ""] else { return [] }
    return [[a, b], [b, a]]
})
let sameMusic = { (a: Int64, b: Int64) -> Bool in a == b || overlapping.contains([a, b]) }

let babble = try AudioFileReader.readAll(path: o.babble)
/// The first `seconds` of the `count` tracks `load` gives, back to back: whole tracks, the last one cut
/// short; tracks past that are not loaded.
func firstSeconds(_ seconds: Double, of count: Int, _ load: (Int) throws -> [Float]) rethrows -> [[Float]] {
    var out: [[Float]] = []
    var total = 0.0
    for i in 0..<count where total < seconds {
        let audio = try load(i)
        let keep = min(audio.count, Int((seconds - total) * Double(sr)))
        out.append(Array(audio[..<keep]))
        total += Double(keep) / Double(sr)
    }
    return out
}
let negativeAudio = try firstSeconds(o.negativeMinutes * 60, of: negatives.count) { try AudioFileReader.readAll(path: negatives[$0]["path"]!) }
// Lead-ins before catalog tracks and the memory stream's non-catalog part come from the first 15
// minutes, whatever --negative-minutes says, so those figures do not move with it.
let leadAudio = firstSeconds(15 * 60, of: negativeAudio.count) { negativeAudio[$0] }


/// Feeds `samples` to a fresh StreamMatcher in 0.1-s buffers; returns the events and the processing time.
func stream(_ samples: [Float]) throws -> (events: [SessionEvent], seconds: Double) {
    let core = StreamMatcher(matcher: Matcher(catalog: try Catalog(path: o.catalog, readOnly: true)), options: streaming)
    var events: [SessionEvent] = []
    let t0 = clock.now
    var i = 0
    while i < samples.count {
        let j = min(samples.count, i + sr / 10)
        events += core.append(Array(samples[i..<j]))
        i = j
    }
    events += core.finish()
    return (events, elapsed(since: t0))
}

// --- Time to first match -------------------------------------------------------------------------
var rng = SplitMix64(state: o.seed)
let eligible = manifest.filter { (Double($0["duration_s"] ?? "") ?? 0) >= 40 && idByPath[$0["path"]!] != nil }
var picks: [(path: String, id: Int64, start: Double)] = []
while picks.count < min(o.tracks, eligible.count) {
    let m = eligible[Int(rng.next() % UInt64(eligible.count))]
    if picks.contains(where: { $0.path == m["path"]! }) { continue }
    let duration = Double(m["duration_s"]!)!
    picks.append((m["path"]!, idByPath[m["path"]!]!, (rng.unit() * (duration - 30)).rounded()))
}
say("== time from a catalog track's start to its first correct match (\(picks.count) tracks, after \(Int(o.lead)) s of non-catalog music)")
var totalAudio = 0.0, totalProcessing = 0.0
for condition in ["clean", "babble5"] {
    var times: [Double] = []
    var wrong = 0, offsetErrors: [Double] = []
    for (k, pick) in picks.enumerated() {
        let all = try AudioFileReader.readAll(path: pick.path)
        let a = Int(pick.start) * sr
        var track = Array(all[a..<min(all.count, a + 20 * sr)])
        if condition == "babble5" {
            let offset = Int(rng.next() % UInt64(max(1, babble.count - track.count)))
            let noise = babble[offset..<(offset + track.count)]
            let gain = Float((power(track[...]) / max(1e-12, power(noise) * pow(10, 0.5))).squareRoot())
            for i in track.indices { track[i] += gain * noise[noise.startIndex + i] }
        }
        let neg = leadAudio[k % leadAudio.count]
        let n0 = Int(rng.next() % UInt64(max(1, neg.count - Int(o.lead) * sr)))
        let input = Array(neg[n0..<min(neg.count, n0 + Int(o.lead) * sr)]) + track
        let lead = Double(input.count - track.count) / Double(sr)
        let (events, secs) = try stream(input)
        totalAudio += Double(input.count) / Double(sr)
        totalProcessing += secs
        var found: Double?
        for case .match(let m) in events {
            if sameMusic(m.match.track.id, pick.id) {
                if found == nil {
                    found = m.detectedAt - lead
                    if m.match.track.id == pick.id {   // an overlapping track has its own positions
                        offsetErrors.append(abs(m.match.matchOffset - (pick.start + m.streamTime - lead)))
                    }
                }
            } else {
                wrong += 1
                say("   \(condition) wrong track while playing #\(pick.id) from \(pick.start) s: \(describe(m))")
            }
        }
        times.append(found ?? .infinity)
    }
    let hit = times.filter(\.isFinite)
    say("\(condition):  median \(fmt(percentile(times, 0.5))) s, p90 \(fmt(percentile(times, 0.9))) s, matched within 20 s \(hit.count)/\(times.count), "
          + "offset error median \(fmt(percentile(offsetErrors, 0.5), 3)) s (≤ 0.5 s: \(offsetErrors.filter { $0 <= 0.5 }.count)/\(offsetErrors.count)), wrong-track events \(wrong)")
}

// --- False matches on non-catalog music ----------------------------------------------------------
let negativeStream = negativeAudio.flatMap { $0 }
let negativeMinutes = Double(negativeStream.count) / Double(sr) / 60
let (negEvents, negSeconds) = try stream(negativeStream)
totalAudio += negativeMinutes * 60
totalProcessing += negSeconds
let falseMatches = negEvents.filter { if case .match = $0 { true } else { false } }.count
for case .match(let m) in negEvents { say("   false match: \(describe(m))") }
say("== false matches: \(falseMatches) over \(fmt(negativeMinutes, 1)) min of non-catalog music (\(negativeAudio.count) tracks back to back)")
say("== cost: \(fmt(totalProcessing / totalAudio * 100, 1)) % of one core at real-time pace "
      + "(\(fmt(totalAudio / totalProcessing, 0))× real-time; \(fmt(negSeconds / (negativeMinutes * 60) * 100, 1)) % on non-catalog music alone)")

// --- Memory over a long stream -------------------------------------------------------------------
var options = streaming
options.dropsWhenBehind = false
let session = StreamingSession(matcher: Matcher(catalog: try Catalog(path: o.catalog, readOnly: true)), options: options, clock: nil)
let drain = Task {
    var matches = 0
    for await event in session.events {
        if case .match = event { matches += 1 }
    }
    return matches
}
var fed = 0.0
var marks: [(minutes: Double, mb: Double)] = []
var source = 0
let pool = leadAudio + (try picks.prefix(10).map { try AudioFileReader.readAll(path: $0.path) })
let t0 = clock.now
while fed < o.minutes * 60 {
    let audio = pool[source % pool.count]
    source += 1
    var i = 0
    while i < audio.count, fed < o.minutes * 60 {
        let j = min(audio.count, i + sr / 10)
        session.append(PCMBuffer(samples: Array(audio[i..<j]), sampleRate: Double(sr)))
        fed += Double(j - i) / Double(sr)
        i = j
        for mark in [3.0, 10, 20, 30, 60] where marks.count < 5 && fed >= mark * 60 && !marks.contains(where: { $0.minutes == mark }) {
            marks.append((mark, residentMB()))
        }
    }
}
session.finish()
let streamMatches = await drain.value
say("== memory over a \(fmt(o.minutes, 0))-min stream (StreamingSession, \(streamMatches) match events, \(fmt(o.minutes * 60 / elapsed(since: t0), 0))× real-time): "
      + marks.map { "\(fmt($0.minutes, 0)) min \(fmt($0.mb, 1)) MB" }.joined(separator: ", "))

func design(_ name: String) -> SignatureConfiguration? {
    ["pairs": .current, "triplets": .experimentalTriplets][name]
}

/// Prints a line at once (the output is often piped).
func say(_ line: String) {
    print(line)
    fflush(nil)
}

func describe(_ m: StreamMatch) -> String {
    "#\(m.match.track.id) \(m.match.track.title ?? "") at \(fmt(m.detectedAt)) s: significance \(fmt(m.match.significance)), "
        + "score \(m.match.score), verified \(m.match.verifiedPeaks)/\(m.match.queryPeaks), skew \(fmt(m.match.frequencySkew * 100)) %, "
        + "timeScale \(fmt(m.match.timeScale, 4)), stretch \(fmt(m.match.queryStart))–\(fmt(m.match.queryEnd)) s"
}
