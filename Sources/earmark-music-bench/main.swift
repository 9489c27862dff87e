// earmark-music-bench: music-metadata accuracy on rendered scores with ground truth
// (tools/music-data.sh builds the set; tools/music-bench.sh runs everything). So far: key and rhythm.
import EarmarkKit
import Foundation

var data = ""
var corpus = ""
var medleys = 40
var seed: UInt64 = 7
var limit = Int.max
var verbose = false
var args = CommandLine.arguments.dropFirst().makeIterator()
while let a = args.next() {
    switch a {
    case "--data": data = args.next() ?? ""
    case "--corpus": corpus = args.next() ?? ""
    case "--medleys": medleys = Int(args.next() ?? "") ?? medleys
    case "--seed": seed = UInt64(args.next() ?? "") ?? seed
    case "--limit": limit = Int(args.next() ?? "") ?? Int.max
    case "--verbose": verbose = true
    default:
        print("usage: earmark-music-bench --data DIR [--corpus CORPUS/public [--medleys N] [--seed S]] [--limit N] [--verbose]\n  DIR/key/manifest.tsv: path, tonic, mode, …; DIR/beats/manifest.tsv: path, beats_path, bpm, …")
        exit(a == "--help" ? 0 : 2)
    }
}
guard !data.isEmpty || !corpus.isEmpty else { print("earmark-music-bench: --data or --corpus is required"); exit(2) }

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
    var seconds = 0.0, cpuUsed = 0.0
    for row in rows.dropFirst().prefix(limit) {
        let f = row.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
        guard let truthBPM = Double(f[tc]), let text = try? String(contentsOfFile: f[bc], encoding: .utf8) else { continue }
        var beats: [Double] = [], downbeats: [Double] = []
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: "\t")
            guard let t = Double(parts[0]) else { continue }
            beats.append(t)
            if parts.count > 1, parts[1] == "1" { downbeats.append(t) }
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
        dSum += BeatTracker.fMeasure(estimated: r?.bars ?? [], reference: downbeats)
        if let bpm = r?.bpm {
            if abs(bpm - truthBPM) <= 0.04 * truthBPM { acc1 += 1; acc2 += 1 } else if [2.0, 0.5, 3.0, 1.0 / 3].contains(where: { abs(bpm - truthBPM * $0) <= 0.04 * truthBPM * $0 }) { acc2 += 1 }
        }
        if verbose { print(String(format: "  %@: F %.2f, bpm %.1f (truth %.1f)", (f[pc] as NSString).lastPathComponent, fm, r?.bpm ?? 0, truthBPM)) }
    }
    let p = Double(max(1, pieces))
    print(String(format: "beats on %d pieces: F-measure (±70 ms) %.3f; downbeat F %.3f; tempo Acc1 %.3f, Acc2 %.3f", pieces, fSum / p, dSum / p,
                 Double(acc1) / p, Double(acc2) / p))
    print(String(format: "speed: beat tracking %.0f × real-time on one core (decoding included)", seconds / max(cpuUsed, 1e-9)))
}

// Structure on medleys of real tracks: 3–5 excerpts of 20–60 s from different tracks of the corpus,
// joined; the joins are the true section boundaries.
if !corpus.isEmpty, let list = try? String(contentsOfFile: corpus + "/manifest.tsv", encoding: .utf8) {
    let rows = list.split(separator: "\n").dropFirst().map { $0.split(separator: "\t").map(String.init) }
    var rng = SeededGenerator(seed: seed)
    var fSum = 0.0, seconds = 0.0, cpuUsed = 0.0
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
    print(String(format: "structure on %d medleys of real tracks: section boundary F@3 s %.3f (not told the number of parts); %.0f × real-time", medleys,
                 fSum / Double(max(1, medleys)), seconds / max(cpuUsed, 1e-9)))
}

struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
