// earmark-music-bench: music-metadata accuracy on rendered scores with ground truth
// (tools/music-data.sh builds the set; tools/music-bench.sh runs everything): key, rhythm, structure, and
// with --instruments instrument activity and pace (tools/instrument-data.sh builds that set).
import EarmarkDSP
import EarmarkKit
import Foundation

var data = ""
var corpus = ""
var medleys = 40
/// Medley draws; seed 7 is the one the segmenter was tuned on, so the default reports the others.
var seeds: [UInt64] = [11, 23, 31, 101]
var limit = Int.max
var verbose = false
var instrumentData = ""
var modelPath: String?
var subset = "all"
var solos = true
var sweep = false
var headOption: String?
var trainHead: String?
var embeddingCache: String?
var headOptions = InstrumentHeadTrainer.Options()
var args = CommandLine.arguments.dropFirst().makeIterator()
while let a = args.next() {
    switch a {
    case "--data": data = args.next() ?? ""
    case "--corpus": corpus = args.next() ?? ""
    case "--medleys": medleys = Int(args.next() ?? "") ?? medleys
    case "--seed": seeds = (args.next() ?? "").split(separator: ",").compactMap { UInt64($0) }
    case "--limit": limit = Int(args.next() ?? "") ?? Int.max
    case "--verbose": verbose = true
    case "--instruments": instrumentData = args.next() ?? ""
    case "--model": modelPath = args.next()
    case "--subset": subset = args.next() ?? subset
    case "--no-solos": solos = false
    case "--sweep": sweep = true
    case "--head": headOption = args.next()
    case "--train-head": trainHead = args.next()
    case "--embeddings": embeddingCache = args.next()
    case "--mix-thresholds": headOptions.soloThresholds = false
    case "--solo-weight": headOptions.soloWeight = Float(args.next() ?? "") ?? headOptions.soloWeight
    default:
        print("""
            usage: earmark-music-bench --data DIR [--corpus CORPUS/public [--medleys N] [--seed S[,S…]]] [--limit N] [--verbose]
                   earmark-music-bench --instruments DIR [--model PATH] [--subset all|even|odd] [--no-solos] [--sweep] [--limit N] [--verbose]
                                       [--head PATH|labels]
                   earmark-music-bench --instruments DIR --train-head OUT [--model PATH] [--subset all|even|odd] [--embeddings CACHE]
              DIR/key/manifest.tsv: path, tonic, mode, …; DIR/beats/manifest.tsv: path, beats_path, bpm, …;
              DIR/sections/manifest.tsv: path, sections_path, split, … (tools/section-data.sh: sections inside songs)
              --instruments DIR: DIR/manifest.tsv and per-piece truth (tools/instrument-data.sh): instrument activity
                and pace on the mixes, instrument activity on the solo renders; --subset even|odd: every other piece
                (a hold-out half); --sweep: F-measures for other activity thresholds; --head: the instrument head file to use
                (default: the shipped one), or labels for the YAMNet label mapping
              --train-head OUT: trains an instrument head on the subset's mixes and solo renders and writes it to OUT
                (tools/train-instrument-head.sh); --embeddings CACHE keeps each render's window embeddings in CACHE;
                --mix-thresholds: thresholds chosen on the mixes only (not the solo renders too); --solo-weight W (0.5)
            """)
        exit(a == "--help" ? 0 : 2)
    }
}
guard !data.isEmpty || !corpus.isEmpty || !instrumentData.isEmpty else {
    print("earmark-music-bench: --data, --corpus or --instruments is required"); exit(2)
}

func cpuSeconds() -> Double {
    var usage = rusage()
    getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
    return Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6 + Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
}

if !data.isEmpty, let manifest = try? String(contentsOfFile: data + "/key/manifest.tsv", encoding: .utf8) {
let lines = manifest.split(separator: "\n")
let header = lines[0].split(separator: "\t").map(String.init)
guard let pathColumn = header.firstIndex(of: "path"), let tonicColumn = header.firstIndex(of: "tonic"),
      let modeColumn = header.firstIndex(of: "mode") else { print("manifest needs path, tonic, mode"); exit(2) }
var total = 0.0, exact = 0, fifth = 0, relative = 0, parallel = 0, other = 0, n = 0
var audioSeconds = 0.0, cpu = 0.0
for line in lines.dropFirst().prefix(limit) {
    let f = line.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
    guard let pc = MusicalKey.pitchClass(of: f[tonicColumn]), let mode = MusicalKey.Mode(rawValue: f[modeColumn]) else { continue }
    let truth = MusicalKey(pitchClass: pc, mode: mode)
    let t0 = cpuSeconds()
    guard let r = try KeyDetector.analyze(path: f[pathColumn]) else { other += 1; n += 1; continue }
    cpu += cpuSeconds() - t0
    audioSeconds += r.duration
    let s = r.key.mirexScore(against: truth)
    total += s
    n += 1
    switch s {
    case 1: exact += 1
    case 0.5: fifth += 1
    case 0.3: relative += 1
    case 0.2: parallel += 1
    default: other += 1
    }
    if verbose && s < 1 { print("  \((f[pathColumn] as NSString).lastPathComponent): truth \(truth), said \(r.key) (score \(s))") }
}
let count = n
func pct(_ k: Int) -> String { String(format: "%.1f %%", 100 * Double(k) / Double(max(1, count))) }
print("key on \(n) pieces: MIREX weighted score \(String(format: "%.3f", total / Double(max(1, n)))); exact \(pct(exact)), fifth \(pct(fifth)), relative \(pct(relative)), parallel \(pct(parallel)), other \(pct(other))")
print(String(format: "speed: %.0f × real-time on one core (decoding included)", audioSeconds / max(cpu, 1e-9)))
}

