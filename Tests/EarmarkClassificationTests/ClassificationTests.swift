import EarmarkAudio
import EarmarkClassification
import EarmarkTestSupport
import Foundation
import Testing

/// Log-mel patches of `seconds` of a real file from `start`, as the classifier makes them, quantised.
private func patches(of url: URL, start: Double, seconds: Double, model: SoundModel, every hop: Int = 48) throws -> [UInt8] {
    let reader = try MultichannelFileReader(path: url.path)
    var audio: [Float] = []
    while let b = try reader.next() { audio += b.mono }
    let resampler = try Resampler(inputRate: reader.sampleRate, outputRate: model.frontEnd.sampleRate)
    let at16k = resampler.process(audio) + resampler.flush()
    let from = Int(start * model.frontEnd.sampleRate), count = Int(seconds * model.frontEnd.sampleRate)
    let frontEnd = LogMelFrontEnd(spec: model.frontEnd)
    let frames = frontEnd.append(Array(at16k[from..<min(at16k.count, from + count)]))
    let network = SoundNetwork(model: model)
    let bands = model.frontEnd.melBands, size = model.frontEnd.patchFrames * bands
    var out: [UInt8] = []
    var first = 0
    while (first + model.frontEnd.patchFrames) * bands <= frames.count {
        var codes = [UInt8](repeating: 0, count: size)
        frames.withUnsafeBufferPointer { f in
            codes.withUnsafeMutableBufferPointer { network.quantize(UnsafeBufferPointer(rebasing: f[(first * bands)..<(first * bands + size)]), into: $0) }
        }
        out += codes
        first += hop
    }
    return out
}

@Suite("Sound classification: YAMNet in Swift")
struct SoundNetworkTests {
    /// Real patches (music, game music, speech; 8 s of each, every half patch) and the model.
    private func realPatches() throws -> (model: SoundModel, patches: [UInt8], count: Int) {
        let model = try SoundModel(path: try TestModel.set().model.path)
        let audio = try TestAudio.set()
        var input: [UInt8] = []
        input += try patches(of: try audio.reference("pingus-4"), start: 20, seconds: 8, model: model)
        input += try patches(of: audio.negative[0], start: 30, seconds: 8, model: model)
        input += try patches(of: audio.speech[0], start: 2, seconds: 8, model: model)
        let n = input.count / (model.frontEnd.patchFrames * model.frontEnd.melBands)
        #expect(n >= 40)
        return (model, input, n)
    }

    /// YAMNet's output step: codes are logits / step + 190.
    private let outScale = 0.7565417289733887

    private func score(code: UInt8) -> Double { 1 / (1 + exp(-Double(Int(code) - 190) * outScale)) }

    /// Output codes that differ, and the largest score difference, between two sets of N × labels codes.
    private func difference(_ a: [UInt8], _ b: [UInt8]) -> (codes: Int, score: Double) {
        var codes = 0, worst = 0.0
        for (x, y) in zip(a, b) where x != y {
            codes += 1
            worst = max(worst, abs(score(code: x) - score(code: y)))
        }
        return (codes, worst)
    }

    @Test("the Swift network gives the exact integer reference's output codes on real music and speech (same log-mel input)")
    func matchesExactReference() throws {
        let (model, input, n) = try realPatches()
        let labels = model.labels.count, size = model.frontEnd.patchFrames * model.frontEnd.melBands
        let reference = try TestModel.set().exactCodes(input, labels: labels)
        #expect(reference.count == n * labels)
        let network = SoundNetwork(model: model)
        var worstScore = 0.0, differentCodes = 0
        for p in 0..<n {
            let swift = input[(p * size)..<((p + 1) * size)].withUnsafeBufferPointer { network.run(codes: $0) }
            let scores = network.scores(logits: swift.logits)
            for k in 0..<labels {
                let code = reference[p * labels + k]
                worstScore = max(worstScore, abs(Double(scores[k]) - score(code: code)))
                if Int((Double(swift.logits[k]) / outScale).rounded()) + 190 != Int(code) { differentCodes += 1 }
            }
        }
        #expect(worstScore <= 1e-3, "largest score difference \(worstScore)")
        #expect(differentCodes == 0, "\(differentCodes) of \(n * labels) output codes differ")
    }

