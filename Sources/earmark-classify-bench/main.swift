// earmark-classify-bench: accuracy and speed of sound classification on real recordings
// (tools/classify-data.sh builds the set; tools/classify-bench.sh runs everything).
import EarmarkKit
import Foundation

struct Options {
    var data = ""
    var model: String?
    var python: String?
    var reference: String?
    var limit = Int.max
}

func parseOptions() -> Options {
    var o = Options()
    var args = CommandLine.arguments.dropFirst().makeIterator()
    while let a = args.next() {
        switch a {
        case "--data": o.data = args.next() ?? ""
        case "--model": o.model = args.next()
        case "--python": o.python = args.next()
        case "--reference": o.reference = args.next()
        case "--limit": o.limit = Int(args.next() ?? "") ?? Int.max
        default:
            print("""
            usage: earmark-classify-bench --data DIR [--model PATH] [--python PY --reference yamnet_reference.py] [--limit N]
              DIR holds manifest.tsv (path, category, source, start_s) from tools/classify-data.sh.
              --python/--reference: also compare every window's top-5 labels on the same input with the exact
                integer reference (yamnet_reference.py --emodel) and, where its kernels are exact, with onnxruntime.
            """)
            exit(a == "--help" ? 0 : 2)
        }
    }
    if o.data.isEmpty { print("earmark-classify-bench: --data is required"); exit(2) }
    return o
}

func cpuSeconds() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6
        + Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
}

func peakRSSMegabytes() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return Double(usage.ru_maxrss) / 1024
}

func pct(_ a: Int, _ b: Int) -> String { b == 0 ? "—" : String(format: "%.1f %%", 100 * Double(a) / Double(b)) }

let o = parseOptions()
let model: SoundModel
do { model = try SoundModel.load(path: o.model) } catch { print("earmark-classify-bench: \(error)"); exit(2) }
let table = SoundCategory.table(for: model)
let manifest = try String(contentsOfFile: o.data + "/manifest.tsv", encoding: .utf8)
var rows = manifest.split(separator: "\n").dropFirst().map { $0.split(separator: "\t", omittingEmptySubsequences: false).map(String.init) }
rows = Array(rows.prefix(o.limit))

let categories = ["speech", "music", "silence", "noise"]
var confusion: [String: [String: Int]] = [:]
var clips: [String: Int] = [:]
var levels: [String: [Double]] = [:]
var audioSeconds = 0.0, classifyCPU = 0.0, decodeCPU = 0.0
var allCodes: [UInt8] = []
var swiftTop5: [[Int]] = []
let network = SoundNetwork(model: model, maximumBatch: 1)
let options = ClassificationOptions(windowDuration: model.frontEnd.patchDuration, overlapFactor: 0, topK: 5)

for row in rows {
    let (path, truth) = (row[0], row[1])
    clips[truth, default: 0] += 1
    let t0 = cpuSeconds()
    let reader = try MultichannelFileReader(path: path)
    var buffers: [PCMBuffer] = []
    while let b = try reader.next() { buffers.append(b) }
    let t1 = cpuSeconds()
    let stream = try SoundClassificationStream(model: model, options: options)
    var windows: [SoundWindow] = []
    for b in buffers { windows += try stream.append(b) }
    windows += stream.finish()
    let t2 = cpuSeconds()
    decodeCPU += t1 - t0
    classifyCPU += t2 - t1
    audioSeconds += buffers.reduce(0) { $0 + $1.duration }
    for w in windows where w.duration >= 0.9 * options.windowDuration {
        guard let category = SoundCategory.of(w, table: table) else { continue }
        let said = category == .other ? "noise" : category.rawValue
        confusion[truth, default: [:]][said, default: 0] += 1
        levels[truth, default: []].append(w.level)
    }
    if o.python != nil {
        // The same patches again, for onnxruntime: 16 kHz, non-overlapping, quantised as the classifier does.
        let resampler = try Resampler(inputRate: reader.sampleRate, outputRate: model.frontEnd.sampleRate)
        var mono: [Float] = []
        for b in buffers { mono += b.mono }
        let frames = LogMelFrontEnd(spec: model.frontEnd).append(resampler.process(mono) + resampler.flush())
        let bands = model.frontEnd.melBands, size = model.frontEnd.patchFrames * bands
        var first = 0
        var codes = [UInt8](repeating: 0, count: size)
        while (first + model.frontEnd.patchFrames) * bands <= frames.count {
            frames.withUnsafeBufferPointer { f in
                codes.withUnsafeMutableBufferPointer { network.quantize(UnsafeBufferPointer(rebasing: f[(first * bands)..<(first * bands + size)]), into: $0) }
            }
            let logits = codes.withUnsafeBufferPointer { network.run(codes: $0) }.logits
            swiftTop5.append(Array(logits.indices.sorted { logits[$0] > logits[$1] || (logits[$0] == logits[$1] && $0 < $1) }.prefix(5)))
            allCodes += codes
            first += model.frontEnd.patchFrames
        }
    }
}