// Beats, downbeats, tempo.
let beatManifestPath = data + "/beats/manifest.tsv"
if let beatManifest = try? String(contentsOfFile: beatManifestPath, encoding: .utf8) {
    let rows = beatManifest.split(separator: "\n")
    let head = rows[0].split(separator: "\t").map(String.init)
    let pc = head.firstIndex(of: "path")!, bc = head.firstIndex(of: "beats_path")!, tc = head.firstIndex(of: "bpm")!
    var fSum = 0.0, dSum = 0.0, acc1 = 0, acc2 = 0, pieces = 0
    // F over the first 60 % and the last 40 % of each piece; the share of the truth's beat intervals whose
    // tempo the reported tempo curve gives within 4 %.
    var headF = 0.0, tailF = 0.0, curveHits = 0, curveIntervals = 0
    // Per half (even- and odd-numbered rows of the manifest): F, downbeat F, Acc1, Acc2, pieces.
    var halves = [[Double]](repeating: [0, 0, 0, 0, 0], count: 2)
    var seconds = 0.0, cpuUsed = 0.0
    let splitColumn = head.firstIndex(of: "split"), setColumn = head.firstIndex(of: "set")
    // Time signature per group ("SET HALF"): pieces right, summed share of the time right, pieces.
    var metre: [String: [Double]] = [:], confusion: [String: Int] = [:]
    for (index, row) in rows.dropFirst().prefix(limit).enumerated() {
        let f = row.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
        guard let truthBPM = Double(f[tc]), let text = try? String(contentsOfFile: f[bc], encoding: .utf8) else { continue }
        var beats: [Double] = [], downbeats: [Double] = [], signatures: [TimeSignature?] = []
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: "\t")
            guard let t = Double(parts[0]) else { continue }
            beats.append(t)
            if parts.count > 1, parts[1] == "1" { downbeats.append(t) }
            signatures.append(parts.count > 2 ? TimeSignature(String(parts[2])) : nil)
        }
        let t0 = cpuSeconds()
        let reader = try MultichannelFileReader(path: f[pc])
        let tracker = try BeatTracker(inputRate: reader.sampleRate)
        while let b = try reader.next() { tracker.append(b.mono) }
        let r = tracker.result()
        cpuUsed += cpuSeconds() - t0
        seconds += r?.duration ?? 0
        pieces += 1
        let fm = BeatTracker.fMeasure(estimated: r?.beats ?? [], reference: beats)
        fSum += fm
        let dm = BeatTracker.fMeasure(estimated: r?.bars ?? [], reference: downbeats)
        dSum += dm
        let cut = 0.6 * (r?.duration ?? 0)
        headF += BeatTracker.fMeasure(estimated: (r?.beats ?? []).filter { $0 < cut }, reference: beats.filter { $0 < cut })
        tailF += BeatTracker.fMeasure(estimated: (r?.beats ?? []).filter { $0 >= cut }, reference: beats.filter { $0 >= cut })
        for (a, b) in zip(beats, beats.dropFirst()) where b > a {
            curveIntervals += 1
            let mid = (a + b) / 2, truth = 60 / (b - a)
            if let seg = r?.tempo.first(where: { $0.start <= mid && mid < $0.end }), abs(seg.bpm / truth - 1) <= 0.04 { curveHits += 1 }
        }
        var one = 0.0, two = 0.0
        if let bpm = r?.bpm {
            if abs(bpm - truthBPM) <= 0.04 * truthBPM { one = 1; two = 1 } else if [2.0, 0.5, 3.0, 1.0 / 3].contains(where: { abs(bpm - truthBPM * $0) <= 0.04 * truthBPM * $0 }) { two = 1 }
        }
        acc1 += Int(one)
        acc2 += Int(two)
        // The half: the manifest's split column when there is one, else the row's parity.
        let half = splitColumn.map { f[$0] == "odd" ? 1 : 0 } ?? index % 2
        for (k, v) in [fm, dm, one, two, 1].enumerated() { halves[half][k] += v }
        // Time signature, when the truth has one per beat: right when the beats per bar and the
        // subdivision (simple or compound) agree. Per piece: the signature of most of its beats against
        // the reported one; over time: the share of the truth's beat intervals whose reported stretch agrees.
        var signatureLine = ""
        if let first = signatures.first, first != nil {
            func same(_ a: TimeSignature?, _ b: TimeSignature?) -> Bool {
                guard let a, let b else { return false }
                return a.numerator == b.numerator && a.isCompound == b.isCompound
            }
            var counts: [TimeSignature: Int] = [:]
            for s in signatures.compactMap({ $0 }) { counts[s, default: 0] += 1 }
            let main = counts.max { $0.value < $1.value || ($0.value == $1.value && $0.key.description > $1.key.description) }!.key
            let right = same(main, r?.timeSignature)
            var agree = 0, intervals = 0
            for i in 0..<(beats.count - 1) {
                let mid = (beats[i] + beats[i + 1]) / 2
                intervals += 1
                let found = r?.timeSignatures.first { $0.start <= mid && mid < $0.end }?.timeSignature
                    ?? (mid < (r?.timeSignatures.first?.start ?? 0) ? r?.timeSignatures.first?.timeSignature : r?.timeSignatures.last?.timeSignature)
                if same(signatures[i], found) { agree += 1 }
            }
            let share = Double(agree) / Double(max(1, intervals))
            let group = (setColumn.map { f[$0] } ?? "all") + " " + (half == 0 ? "even" : "odd")
            metre[group, default: [0, 0, 0]][0] += right ? 1 : 0
            metre[group, default: [0, 0, 0]][1] += share
            metre[group, default: [0, 0, 0]][2] += 1
            let truthText = counts.count > 1 ? Array(Set(signatures.compactMap { $0?.description })).sorted().joined(separator: ",") : main.description
            confusion["\(truthText) -> \(r?.timeSignatures.map(\.timeSignature.description).joined(separator: ",") ?? "none")", default: 0] += 1
            signatureLine = String(format: ", time signature %@ (truth %@, %.0f %% of the time right)",
                                   r?.timeSignatures.map { "\($0.timeSignature)" }.joined(separator: ",") ?? "none", truthText, 100 * share)
        }
        if verbose {
            print(String(format: "  %@: F %.2f, downbeat F %.2f, bpm %.1f (truth %.1f), %d a bar%@", (f[pc] as NSString).lastPathComponent, fm, dm,
                         r?.bpm ?? 0, truthBPM, r?.beatsPerBar ?? 0, signatureLine))
        }
    }
    let p = Double(max(1, pieces))
    print(String(format: "beats on %d pieces: F-measure (±70 ms) %.3f; downbeat F %.3f; tempo Acc1 %.3f, Acc2 %.3f", pieces, fSum / p, dSum / p,
                 Double(acc1) / p, Double(acc2) / p))
    print(String(format: "  beat F over the first 60 %% / last 40 %% of each piece: %.3f / %.3f; tempo curve within 4 %% of the truth on %.1f %% of its beat intervals",
                 headF / p, tailF / p, 100 * Double(curveHits) / Double(max(1, curveIntervals))))
    for (name, h) in zip(["even", "odd"], halves) where h[4] > 0 {
        print(String(format: "  %@ half (%.0f pieces): F %.3f; downbeat F %.3f; Acc1 %.3f, Acc2 %.3f", name, h[4], h[0] / h[4], h[1] / h[4], h[2] / h[4], h[3] / h[4]))
    }
    if !metre.isEmpty {
        let all = metre.values.reduce([0.0, 0, 0]) { [$0[0] + $1[0], $0[1] + $1[1], $0[2] + $1[2]] }
        print(String(format: "time signature (beats a bar and simple/compound) right on %.1f %% of %.0f pieces (the main one); %.1f %% of the time",
                     100 * all[0] / all[2], all[2], 100 * all[1] / all[2]))
        for (group, v) in metre.sorted(by: { $0.key < $1.key }) {
            print(String(format: "  %@ (%.0f pieces): %.1f %% of the pieces, %.1f %% of the time", group, v[2], 100 * v[0] / v[2], 100 * v[1] / v[2]))
        }
        print("  truth -> found (pieces): " + confusion.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: "; "))
    }
    print(String(format: "speed: beat tracking %.0f × real-time on one core (decoding included)", seconds / max(cpuUsed, 1e-9)))
}