    // The exact reference stands for onnxruntime: where onnxruntime's kernels are exact, the two must agree.
    @Test("onnxruntime gives the exact integer reference's output codes on real music and speech",
          .enabled(if: TestModel.onnxruntimeIsExact,
                   "onnxruntime's u8s8 kernels are not exact on this machine (x86-64 without VNNI saturates pairs of products to int16); `tools/yamnet_reference.py --onnxruntime-exactness` says why"))
    func onnxruntimeMatchesExactReference() throws {
        let why = try TestModel.onnxruntimeExactness().reason
        let (model, input, n) = try realPatches()
        let fixture = try TestModel.set()
        let exact = try fixture.exactCodes(input, labels: model.labels.count)
        let onnxruntime = try fixture.onnxruntimeCodes(input, labels: model.labels.count)
        #expect(exact.count == n * model.labels.count && onnxruntime.count == exact.count)
        let d = difference(onnxruntime, exact)
        #expect(d.codes == 0, "\(d.codes) of \(exact.count) output codes differ, largest score difference \(d.score) (\(why))")
    }

    @Test("real speech, real music and digital silence get the expected leading labels")
    func expectedLabels() throws {
        let model = try SoundModel(path: try TestModel.set().model.path)
        let classifier = SoundClassifier(model: model)
        let audio = try TestAudio.set()
        func leading(_ url: URL) throws -> [String: Double] {
            let windows = try classifier.classify(path: url.path)
            var share: [String: Double] = [:]
            for w in windows { share[w.labels[0].label, default: 0] += 1 / Double(windows.count) }
            return share
        }
        for speech in audio.speech {
            let s = try leading(speech)
            #expect((s["Speech"] ?? 0) >= 0.7, "\(speech.lastPathComponent): \(s)")
        }
        for music in [try audio.reference("pingus-4"), audio.negative[1]] {
            let s = try leading(music)
            #expect((s["Music"] ?? 0) >= 0.7, "\(music.lastPathComponent): \(s)")
        }
        let tmp = try TemporaryDirectory("silence")
        try WAVFile.write([Float](repeating: 0, count: 44_100 * 3), to: tmp.file("silence.wav"))
        let s = try leading(tmp.file("silence.wav"))
        #expect((s["Silence"] ?? 0) >= 0.99, "\(s)")
    }

    @Test("window levels are the audio's RMS; faint hiss is silence, real music stays music")
    func levelsAndCategories() throws {
        let model = try SoundModel(path: try TestModel.set().model.path)
        let table = SoundCategory.table(for: model)
        func windows(_ samples: [Float], rate: Double) throws -> [SoundWindow] {
            let stream = try SoundClassificationStream(model: model, options: .init(windowDuration: 0.96, overlapFactor: 0, topK: 1))
            return try stream.append(PCMBuffer(samples: samples, sampleRate: rate)) + stream.finish()
        }
        // A sine of amplitude 0.1 is 20·log10(0.1/√2) ≈ −23.0 dBFS RMS, at any input rate.
        for rate in [44_100.0, 16_000.0] {
            let tone = try windows(Signal.sine(frequency: 440, sampleRate: rate, seconds: 3, amplitude: 0.1), rate: rate)
            #expect(tone.count >= 3)
            #expect(tone.allSatisfy { abs($0.level + 23.01) < 0.3 }, "\(tone.map(\.level))")
        }
        // Levels are measured at the model's 16 kHz, so white noise is made there (soxr would drop its top band).
        let hiss = try windows(Signal.whiteNoise(count: 16_000 * 3, rms: pow(10, -65.0 / 20), seed: 7), rate: 16_000)
        #expect(hiss.allSatisfy { abs($0.level + 65) < 1 && SoundCategory.of($0, table: table) == .silence })
        let louder = try windows(Signal.whiteNoise(count: 16_000 * 3, rms: pow(10, -25.0 / 20), seed: 7), rate: 16_000)
        #expect(louder.allSatisfy { SoundCategory.of($0, table: table) == .other }, "\(louder.map { $0.labels[0].label })")
        let audio = try TestAudio.set()
        let music = try SoundClassifier(model: model).classify(path: try audio.reference("pingus-4").path)
        let musicShare = Double(music.filter { SoundCategory.of($0, table: table) == .music }.count) / Double(music.count)
        #expect(musicShare >= 0.8, "music share \(musicShare)")
        let zero = try windows([Float](repeating: 0, count: 44_100), rate: 44_100)
        #expect(zero.allSatisfy { $0.level == -120 })
    }