let counts = categories.map { "\($0) \(clips[$0] ?? 0)" }.joined(separator: ", ")
print("clips: \(rows.count) (\(counts)), \(String(format: "%.0f", audioSeconds)) s of audio; model \(model.name)")
print("accuracy per \(String(format: "%.2f", options.windowDuration))-s window (SoundCategory.of: silence below \(Int(SoundCategory.silenceLevel)) dBFS, else the leading label's category; noise = any label outside speech, music, silence):")
var correct = 0, total = 0
for c in categories {
    let row = confusion[c] ?? [:]
    let n = row.values.reduce(0, +)
    correct += row[c] ?? 0
    total += n
    let spread = categories.map { "\($0) \(row[$0] ?? 0)" }.joined(separator: ", ")
    print("  \(c.padding(toLength: 8, withPad: " ", startingAt: 0)) \(pct(row[c] ?? 0, n)) of \(n) windows   (said: \(spread))")
}
print("  four-way: \(pct(correct, total)) of \(total) windows")
let three = ["speech", "music", "silence"]
let threeCorrect = three.reduce(0) { $0 + (confusion[$1]?[$1] ?? 0) }
let threeTotal = three.reduce(0) { $0 + (confusion[$1]?.values.reduce(0, +) ?? 0) }
for c in categories {
    let l = (levels[c] ?? []).sorted()
    guard !l.isEmpty else { continue }
    print(String(format: "  window level %@: min %.1f, 5th pct %.1f, median %.1f dBFS; %d below the silence level (%.0f dBFS)",
                 c, l[0], l[l.count / 20], l[l.count / 2], l.filter { $0 < SoundCategory.silenceLevel }.count, SoundCategory.silenceLevel))
}
print("  speech/music/silence: \(pct(threeCorrect, threeTotal)) of \(threeTotal) windows of those clips")
let sm = ["speech", "music"].reduce((0, 0)) { acc, c in
    let row = confusion[c] ?? [:]
    return (acc.0 + (row[c] ?? 0), acc.1 + (row["speech"] ?? 0) + (row["music"] ?? 0))
}
print("  speech vs music (windows called one of the two): \(pct(sm.0, sm.1))")
print(String(format: "speed: classification %.0f × real-time on one core (decode excluded), %.0f × with decoding; peak memory %.0f MB",
             audioSeconds / classifyCPU, audioSeconds / (classifyCPU + decodeCPU), peakRSSMegabytes()))

/// Runs `python reference arguments… in.u8 out.u8` on every window's patch; returns the output codes, or nil
/// (with a message) when it fails.
func referenceCodes(python: String, reference: String, _ arguments: [String], input: URL, output: URL) throws -> [UInt8]? {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: python)
    p.arguments = [reference] + arguments + [input.path, output.path]
    try p.run()
    p.waitUntilExit()
    guard p.terminationStatus == 0 else { return nil }
    return [UInt8](try Data(contentsOf: output))
}

/// Prints how many windows' top-5 labels (`top5`) are those of the reference's output codes `out`.
func top5Agreement(_ top5: [[Int]], _ out: [UInt8], labels: Int, with what: String) {
    var sameSet = 0, sameOrder = 0
    for (i, mine) in top5.enumerated() {
        let codes = out[(i * labels)..<((i + 1) * labels)].map { Int($0) }
        let theirs = Array(codes.indices.sorted { codes[$0] > codes[$1] || (codes[$0] == codes[$1] && $0 < $1) }.prefix(5))
        if Set(mine) == Set(theirs) { sameSet += 1 }
        if mine == theirs { sameOrder += 1 }
    }
    print("top-5 agreement with \(what) on the same log-mel input: \(pct(sameSet, top5.count)) of \(top5.count) windows (same order: \(pct(sameOrder, top5.count)))")
}

if let python = o.python, let reference = o.reference {
    let tmp = FileManager.default.temporaryDirectory.appendingPathComponent("classify-bench-\(getpid())")
    try FileManager.default.createDirectory(at: tmp, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: tmp) }
    let input = tmp.appendingPathComponent("in.u8"), output = tmp.appendingPathComponent("out.u8")
    try Data(allCodes).write(to: input)
    guard let modelPath = o.model ?? SoundModel.defaultPath() else { print("exact reference: no model path"); exit(1) }
    guard let exact = try referenceCodes(python: python, reference: reference, ["--emodel", modelPath], input: input, output: output) else {
        print("exact reference comparison failed"); exit(1)
    }
    top5Agreement(swiftTop5, exact, labels: model.labels.count, with: "the exact integer reference (\(model.name), yamnet_reference.py --emodel)")

    // onnxruntime only where its u8s8 kernels are exact (x86-64 with VNNI, arm64): elsewhere they saturate.
    let check = Process(), said = Pipe()
    check.executableURL = URL(fileURLWithPath: python)
    check.arguments = [reference, "--onnxruntime-exactness"]
    check.standardOutput = said
    try check.run()
    let why = String(decoding: said.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    check.waitUntilExit()
    if check.terminationStatus == 0 {
        guard let ort = try referenceCodes(python: python, reference: reference, [], input: input, output: output) else {
            print("onnxruntime comparison failed"); exit(1)
        }
        top5Agreement(swiftTop5, ort, labels: model.labels.count, with: "onnxruntime \(model.name)")
    } else {
        print("onnxruntime comparison skipped: \(why)")
    }
}