// Structure inside a song (tools/section-data.sh): songs in song forms whose truth is the sections and their
// labels. Boundary F@3 s over the inner boundaries (not told the number of sections), and the pairwise label
// F-measure over 0.5-s frames (a pair of frames is "same" when their sections share a label).
let sectionManifestPath = data + "/sections/manifest.tsv"
if !data.isEmpty, let sectionManifest = try? String(contentsOfFile: sectionManifestPath, encoding: .utf8) {
    let rows = sectionManifest.split(separator: "\n")
    let head = rows[0].split(separator: "\t").map(String.init)
    let pc = head.firstIndex(of: "path")!, sc = head.firstIndex(of: "sections_path")!
    let splitColumn = head.firstIndex(of: "split"), formColumn = head.firstIndex(of: "form")
    // Per half: boundary F, pairwise P, R, F, pieces, |found sections - true sections|, label sequence right.
    var halves = [[Double]](repeating: [0, 0, 0, 0, 0, 0, 0], count: 2)
    var seconds = 0.0, cpuUsed = 0.0
    for (index, row) in rows.dropFirst().prefix(limit).enumerated() {
        let f = row.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
        guard let text = try? String(contentsOfFile: f[sc], encoding: .utf8) else { continue }
        let truth: [StructureRange] = text.split(separator: "\n").compactMap { line -> StructureRange? in
            let p = line.split(separator: "\t")
            guard p.count >= 3, let a = Double(p[0]), let b = Double(p[1]) else { return nil }
            return StructureRange(start: a, end: b, label: String(p[2]))
        }
        let t0 = cpuSeconds()
        let reader = try MultichannelFileReader(path: f[pc])
        let tracker = try BeatTracker(inputRate: reader.sampleRate)
        let analyzer = try StructureAnalyzer(inputRate: reader.sampleRate)
        while let b = try reader.next() {
            let mono = b.mono
            tracker.append(mono)
            analyzer.append(mono)
        }
        let rhythm = tracker.result()
        let r = analyzer.result(bars: rhythm?.bars ?? [])
        cpuUsed += cpuSeconds() - t0
        seconds += r?.duration ?? 0
        let found = r?.sections ?? []
        let bf = StructureAnalyzer.boundaryF(estimated: found.dropFirst().map(\.start), reference: truth.dropFirst().map(\.start))
        let (pp, pr, pf) = StructureAnalyzer.pairwiseLabelF(estimated: found, reference: truth)
        let foundForm = found.compactMap(\.label).joined()
        let trueForm = truth.compactMap(\.label).joined()
        let half = splitColumn.map { f[$0] == "odd" ? 1 : 0 } ?? index % 2
        for (k, v) in [bf, pp, pr, pf, 1, Double(abs(found.count - truth.count)), foundForm == trueForm ? 1 : 0].enumerated() { halves[half][k] += v }
        if verbose {
            print(String(format: "  %@ (%@): boundary F %.2f, pairwise F %.2f; truth %@ at %@; found %@ at %@", (f[pc] as NSString).lastPathComponent,
                         formColumn.map { f[$0] } ?? "", bf, pf, trueForm, truth.dropFirst().map { String(format: "%.0f", $0.start) }.joined(separator: ","),
                         foundForm, found.dropFirst().map { String(format: "%.0f", $0.start) }.joined(separator: ",")))
        }
    }
    for (name, h) in zip(["even", "odd"], halves) where h[4] > 0 {
        print(String(format: "sections inside songs, %@ half (%.0f songs): boundary F@3 s %.3f (not told the count); pairwise label P %.3f, R %.3f, F %.3f; form exactly right %.0f of %.0f; mean |sections found - true| %.2f",
                     name, h[4], h[0] / h[4], h[1] / h[4], h[2] / h[4], h[3] / h[4], h[6], h[4], h[5] / h[4]))
    }
    print(String(format: "speed: rhythm and structure %.0f × real-time on one core (decoding included)", seconds / max(cpuUsed, 1e-9)))
}