    @Test("a stream gives the same windows whatever its buffer sizes, and speech activity finds the speech")
    func streamingIsDeterministic() throws {
        let model = try SoundModel(path: try TestModel.set().model.path)
        let audio = try TestAudio.set()
        // Music, then speech: the speech range must start near the join.
        let tmp = try TemporaryDirectory("stream")
        let joined = tmp.file("joined.wav")
        try Fixtures.cut(try audio.reference("pingus-3"), start: 10, seconds: 6, to: tmp.file("a.wav"), rate: 44_100, channels: 1)
        try Fixtures.cut(audio.speech[0], start: 0, seconds: 6, to: tmp.file("b.wav"), rate: 44_100, channels: 1)
        try Run.sox([tmp.path("a.wav"), tmp.path("b.wav"), joined.path])
        let samples = try Fixtures.decode(joined)
        func run(chunk: Int) throws -> [SoundWindow] {
            let stream = try SoundClassificationStream(model: model, options: .init(windowDuration: 0.96, overlapFactor: 0.5, topK: 3))
            var out: [SoundWindow] = []
            var i = 0
            while i < samples.count {
                out += try stream.append(PCMBuffer(samples: Array(samples[i..<min(samples.count, i + chunk)]), sampleRate: 44_100))
                i += chunk
            }
            return out + stream.finish()
        }
        let a = try run(chunk: 1_000), b = try run(chunk: 44_100 * 2 + 17)
        #expect(a.count == b.count)
        #expect(a.count >= 23)
        #expect(zip(a, b).allSatisfy { $0.start == $1.start && $0.labels == $1.labels })
        let speech = SpeechActivity(model: model).ranges(a)
        #expect(speech.count >= 1)
        if let first = speech.first {
            #expect(abs(first.start - 6) <= 1.0, "speech starts at \(first.start)")
            #expect(speech.last!.end >= 11)
        }
        // The music part carries no speech.
        #expect(!speech.contains { $0.start < 5 })
    }

    @Test("longer windows average their patches; a 0.5-s file still gives one window of its own length")
    func windowsAndShortInput() throws {
        let model = try SoundModel(path: try TestModel.set().model.path)
        let classifier = SoundClassifier(model: model)
        let audio = try TestAudio.set()
        let tmp = try TemporaryDirectory("windows")
        try Fixtures.cut(try audio.reference("pingus-5"), start: 5, seconds: 10, to: tmp.file("ten.wav"))
        let long = try classifier.classify(path: tmp.path("ten.wav"), options: .init(windowDuration: 3, overlapFactor: 0, topK: 2))
        #expect(long.count == 3 || long.count == 4)
        #expect(long.allSatisfy { $0.labels.count == 2 && $0.labels[0].confidence >= $0.labels[1].confidence })
        #expect(abs(long[1].start - 3) < 0.011)
        try Fixtures.cut(try audio.reference("pingus-5"), start: 5, seconds: 0.5, to: tmp.file("short.wav"))
        let short = try classifier.classify(path: tmp.path("short.wav"))
        #expect(short.count == 1)
        #expect(abs(short[0].duration - 0.5) < 0.02)
        #expect(throws: SoundModelError.self) { try classifier.classify(path: tmp.path("ten.wav"), options: .init(windowDuration: 0.5)) }
        #expect(throws: SoundModelError.self) { try classifier.classify(path: tmp.path("ten.wav"), options: .init(overlapFactor: 1)) }
    }
}

