// earmark-music-bench: music-metadata accuracy on rendered scores with ground truth
// (tools/music-data.sh builds the set; tools/music-bench.sh runs everything). So far: key and rhythm.
import EarmarkKit
import Foundation

var data = ""
var limit = Int.max
var verbose = false
var args = CommandLine.arguments.dropFirst().makeIterator()
while let a = args.next() {
    switch a {
    case "--data": data = args.next() ?? ""
    case "--limit": limit = Int(args.next() ?? "") ?? Int.max
    case "--verbose": verbose = true
    default:
        print("usage: earmark-music-bench --data DIR [--limit N] [--verbose]\n  DIR/key/manifest.tsv: path, tonic, mode, …; DIR/beats/manifest.tsv: path, beats_path, bpm, …")
        exit(a == "--help" ? 0 : 2)
    }
}
guard !data.isEmpty else { print("earmark-music-bench: --data is required"); exit(2) }

func cpuSeconds() -> Double {
    var usage = rusage()
    getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
    return Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6 + Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
}

let manifest = try String(contentsOfFile: data + "/key/manifest.tsv", encoding: .utf8)
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
        while let b = try reader.next() { tracker.append(b.channels == 1 ? b.samples : b.mono) }
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