// Structure on medleys of real tracks: 3–5 excerpts of 20–60 s from different tracks of the corpus,
// joined; the joins are the true section boundaries.
if !corpus.isEmpty, let list = try? String(contentsOfFile: corpus + "/manifest.tsv", encoding: .utf8) {
    let rows = list.split(separator: "\n").dropFirst().map { $0.split(separator: "\t").map(String.init) }
    var seconds = 0.0, cpuUsed = 0.0, allF: [Double] = []
    for seed in seeds {
        var rng = SplitMix64(state: seed)
        var fSum = 0.0
        for m in 0..<medleys {
            let parts = 3 + Int(rng.next() % 3)
            var audio: [Float] = [], joins: [Double] = []
            var used = Set<Int>()
            for p in 0..<parts {
                var t = Int(rng.next() % UInt64(rows.count))
                while used.contains(t) { t = Int(rng.next() % UInt64(rows.count)) }
                used.insert(t)
                let length = 20 + Double(rng.next() % 41)
                let available = max(0, (Double(rows[t][2]) ?? 0) - length - 10)
                let start = 5 + Double(rng.next() % UInt64(max(1, Int(available))))
                let reader = try AudioFileReader(path: rows[t][1])
                var samples: [Float] = []
                while samples.count < Int((start + length) * 44_100), let chunk = try reader.next() { samples += chunk }
                let from = min(samples.count, Int(start * 44_100)), to = min(samples.count, Int((start + length) * 44_100))
                if p > 0 { joins.append(Double(audio.count) / 44_100) }
                audio += samples[from..<to]
            }
            let t0 = cpuSeconds()
            let analyzer = try StructureAnalyzer(inputRate: 44_100)
            analyzer.append(audio)
            let r = analyzer.result()
            cpuUsed += cpuSeconds() - t0
            seconds += Double(audio.count) / 44_100
            let estimated = (r?.sections ?? []).dropFirst().map(\.start)
            let f = StructureAnalyzer.boundaryF(estimated: estimated, reference: joins)
            fSum += f
            if verbose { print(String(format: "  medley %d: F %.2f  truth %@  found %@", m, f, joins.map { String(format: "%.0f", $0) }.joined(separator: ","),
                                      estimated.map { String(format: "%.0f", $0) }.joined(separator: ","))) }
        }
        allF.append(fSum / Double(max(1, medleys)))
        print(String(format: "structure on %d medleys of real tracks (seed %d): section boundary F@3 s %.3f (not told the number of parts)", medleys, seed,
                     fSum / Double(max(1, medleys))))
    }
    print(String(format: "structure over %d draws of %d medleys: mean F@3 s %.3f; %.0f × real-time", allF.count, medleys,
                 allF.reduce(0, +) / Double(max(1, allF.count)), seconds / max(cpuUsed, 1e-9)))
}

// Instrument activity and pace on multi-part MIDI renders (tools/instrument-data.sh): the truth says, per
// 1-s frame, which families sound audibly in the mix, and when every note starts.
struct InstrumentTruth: Decodable {
    struct Family: Decodable {
        var solo: String
        var notes: Int
        var active: [Int]
        var ranges: [[Double]]
    }
    var id: String
    var duration: Double
    var mix: String
    var mixDb: [Double]
    var families: [String: Family]
    var events: [Double]
    var notes: [Double]
    var drumHits: [Double]
}

/// What `earmark analyze` computes for instruments and pace (the same single pass as `Fingerprinter`: the
/// file's mono downmix into back-to-back classifier patches and into the beat tracker), with the windows kept.
struct InstrumentRun {
    var windows: [SoundWindow]
    var activity: InstrumentActivity
    var pace: PaceResult?
    /// Pace with other thresholds (``BeatTracker/pace(deviations:)``), for the sweep.
    var paceSweep: [Double: PaceResult] = [:]
}

func runInstruments(path: String, model: SoundModel, head: InstrumentHead?, pace: Bool, paceSweep: [Double] = []) throws -> InstrumentRun {
    let reader = try MultichannelFileReader(path: path)
    let classifier = try SoundClassificationStream(model: model, options: ClassificationOptions(windowDuration: model.frontEnd.patchDuration, overlapFactor: 0))
    let tracker = pace ? try BeatTracker(inputRate: reader.sampleRate) : nil
    var windows: [SoundWindow] = []
    while let buffer = try reader.next() {
        let mono = buffer.mono
        windows += try classifier.append(PCMBuffer(samples: mono, sampleRate: buffer.sampleRate))
        tracker?.append(mono)
    }
    windows += classifier.finish()
    let activity = try InstrumentActivity(windows: windows, duration: classifier.duration, model: model, head: head)
    var run = InstrumentRun(windows: windows, activity: activity, pace: tracker?.pace())
    for d in paceSweep { run.paceSweep[d] = tracker?.pace(deviations: d) }
    return run
}

/// Per 1-s frame, the mean activity of the windows whose middle lies in it (the last value carried over).
func frameValues(_ curve: [FamilyActivity.Value], count: Int) -> [Double] {
    var sum = [Double](repeating: 0, count: count), weight = [Double](repeating: 0, count: count)
    for v in curve {
        let i = Int((v.start + v.end) / 2)
        if i >= 0 && i < count { sum[i] += v.value; weight[i] += 1 }
    }
    var last = 0.0
    return (0..<count).map { i in
        if weight[i] > 0 { last = sum[i] / weight[i] }
        return last
    }
}

/// ROC area: the chance that a random true frame has a higher value than a random other frame (ties half).
func rocArea(_ pairs: [(value: Double, truth: Bool)]) -> Double {
    let sorted = pairs.sorted { $0.value < $1.value }
    var rankSum = 0.0, i = 0
    while i < sorted.count {
        var j = i
        while j < sorted.count && sorted[j].value == sorted[i].value { j += 1 }
        let rank = Double(i + j + 1) / 2
        for k in i..<j where sorted[k].truth { rankSum += rank }
        i = j
    }
    let pos = Double(sorted.filter(\.truth).count), neg = Double(sorted.count) - pos
    guard pos > 0, neg > 0 else { return .nan }
    return (rankSum - pos * (pos + 1) / 2) / (pos * neg)
}