@Suite("Sound model files: damaged or mismatched files are refused")
struct SoundModelFileTests {
    /// The model file split into header JSON and blob, to write altered copies.
    private func parts() throws -> (header: [String: Any], blob: Data, raw: Data) {
        let raw = try Data(contentsOf: try TestModel.set().model)
        let length = Int(raw[12]) | Int(raw[13]) << 8 | Int(raw[14]) << 16 | Int(raw[15]) << 24
        let header = try JSONSerialization.jsonObject(with: raw[16..<(16 + length)]) as! [String: Any]
        let blobStart = (16 + length + 15) & ~15
        return (header, raw[blobStart...], raw)
    }

    private func write(header: [String: Any], blob: Data, to url: URL) throws {
        let json = try JSONSerialization.data(withJSONObject: header)
        var out = Data("EARMODEL".utf8)
        for v in [UInt32(1), UInt32(json.count)] { withUnsafeBytes(of: v.littleEndian) { out.append(contentsOf: $0) } }
        out.append(json)
        while out.count % 16 != 0 { out.append(0) }
        out.append(blob)
        try out.write(to: url)
    }

    @Test("the converted YAMNet loads: 521 labels, 1024-value embedding, 0.96-s patches at 16 kHz")
    func loads() throws {
        let model = try SoundModel(path: try TestModel.set().model.path)
        #expect(model.labels.count == 521)
        #expect(model.labels[0].name == "Speech")
        #expect(model.embeddingSize == 1024)
        #expect(model.frontEnd.sampleRate == 16_000)
        #expect(abs(model.frontEnd.patchDuration - 0.96) < 1e-9)
    }

    @Test("truncated, damaged, foreign and missing files give clear errors")
    func damaged() throws {
        let (header, blob, raw) = try parts()
        let tmp = try TemporaryDirectory("models")
        func code(_ data: Data) -> SoundModelError.Code? {
            do { _ = try SoundModel(data: data); return nil } catch let e as SoundModelError { return e.code } catch { return nil }
        }
        #expect(code(raw) == nil)
        #expect(code(raw.prefix(raw.count - 1000)) == .invalidFile)
        #expect(code(raw.prefix(10)) == .invalidFile)
        #expect(code(Data()) == .invalidFile)
        var flipped = raw
        flipped[raw.count - 5000] ^= 0x10
        #expect(code(flipped) == .invalidFile)
        #expect(code(Data("this is a text file, not a model at all".utf8)) == .invalidFile)
        var future = raw
        future[8] = 9
        #expect(code(future) == .unsupportedVersion)
        var badJSON = raw
        badJSON[20] = UInt8(ascii: "}")
        #expect(code(badJSON) == .invalidFile)
        #expect(throws: SoundModelError.self) { try SoundModel(path: tmp.path("missing.emodel")) }
        // The same network behind a front end with another patch size.
        var other = header
        var fe = other["frontEnd"] as! [String: Any]
        fe["patchFrames"] = 48
        other["frontEnd"] = fe
        try write(header: other, blob: blob, to: tmp.file("other.emodel"))
        do {
            _ = try SoundModel(path: tmp.path("other.emodel"))
            Issue.record("a model for another input size loaded")
        } catch let e as SoundModelError {
            #expect(e.code == .inconsistent)
            #expect(e.message.contains("another input size"), "\(e.message)")
        }
        var fewer = header
        fewer["labels"] = Array((header["labels"] as! [Any]).prefix(100))
        try write(header: fewer, blob: blob, to: tmp.file("labels.emodel"))
        #expect(throws: SoundModelError.self) { try SoundModel(path: tmp.path("labels.emodel")) }
    }
}

@Suite("Instrument activity: the shipped instrument head")
struct InstrumentHeadTests {
    @Test("a damaged, truncated or foreign head file is refused with a clear error")
    func damagedHead() throws {
        let good = try InstrumentHead.shipped.get().fileData()
        var json = try JSONSerialization.jsonObject(with: good) as! [String: Any]
        func edited(_ key: String, _ value: Any) throws -> Data {
            var j = json
            j[key] = value
            return try JSONSerialization.data(withJSONObject: j)
        }
        let cases: [(String, Data)] = [
            ("truncated", good.prefix(good.count / 2)),
            ("not JSON", Data("MThd".utf8)),
            ("another format", try edited("format", 99)),
            ("an unknown family", try edited("families", ["drums", "kazoo"])),
            ("weights of the wrong size", try edited("weights", Data([0, 0, 128, 63]).base64EncodedString())),
            ("thresholds missing", try edited("onset", [0.5])),
        ]
        for (what, data) in cases {
            #expect(throws: SoundModelError.self, "\(what)") { try InstrumentHead(data: data) }
            do { _ = try InstrumentHead(data: data) } catch let e as SoundModelError {
                #expect(e.code == .inconsistent && e.message.hasPrefix("instrument head:"), "\(what): \(e.message)")
            }
        }
        json["format"] = 1
        #expect(try InstrumentHead(data: try JSONSerialization.data(withJSONObject: json)).families == InstrumentFamily.allCases)
    }