/// Onset F-measure of range starts: a found start is right within `tolerance` s of a true start not matched yet.
func onsetHits(found: [Double], truth: [Double], tolerance: Double = 1) -> Int {
    var used = [Bool](repeating: false, count: truth.count), hits = 0
    for f in found {
        if let k = truth.indices.first(where: { !used[$0] && abs(truth[$0] - f) <= tolerance }) { used[k] = true; hits += 1 }
    }
    return hits
}

struct Counts {
    var tp = 0, fp = 0, fn = 0
    var precision: Double { tp + fp > 0 ? Double(tp) / Double(tp + fp) : 0 }
    var recall: Double { tp + fn > 0 ? Double(tp) / Double(tp + fn) : 0 }
    var f: Double { precision + recall > 0 ? 2 * precision * recall / (precision + recall) : 0 }
    mutating func add(found: [Bool], truth: [Bool]) {
        for (a, b) in zip(found, truth) {
            if a && b { tp += 1 } else if a { fp += 1 } else if b { fn += 1 }
        }
    }
}

func pearson(_ x: [Double], _ y: [Double]) -> Double {
    let n = Double(x.count)
    guard n > 1 else { return 0 }
    let mx = x.reduce(0, +) / n, my = y.reduce(0, +) / n
    var sxy = 0.0, sxx = 0.0, syy = 0.0
    for (a, b) in zip(x, y) {
        sxy += (a - mx) * (b - my)
        sxx += (a - mx) * (a - mx)
        syy += (b - my) * (b - my)
    }
    return sxx > 0 && syy > 0 ? sxy / (sxx * syy).squareRoot() : 0
}

func median(_ x: [Double]) -> Double {
    guard !x.isEmpty else { return .nan }
    let s = x.sorted()
    return s.count % 2 == 1 ? s[s.count / 2] : (s[s.count / 2 - 1] + s[s.count / 2]) / 2
}

if !instrumentData.isEmpty {
    guard let list = try? String(contentsOfFile: instrumentData + "/manifest.tsv", encoding: .utf8) else {
        print("earmark-music-bench: no \(instrumentData)/manifest.tsv (run tools/instrument-data.sh)"); exit(2)
    }
    let model: SoundModel
    do { model = try SoundModel.load(path: modelPath) } catch { print("earmark-music-bench: \(error)"); exit(2) }
    guard InstrumentActivity.supports(model) else { print("earmark-music-bench: \(model.name) does not have YAMNet's AudioSet labels"); exit(2) }
    let rows = list.split(separator: "\n")
    let head = rows[0].split(separator: "\t").map(String.init)
    guard let tcol = head.firstIndex(of: "truth_path") else { print("manifest needs truth_path"); exit(2) }
    var truthFiles = rows.dropFirst().map { $0.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)[tcol] }
    switch subset {
    case "even": truthFiles = truthFiles.enumerated().filter { $0.offset % 2 == 0 }.map(\.element)
    case "odd": truthFiles = truthFiles.enumerated().filter { $0.offset % 2 == 1 }.map(\.element)
    default: break
    }
    truthFiles = Array(truthFiles.prefix(limit))
    let families = InstrumentFamily.allCases.map(\.rawValue)
    let decoder = JSONDecoder()
    decoder.keyDecodingStrategy = .convertFromSnakeCase
    if let out = trainHead {
        trainInstrumentHead(truthFiles: truthFiles, model: model, out: out, decoder: decoder, cache: embeddingCache, subset: subset, verbose: verbose,
                            options: headOptions)
        exit(0)
    }
    let instrumentHead: InstrumentHead?
    switch headOption {
    case nil: instrumentHead = InstrumentActivity.defaultHead
    case "labels": instrumentHead = nil
    case let path?:
        do { instrumentHead = try InstrumentHead(path: path) } catch { print("earmark-music-bench: \(error)"); exit(2) }
    }
    // The label scores are tiny in mixes; the head's curves are probabilities.
    let sweepOnsets = instrumentHead == nil ? [0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.1, 0.2]
        : [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
    var sweepSolo: [Double: (own: Counts, falseFrames: Int, trueFrames: Int)] = [:]
    let paceDeviations = [0.0, 0.25, 0.5, 0.75, 1.0, 1.5]
    var sweepPace: [Double: [Double]] = [:]

    var frame: [String: Counts] = [:], segHits: [String: Int] = [:], segFound: [String: Int] = [:], segTruth: [String: Int] = [:]
    var present: [String: Int] = [:], detectedPieces: [String: Int] = [:], falsePieces: [String: Int] = [:]
    var sweepCounts: [Double: [String: Counts]] = [:]
    var scored: [String: [(value: Double, truth: Bool)]] = [:]
    var soloN: [String: Int] = [:], soloDetected: [String: Int] = [:], soloFrames: [String: Counts] = [:]
    var soloFalse: [String: [String: Int]] = [:], soloFalseFamilies: [String: Int] = [:], soloFalseFrames: [String: Int] = [:]
    var soloFramesTotal: [String: Int] = [:]
    var paceFound: [Double] = [], paceEvents: [Double] = [], paceNotes: [Double] = [], paceDrums: [Double] = [], paceCoarse: [Double] = []
    var overallFound: [Double] = [], overallTruth: [Double] = []
    var seconds = 0.0, cpuUsed = 0.0, pieces = 0, method = ""
    for path in truthFiles {
        guard let raw = FileManager.default.contents(atPath: path), let t = try? decoder.decode(InstrumentTruth.self, from: raw) else {
            print("  cannot read \(path)"); continue
        }
        let t0 = cpuSeconds()
        let f = try runInstruments(path: t.mix, model: model, head: instrumentHead, pace: true, paceSweep: sweep ? paceDeviations : [])
        cpuUsed += cpuSeconds() - t0
        method = f.activity.method ?? "?"
        seconds += f.activity.duration
        if verbose {
            // What the classifier hears: the mean score of the top labels over the piece.
            var mean = [Double](repeating: 0, count: model.labels.count)
            for w in f.windows { for (i, v) in w.scores.enumerated() where i < mean.count { mean[i] += Double(v) / Double(max(1, f.windows.count)) } }
            let top = mean.indices.sorted { mean[$0] > mean[$1] }.prefix(8).map { String(format: "%@ %.3f", model.labels[$0].name, mean[$0]) }
            print("  \(t.id) top labels (mean score): \(top.joined(separator: ", "))")
        }
        pieces += 1
        let n = t.mixDb.count
        var line: [String] = []
        for fam in families {
            let truth = t.families[fam].map { $0.active.map { $0 != 0 } } ?? [Bool](repeating: false, count: n)
            let activity = f.activity.families.first { $0.family == fam }
            let ranges = activity?.activeRanges ?? []
            let found = InstrumentActivity.coveredFrames(ranges, count: n)
            frame[fam, default: Counts()].add(found: found, truth: Array(truth.prefix(n)))
            let truthStarts = t.families[fam]?.ranges.map { $0[0] } ?? []
            segHits[fam, default: 0] += onsetHits(found: ranges.map(\.start), truth: truthStarts)
            segFound[fam, default: 0] += ranges.count
            segTruth[fam, default: 0] += truthStarts.count
            if truth.contains(true) {
                present[fam, default: 0] += 1
                if found.contains(true) { detectedPieces[fam, default: 0] += 1 }
            } else if found.contains(true) {
                falsePieces[fam, default: 0] += 1
            }
            if let curve = activity?.activity {
                scored[fam, default: []] += zip(frameValues(curve, count: n), truth).map { (value: $0, truth: $1) }
            }
            if sweep, let curve = activity?.activity {
                for o in sweepOnsets {
                    sweepCounts[o, default: [:]][fam, default: Counts()].add(found: InstrumentActivity.coveredFrames(InstrumentActivity.ranges(curve, onset: o, offset: o / 2), count: n),
                                                                               truth: truth)
                }
            }
            let c = Counts(tp: zip(found, truth).filter { $0 && $1 }.count, fp: zip(found, truth).filter { $0 && !$1 }.count,
                           fn: zip(found, truth).filter { !$0 && $1 }.count)
            if truth.contains(true) || found.contains(true) {
                line.append(String(format: "%@ %d/%d/%d", fam, c.tp, c.fp, c.fn))
            }
        }
        // Pace against the onsets of the score, in the ranges pace reports.
        // Onsets merged within 100 ms of the first of their group: the finest pace can resolve (peaks ±100 ms).
        var coarse: [Double] = []
        for x in t.notes.sorted() where coarse.last.map({ x - $0 > 0.1 }) ?? true { coarse.append(x) }
        if let pace = f.pace {
            for v in pace.values {
                let minutes = (v.end - v.start) / 60
                func rate(_ times: [Double]) -> Double { Double(times.filter { $0 >= v.start && $0 < v.end }.count) / minutes }
                paceFound.append(v.value)
                paceEvents.append(rate(t.events))
                paceNotes.append(rate(t.notes))
                paceDrums.append(rate(t.drumHits))
                paceCoarse.append(rate(coarse))
            }
            for (d, p) in f.paceSweep { sweepPace[d, default: []] += p.values.map(\.value) }
            overallFound.append(pace.overall)
            overallTruth.append(Double(t.events.count) * 60 / t.duration)
        }
        if verbose {
            print(String(format: "  %@: pace %.0f/min (score %.0f events/min); frames tp/fp/fn %@", t.id, f.pace?.overall ?? 0,
                         Double(t.events.count) * 60 / t.duration, line.joined(separator: ", ")))
        }
        // Solo renders: is the family found alone, and which others are claimed?
        guard solos else { continue }
        for (fam, truthFamily) in t.families.sorted(by: { $0.key < $1.key }) {
            let truth = truthFamily.active.map { $0 != 0 }
            guard truth.filter({ $0 }).count >= 5 else { continue }
            let t1 = cpuSeconds()
            let s = try runInstruments(path: truthFamily.solo, model: model, head: instrumentHead, pace: false)
            cpuUsed += cpuSeconds() - t1
            seconds += s.activity.duration
            let found = InstrumentActivity.coveredFrames(s.activity.families.first { $0.family == fam }?.activeRanges ?? [], count: n)
            var c = Counts()
            c.add(found: found, truth: truth)
            soloN[fam, default: 0] += 1
            if c.recall >= 0.5 { soloDetected[fam, default: 0] += 1 }
            soloFrames[fam, default: Counts()].add(found: found, truth: truth)
            var others: [String] = []
            for other in s.activity.families where other.family != fam {
                let o = InstrumentActivity.coveredFrames(other.activeRanges, count: n)
                let k = zip(o, truth).filter { $0 && $1 }.count
                if k > 0 {
                    soloFalse[fam, default: [:]][other.family, default: 0] += 1
                    soloFalseFrames[fam, default: 0] += k
                    others.append(other.family)
                }
            }
            if sweep {
                for o in sweepOnsets {
                    var e = sweepSolo[o] ?? (own: Counts(), falseFrames: 0, trueFrames: 0)
                    for g in s.activity.families {
                        let found = InstrumentActivity.coveredFrames(InstrumentActivity.ranges(g.activity, onset: o, offset: o / 2), count: n)
                        if g.family == fam { e.own.add(found: found, truth: truth) } else { e.falseFrames += zip(found, truth).filter { $0 && $1 }.count }
                    }
                    e.trueFrames += truth.filter { $0 }.count
                    sweepSolo[o] = e
                }
            }
            soloFalseFamilies[fam, default: 0] += others.count
            soloFramesTotal[fam, default: 0] += truth.filter { $0 }.count
            if verbose {
                print(String(format: "    solo %@: recall %.2f, others claimed: %@", fam, c.recall, others.isEmpty ? "none" : others.joined(separator: ",")))
            }
        }
    }
    print("instrument activity on \(pieces) mixes (\(String(format: "%.1f", seconds / 60)) min analysed incl. solos; subset \(subset)); model \(model.name); \(method)")
    print("frame-level: 1-s frames; a frame is found active when the family's active ranges cover >= 0.5 s of it; counts summed over all pieces")
    print("onset F: a range start within ±1 s of a true range start")
    print("ROC area: threshold-free separation of true from other frames by the family's activity curve (frame mean)")
    print("always F: the frame F of saying the family is active in every frame of every piece (its share of true frames as precision)")
    print("family     pieces  found-in  false-in   frame P   frame R   frame F   onset F   ROC area  always F  median value true/other")
    var fSum = 0.0, fCount = 0, total = Counts()
    for fam in families {
        let c = frame[fam] ?? Counts()
        let sh = segHits[fam] ?? 0, sf = segFound[fam] ?? 0, st = segTruth[fam] ?? 0
        let op = sf > 0 ? Double(sh) / Double(sf) : 0, or = st > 0 ? Double(sh) / Double(st) : 0
        let of = op + or > 0 ? 2 * op * or / (op + or) : 0
        let pairs = scored[fam] ?? []
        print(fam.padding(toLength: 9, withPad: " ", startingAt: 0) + String(format: "  %6d  %8d  %8d   %7.3f   %7.3f   %7.3f   %7.3f   %8.3f  %8.3f  %.3f / %.3f",
                     present[fam] ?? 0, detectedPieces[fam] ?? 0, falsePieces[fam] ?? 0, c.precision, c.recall, c.f, of, rocArea(pairs),
                     Counts(tp: c.tp + c.fn, fp: pairs.count - c.tp - c.fn, fn: 0).f,
                     median(pairs.filter(\.truth).map(\.value)), median(pairs.filter { !$0.truth }.map(\.value))))
        if (present[fam] ?? 0) > 0 { fSum += c.f; fCount += 1 }
        total.tp += c.tp; total.fp += c.fp; total.fn += c.fn
    }
    print(String(format: "mean frame F over the %d families present: %.3f; all families pooled: P %.3f R %.3f F %.3f", fCount,
                 fSum / Double(max(1, fCount)), total.precision, total.recall, total.f))
    if sweep {
        print("threshold sweep (onset / offset = onset/2): frame F per family")
        print("onset  " + families.map { $0.padding(toLength: 9, withPad: " ", startingAt: 0) }.joined(separator: " ") + "  mean")
        for o in sweepOnsets {
            let fs = families.map { sweepCounts[o]?[$0]?.f ?? 0 }
            let mean = zip(families, fs).filter { (present[$0.0] ?? 0) > 0 }.map(\.1)
            print(String(format: "%6.4f ", o) + fs.map { String(format: "%-9.3f", $0) }.joined(separator: " ")
                  + String(format: "  %.3f", mean.reduce(0, +) / Double(max(1, mean.count))))
        }
    }
    if solos {
        print("solo renders (families with >= 5 active frames): detected = frame recall >= 0.5 on its own render; others = families active during its true frames")
        print("family     solos  detected  frame R   frame P   others/solo  false frames  most often claimed")
        for fam in families where (soloN[fam] ?? 0) > 0 {
            let n = soloN[fam]!, c = soloFrames[fam] ?? Counts()
            let top = (soloFalse[fam] ?? [:]).sorted { $0.value > $1.value || ($0.value == $1.value && $0.key < $1.key) }.prefix(3)
                .map { "\($0.key) \($0.value)" }.joined(separator: ", ")
            print(fam.padding(toLength: 9, withPad: " ", startingAt: 0) + String(format: "  %5d  %7.0f %%  %7.3f   %7.3f   %11.2f  %10.0f %%  %@", n, 100 * Double(soloDetected[fam] ?? 0) / Double(n),
                         c.recall, c.precision, Double(soloFalseFamilies[fam] ?? 0) / Double(n),
                         100 * Double(soloFalseFrames[fam] ?? 0) / Double(max(1, soloFramesTotal[fam] ?? 0)), top.isEmpty ? "-" : top))
        }
        print("(false frames: frames where another family is active, summed over the other families, per true frame of the soloist)")
        if sweep {
            print("threshold sweep on the solo renders: own-family frame recall, false frames per true frame")
            for o in sweepOnsets {
                if let e = sweepSolo[o] {
                    print(String(format: "  onset %.4f: recall %.3f, false frames %.0f %%", o, e.own.recall, 100 * Double(e.falseFrames) / Double(max(1, e.trueFrames))))
                }
            }
        }
    }
    func paceLine(_ name: String, _ truth: [Double]) {
        let pairs = zip(paceFound, truth).filter { $0.1 > 0 }
        let ratios = pairs.map { $0.0 / $0.1 }
        let within = ratios.filter { abs($0 - 1) <= 0.25 }.count
        print(String(format: "  vs %@: Pearson r %.3f; median |ratio - 1| %.3f; median ratio %.2f; within ±25 %% %.1f %% (%d of %d ranges with truth > 0)",
                     name, pearson(paceFound, truth), median(ratios.map { abs($0 - 1) }), median(ratios),
                     100 * Double(within) / Double(max(1, ratios.count)), within, ratios.count))
    }
    print("pace on \(overallFound.count) mixes, \(paceFound.count) ranges of 10 s every 5 s (events per minute):")
    paceLine("onset events (notes of all parts merged within 50 ms)", paceEvents)
    paceLine("onsets merged within 100 ms", paceCoarse)
    paceLine("every note-on", paceNotes)
    paceLine("drum hits", paceDrums)
    if sweep {
        print("  pace threshold sweep (deviations above the neighbourhood mean), against onset events:")
        for d in paceDeviations {
            let found = sweepPace[d] ?? []
            let ratios = zip(found, paceEvents).filter { $0.1 > 0 }.map { $0.0 / $0.1 }
            print(String(format: "    %.2f sd: Pearson r %.3f; median |ratio - 1| %.3f; median ratio %.2f; within ±25 %% %.1f %%", d, pearson(found, paceEvents),
                         median(ratios.map { abs($0 - 1) }), median(ratios), 100 * Double(ratios.filter { abs($0 - 1) <= 0.25 }.count) / Double(max(1, ratios.count))))
        }
    }
    print(String(format: "  whole pieces: Pearson r %.3f (pace overall vs score events per minute); median pace %.0f, median truth %.0f per minute",
                 pearson(overallFound, overallTruth), median(overallFound), median(overallTruth)))
    print(String(format: "speed: %.0f × real-time on one core (decoding, classification and pace)", seconds / max(cpuUsed, 1e-9)))
}