    @Test("the shipped head loads, reads YAMNet's embeddings, round-trips, finds a family in real music and none in silence")
    func shippedHead() throws {
        let head = try InstrumentHead.shipped.get()
        #expect(head.families == InstrumentFamily.allCases)
        #expect(head.weights.count == head.families.count * head.embeddingSize)
        #expect(zip(head.onset, head.offset).allSatisfy { $1 <= $0 })
        #expect(try InstrumentHead(data: try head.fileData()) == head)
        let model = try SoundModel(path: try TestModel.set().model.path)
        #expect(head.fits(model))
        let options = ClassificationOptions(windowDuration: model.frontEnd.patchDuration, overlapFactor: 0)
        let classifier = SoundClassifier(model: model)
        let march = try TestAudio.set().reference("goin_march")
        let windows = try classifier.classify(path: march.path, options: options)
        let duration = windows.last.map { $0.start + $0.duration } ?? 0
        let a = try InstrumentActivity(windows: windows, duration: duration, model: model)
        #expect(a.method == "head \(head.name)")
        #expect(a.families.map(\.family) == InstrumentFamily.allCases.map(\.rawValue))
        #expect(a.families.allSatisfy { $0.activity.count == windows.count && $0.activity.allSatisfy { (0...1).contains($0.value) } })
        let active = a.families.filter { $0.activeRanges.reduce(0) { $0 + $1.duration } >= 10 }.map(\.family)
        #expect(!active.isEmpty, "\(a.summaryText)")

        let tmp = try TemporaryDirectory("head-silence")
        try WAVFile.write([Float](repeating: 0, count: 44_100 * 4), to: tmp.file("silence.wav"))
        let quiet = try classifier.classify(path: tmp.path("silence.wav"), options: options)
        let none = try InstrumentActivity(windows: quiet, duration: 4, model: model)
        #expect(none.families.allSatisfy { $0.activeRanges.isEmpty }, "\(none.summaryText)")

        // Without a head, or with one for other embeddings: the label mapping, saying why.
        let labels = try InstrumentActivity(windows: windows, duration: duration, model: model, head: nil)
        #expect(labels.method?.hasPrefix("labels (") == true)
        var foreign = head
        foreign.model = "another model"
        let mismatch = try InstrumentActivity(windows: windows, duration: duration, model: model, head: foreign)
        #expect(mismatch.method?.contains("reads the embeddings of another model") == true)
        #expect(mismatch.families == labels.families)
    }
}

@Suite("Sound model files with extreme header numbers")
struct ModelHeaderBoundsTests {
    /// Fuzz/regressions/model: headers whose numbers (blob size, tensor offset, pads, patch frames near
    /// Int.max) overflowed the loader's size arithmetic and crashed it.
    @Test("are refused with an error, not an overflow trap (inputs hand-made from fuzz-model's seeds)")
    func extremeNumbers() throws {
        let folder = TestPaths.repositoryRoot.appendingPathComponent("Fuzz/regressions/model")
        let files = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasSuffix(".emodel") }.sorted()
        #expect(files.count >= 4)
        for name in files {
            let data = try Data(contentsOf: folder.appendingPathComponent(name))
            #expect(throws: SoundModelError.self, "\(name)") { try SoundModel(data: data, name: name) }
        }
        // The same seed network loads untouched.
        let seed = TestPaths.repositoryRoot.appendingPathComponent("Fuzz/corpus/model/tiny-sigmoid.emodel")
        #expect(try SoundModel(data: Data(contentsOf: seed)).labels.count == 3)
    }
}