/// A render's window embeddings (`start`, `end`, embedding), from `cache` (a folder; files named after the
/// render) when there, else computed (and stored there).
func renderEmbeddings(path: String, model: SoundModel, cache: String?) throws -> (starts: [Double], ends: [Double], embeddings: [[Float]]) {
    let d = model.embeddingSize
    let file = cache.map { $0 + "/" + URL(fileURLWithPath: path).lastPathComponent + ".emb" }
    if let file, let raw = FileManager.default.contents(atPath: file), raw.count >= 8 {
        let values = raw.withUnsafeBytes { p in (0..<(raw.count / 4)).map { Float(bitPattern: UInt32(littleEndian: p.loadUnaligned(fromByteOffset: 4 * $0, as: UInt32.self))) } }
        let n = Int(values[0]), stored = Int(values[1])
        if stored == d, values.count == 2 + n * (2 + d) {
            var starts: [Double] = [], ends: [Double] = [], embeddings: [[Float]] = []
            for i in 0..<n {
                let o = 2 + i * (2 + d)
                starts.append(Double(values[o])); ends.append(Double(values[o + 1])); embeddings.append(Array(values[(o + 2)..<(o + 2 + d)]))
            }
            return (starts, ends, embeddings)
        }
    }
    let run = try runInstruments(path: path, model: model, head: nil, pace: false)
    let starts = run.windows.map(\.start), ends = run.windows.map { min(run.activity.duration, $0.start + $0.duration) }
    let embeddings = run.windows.map(\.embedding)
    if let file, let cache {
        try? FileManager.default.createDirectory(atPath: cache, withIntermediateDirectories: true)
        var values: [Float] = [Float(starts.count), Float(d)]
        for i in starts.indices { values += [Float(starts[i]), Float(ends[i])] + embeddings[i] }
        var raw = Data(capacity: 4 * values.count)
        for v in values { withUnsafeBytes(of: v.bitPattern.littleEndian) { raw.append(contentsOf: $0) } }
        _ = FileManager.default.createFile(atPath: file, contents: raw)
    }
    return (starts, ends, embeddings)
}

/// Trains the instrument head on the mixes and solo renders of `truthFiles` and writes it to `out`.
func trainInstrumentHead(truthFiles: [String], model: SoundModel, out: String, decoder: JSONDecoder, cache: String?, subset: String, verbose: Bool,
                         options: InstrumentHeadTrainer.Options) {
    let families = InstrumentFamily.allCases.map(\.rawValue)
    var clips: [InstrumentHeadTrainer.Clip] = []
    let t0 = cpuSeconds()
    var ids: [String] = []
    for (p, path) in truthFiles.enumerated() {
        guard let raw = FileManager.default.contents(atPath: path), let t = try? decoder.decode(InstrumentTruth.self, from: raw) else {
            print("  cannot read \(path)"); continue
        }
        ids.append(t.id)
        let n = t.mixDb.count
        let frames = families.map { fam in t.families[fam].map { Array($0.active.map { $0 != 0 }.prefix(n)) } ?? [Bool](repeating: false, count: n) }
        do {
            let mix = try renderEmbeddings(path: t.mix, model: model, cache: cache)
            clips.append(.init(piece: p, isMix: true, starts: mix.starts, ends: mix.ends, embeddings: mix.embeddings, frames: frames))
            for (fam, truthFamily) in t.families.sorted(by: { $0.key < $1.key }) {
                guard let f = families.firstIndex(of: fam), frames[f].contains(true) else { continue }
                let solo = try renderEmbeddings(path: truthFamily.solo, model: model, cache: cache)
                let soloFrames = families.indices.map { $0 == f ? frames[f] : [Bool](repeating: false, count: n) }
                clips.append(.init(piece: p, isMix: false, starts: solo.starts, ends: solo.ends, embeddings: solo.embeddings, frames: soloFrames))
            }
        } catch {
            print("  \(t.id): \(error)"); continue
        }
        if verbose { print("  \(t.id): \(clips.count) clips so far") }
    }
    let t1 = cpuSeconds()
    print(String(format: "embeddings of %d clips from %d pieces: %.0f s CPU", clips.count, ids.count, t1 - t0))
    let description = "logistic per family on \(model.name) embeddings of \(ids.count) rendered pieces (subset \(subset) of the instrument set: "
        + "mixes, and solo renders at weight \(options.soloWeight)); thresholds and smoothing: best out-of-fold frame F on the mixes"
        + (options.soloThresholds ? " and solo renders" : "")
    let (head, report) = InstrumentHeadTrainer.train(clips, model: model.name, embeddingSize: model.embeddingSize,
                                                     name: "instrument-head-1", description: description, options: options) { print("  \($0)") }
    print(String(format: "trained on %d windows in %.0f s CPU", report.trainingWindows, cpuSeconds() - t1))
    print(String(format: "smoothing ±%.1f s", head.smoothing))
    print("family     onset  offset  out-of-fold frame F")
    for (f, fam) in families.enumerated() {
        print(fam.padding(toLength: 9, withPad: " ", startingAt: 0) + String(format: "  %5.2f  %6.2f  %@", head.onset[f], head.offset[f],
                                                                                report.outOfFoldF[f].map { String(format: "%.3f", $0) } ?? "-"))
    }
    do {
        try head.fileData().write(to: URL(fileURLWithPath: out))
        print("wrote \(out)")
    } catch {
        print("earmark-music-bench: cannot write \(out): \(error)"); exit(1)
    }
}
