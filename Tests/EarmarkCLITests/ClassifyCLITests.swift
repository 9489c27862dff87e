import EarmarkTestSupport
import Foundation
import Testing

enum MusicalKeySpelling {
    static func valid(_ s: String?) -> Bool {
        ["C", "C#", "Db", "D", "D#", "Eb", "E", "F", "F#", "Gb", "G", "G#", "Ab", "A", "A#", "Bb", "B"].contains(s ?? "")
    }
}

@Suite("earmark classify, and classification attached to catalog add, match and listen")
struct ClassifyCLITests {
    private func modelEnvironment() throws -> [String: String?] {
        ["EARMARK_MODEL": try TestModel.set().model.path]
    }

    @Test("classify --json: speech is Speech with speech ranges, music is Music; text output reads as a timeline")
    func classifyFiles() throws {
        let env = try modelEnvironment()
        let audio = try TestAudio.set()
        let speech = audio.speech[0].path, music = try audio.reference("pingus-6").path
        let out = try EarmarkCLI.run(["classify", "--json", "--top", "4", speech, music], environment: env)
        #expect(out.status == 0, "\(out)")
        let reports = try JSONSerialization.jsonObject(with: out.stdout) as! [[String: Any]]
        #expect(reports.count == 2)
        let (s, m) = (reports[0], reports[1])
        let windows = s["windows"] as! [[String: Any]]
        #expect(windows.count >= 20)
        #expect((windows[0]["labels"] as! [[String: Any]]).count == 4)
        let sSummary = s["summary"] as! [String: Any]
        #expect(((sSummary["dominant"] as! [[String: Any]])[0]["label"] as? String) == "Speech")
        #expect((sSummary["speechShare"] as! Double) > 0.6)
        #expect(!(sSummary["speech"] as! [Any]).isEmpty)
        let mSummary = m["summary"] as! [String: Any]
        #expect(((mSummary["dominant"] as! [[String: Any]])[0]["label"] as? String) == "Music")
        #expect((mSummary["speechShare"] as! Double) < 0.1)
        #expect(((mSummary["categoryShares"] as! [String: Double])["music"] ?? 0) > 0.8)

        let text = try EarmarkCLI.run(["classify", speech], environment: env)
        #expect(text.status == 0)
        #expect(text.stdoutText.contains("Speech"))
        #expect(text.stdoutText.contains("speech: 0:"))

        let labels = try EarmarkCLI.run(["classify", "--labels"], environment: env)
        #expect(labels.status == 0)
        let lines = labels.stdoutText.split(separator: "\n")
        #expect(lines.count == 521)
        #expect(lines[0] == "0\t/m/09x0r\tSpeech")
    }

    @Test("bad arguments exit 64, unreadable audio or a missing or damaged model exit 2 with a clear message")
    func errors() throws {
        let env = try modelEnvironment()
        let audio = try TestAudio.set()
        let file = audio.speech[0].path
        #expect(try EarmarkCLI.run(["classify", "--overlap", "1", file], environment: env).status == 64)
        #expect(try EarmarkCLI.run(["classify", "--window", "0.2", file], environment: env).status == 64)
        #expect(try EarmarkCLI.run(["classify", "--top", "0", file], environment: env).status == 64)
        #expect(try EarmarkCLI.run(["classify"], environment: env).status == 64)
        let tmp = try TemporaryDirectory("classify-errors")
        try Data("not audio".utf8).write(to: tmp.file("text.wav"))
        let bad = try EarmarkCLI.run(["classify", tmp.path("text.wav"), file], environment: env)
        #expect(bad.status == 2)
        #expect(bad.stderrText.contains("text.wav"))
        let missing = try EarmarkCLI.run(["classify", file], environment: ["EARMARK_MODEL": tmp.path("none.emodel")])
        #expect(missing.status == 2)
        #expect(missing.stderrText.contains("no sound model"))
        let model = try Data(contentsOf: try TestModel.set().model)
        try model.prefix(model.count / 2).write(to: tmp.file("half.emodel"))
        let truncated = try EarmarkCLI.run(["classify", "--model", tmp.path("half.emodel"), file])
        #expect(truncated.status == 2)
        #expect(truncated.stderrText.contains("not a usable sound model"))
    }

    @Test("catalog add --analyze stores the sound summary, match --classify and listen --classify attach the clip's")
    func attached() throws {
        let env = try modelEnvironment()
        let audio = try TestAudio.set()
        let tmp = try TemporaryDirectory("classify-attached")
        let catalog = tmp.path("c.earcat")
        // Transcripts are SpeechCLITests' subject: here they would only cost minutes of a debug build.
        let add = try EarmarkCLI.run(["catalog", "add", "--catalog", catalog, "--analyze", "--no-transcribe",
                                      try audio.reference("pingus-4").path, audio.speech[0].path], environment: env)
        #expect(add.status == 0, "\(add)")
        let info = try EarmarkCLI.run(["catalog", "info", "--catalog", catalog, "--json", "2"], environment: env)
        let object = try JSONSerialization.jsonObject(with: info.stdout) as! [String: Any]
        let sound = (object["analysis"] as! [String: Any])["sound"] as! [String: Any]
        #expect(sound["model"] as? String == "YAMNet")
        #expect((sound["speechShare"] as! Double) > 0.6)
        #expect(!(sound["timeline"] as! [Any]).isEmpty)
        #expect((object["analysis"] as! [String: Any])["speech"] == nil, "--no-transcribe stores no transcript")
        let text = try EarmarkCLI.run(["catalog", "info", "--catalog", catalog, "1"], environment: env)
        #expect(text.stdoutText.contains("sound:      Music"), "\(text.stdoutText)")

        try Fixtures.cut(try audio.reference("pingus-4"), start: 30, seconds: 8, to: tmp.file("clip.wav"))
        let match = try EarmarkCLI.run(["match", "--catalog", catalog, "--json", "--classify", tmp.path("clip.wav")], environment: env)
        #expect(match.status == 0, "\(match)")
        let m = try JSONSerialization.jsonObject(with: match.stdout) as! [String: Any]
        // The track's stored key at the matched stretch rides along with the match.
        let key = try #require(((m["matches"] as! [[String: Any]])[0]["key"]) as? [String: Any], "\(match.stdoutText)")
        #expect(MusicalKeySpelling.valid(key["tonic"] as? String))
        #expect(["major", "minor"].contains(key["mode"] as? String ?? ""))
        #expect((key["start"] as! Double) <= 30 && (key["end"] as! Double) >= 30)
        let bpm = try #require(((m["matches"] as! [[String: Any]])[0]["bpm"]) as? Double)
        #expect(bpm > 40 && bpm < 240)
        let clipSound = m["sound"] as! [String: Any]
        #expect(((clipSound["dominant"] as! [[String: Any]])[0]["label"] as? String) == "Music")
        let plain = try EarmarkCLI.run(["match", "--catalog", catalog, "--json", tmp.path("clip.wav")], environment: env)
        #expect((try JSONSerialization.jsonObject(with: plain.stdout) as! [String: Any])["sound"] is NSNull)

        let listen = try EarmarkCLI.run(["listen", "--catalog", catalog, "--input", audio.speech[0].path, "--fast", "--json",
                                         "--classify", "--duration", "6"], environment: env)
        #expect(listen.status == 0, "\(listen)")
        let events = listen.stdoutText.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
        let sounds = events.filter { $0["event"] as? String == "sound" }
        #expect(sounds.count >= 8)
        let speechWindows = sounds.filter { (($0["labels"] as? [[String: Any]])?.first?["label"] as? String) == "Speech" }
        #expect(speechWindows.count * 10 >= sounds.count * 7)
    }
}

@Suite("earmark train-classifier: a head of one's own labels on the model's embeddings")
struct TrainClassifierCLITests {
    @Test("trained on music and speech folders, the model labels unseen music and speech; bad folders fail cleanly")
    func trainAndUse() throws {
        let env: [String: String?] = ["EARMARK_MODEL": try TestModel.set().model.path]
        let audio = try TestAudio.set()
        let tmp = try TemporaryDirectory("train")
        let fm = FileManager.default
        for label in ["music", "speech"] { try fm.createDirectory(at: tmp.file("sounds/\(label)"), withIntermediateDirectories: true) }
        // 30 s of each of four tracks and 40 s of speech keep the (debug-build) test short.
        for stem in ["pingus-4", "pingus-5", "sorcerer", "goin_march"] {
            try Fixtures.cut(try audio.reference(stem), start: 20, seconds: 30, to: tmp.file("sounds/music/\(stem).wav"))
        }
        let heldOutSpeech = audio.speech[1]
        try Fixtures.cut(audio.speech[0], start: 0, seconds: 40, to: tmp.file("sounds/speech/prompts.wav"))
        let model = tmp.path("mine.emodel")
        let train = try EarmarkCLI.run(["train-classifier", tmp.path("sounds"), "-o", model, "--json"], environment: env, timeout: 600)
        #expect(train.status == 0, "\(train)")
        let report = try JSONSerialization.jsonObject(with: train.stdout) as! [String: Any]
        #expect((report["trainingAccuracy"] as! Double) > 0.95)
        #expect((report["labels"] as! [[String: Any]]).map { $0["label"] as! String } == ["music", "speech"])

        try Fixtures.cut(audio.negative[0], start: 30, seconds: 30, to: tmp.file("other-1.wav"))
        try Fixtures.cut(audio.negative[1], start: 30, seconds: 30, to: tmp.file("other-2.wav"))
        let out = try EarmarkCLI.run(["classify", "--model", model, "--json", heldOutSpeech.path, tmp.path("other-1.wav"), tmp.path("other-2.wav")])
        #expect(out.status == 0, "\(out)")
        let reports = try JSONSerialization.jsonObject(with: out.stdout) as! [[String: Any]]
        func leading(_ r: [String: Any]) -> (String, Double) {
            let d = ((r["summary"] as! [String: Any])["dominant"] as! [[String: Any]])[0]
            return (d["label"] as! String, d["share"] as! Double)
        }
        #expect(leading(reports[0]).0 == "speech" && leading(reports[0]).1 > 0.8, "\(leading(reports[0]))")
        for r in reports.dropFirst() { #expect(leading(r).0 == "music" && leading(r).1 > 0.8, "\(leading(r))") }
        // Its speech label drives speech activity too.
        #expect(!((reports[0]["summary"] as! [String: Any])["speech"] as! [Any]).isEmpty)

        // Refusals: existing output, one label only, a folder without audio.
        #expect(try EarmarkCLI.run(["train-classifier", tmp.path("sounds"), "-o", model], environment: env).status == 2)
        try fm.createDirectory(at: tmp.file("one/music"), withIntermediateDirectories: true)
        let one = try EarmarkCLI.run(["train-classifier", tmp.path("one"), "-o", tmp.path("x.emodel")], environment: env)
        #expect(one.status == 2)
        #expect(one.stderrText.contains("at least two label"))
        try fm.createDirectory(at: tmp.file("one/empty"), withIntermediateDirectories: true)
        let empty = try EarmarkCLI.run(["train-classifier", tmp.path("one"), "-o", tmp.path("x.emodel")], environment: env)
        #expect(empty.status == 2)
        #expect(!fm.fileExists(atPath: tmp.path("x.emodel")))
    }
}

@Suite("earmark analyze: instrument activity from the classifier")
struct InstrumentActivityCLITests {
    @Test("a brass march has brass active with a 0…1 curve per window; speech has no instrument; silence none")
    func instruments() throws {
        let env: [String: String?] = ["EARMARK_MODEL": try TestModel.set().model.path]
        let audio = try TestAudio.set()
        let tmp = try TemporaryDirectory("instruments")
        try WAVFile.write([Float](repeating: 0, count: 44_100 * 4), to: tmp.file("silence.wav"))
        let out = try EarmarkCLI.run(["analyze", "--only", "instruments", "--json", try audio.reference("goin_march").path,
                                      audio.speech[0].path, tmp.path("silence.wav")], environment: env)
        #expect(out.status == 0, "\(out)")
        let reports = try JSONSerialization.jsonObject(with: out.stdout) as! [[String: Any]]
        func families(_ r: [String: Any]) -> [String: [String: Any]] {
            let list = (r["instruments"] as! [String: Any])["families"] as! [[String: Any]]
            return Dictionary(uniqueKeysWithValues: list.map { ($0["family"] as! String, $0) })
        }
        func activeSeconds(_ f: [String: Any]) -> Double {
            (f["activeRanges"] as! [[String: Double]]).reduce(0) { $0 + $1["end"]! - $1["start"]! }
        }
        let march = families(reports[0])
        #expect(march.count == 9)
        #expect(reports[0]["loudness"] is NSNull)
        let brass = try #require(march["brass"])
        #expect(activeSeconds(brass) >= 10, "\(brass["activeRanges"]!)")
        let curve = brass["activity"] as! [[String: Double]]
        #expect(curve.count >= 95)
        #expect(curve.allSatisfy { (0...1).contains($0["value"]!) && $0["end"]! > $0["start"]! })
        for (name, f) in families(reports[1]) { #expect(activeSeconds(f) < 5, "speech: \(name) active") }
        for (name, f) in families(reports[2]) { #expect(activeSeconds(f) == 0, "silence: \(name) active") }
        let text = try EarmarkCLI.run(["analyze", try audio.reference("goin_march").path], environment: env)
        // A march: brass among the families named (drums may come first).
        let named = text.stdoutText.split(separator: "\n").first { $0.contains("instruments: ") } ?? ""
        #expect(named.contains("brass"), "\(text.stdoutText)")
        #expect(text.stdoutText.contains("LUFS integrated"))
    }
}

@Suite("earmark analyze: key and rhythm")
struct KeyRhythmCLITests {
    @Test("analyze --json gives a spelled key with ranges and beats, bars and BPM; --only picks dimensions")
    func keyAndRhythm() throws {
        let audio = try TestAudio.set()
        let track = try audio.reference("pingus-4").path
        let out = try EarmarkCLI.run(["analyze", "--only", "key,rhythm", "--json", track])
        #expect(out.status == 0, "\(out)")
        let report = try JSONSerialization.jsonObject(with: out.stdout) as! [String: Any]
        #expect(report["loudness"] is NSNull && report["instruments"] is NSNull)
        let key = try #require(report["key"] as? [String: Any])
        #expect(MusicalKeySpelling.valid(key["tonic"] as? String))
        let ranges = key["ranges"] as! [[String: Any]]
        #expect(!ranges.isEmpty && (ranges[0]["start"] as! Double) == 0)
        let rhythm = try #require(report["rhythm"] as? [String: Any])
        let beats = rhythm["beats"] as! [Double], bars = rhythm["bars"] as! [Double]
        #expect(beats.count > 50)
        #expect(zip(beats, beats.dropFirst()).allSatisfy { $0 < $1 })
        #expect(Set(bars).isSubset(of: Set(beats)))
        let bpm = rhythm["bpm"] as! Double
        #expect(bpm > 40 && bpm < 240)
        #expect(abs(Double(beats.count) - bpm * (beats.last! - beats.first!) / 60) < 0.1 * Double(beats.count))
        #expect(try EarmarkCLI.run(["analyze", "--only", "tempo", track]).status == 64)
        let all = try JSONSerialization.jsonObject(with: try EarmarkCLI.run(["analyze", "--only", "structure,pace", "--json", track]).stdout) as! [String: Any]
        let structure = try #require(all["structure"] as? [String: Any])
        let sections = structure["sections"] as! [[String: Any]]
        #expect(!sections.isEmpty && (sections[0]["start"] as! Double) == 0 && sections[0]["label"] as? String == "A")
        let pace = try #require(all["pace"] as? [String: Any])
        #expect((pace["overall"] as! Double) > 30 && !(pace["values"] as! [Any]).isEmpty)
        let speech = try EarmarkCLI.run(["analyze", "--only", "key", audio.speech[0].path],
                                        environment: ["EARMARK_MODEL": try TestModel.set().model.path])
        #expect(speech.stdoutText.contains("key none (speech)"), "\(speech)")
    }
}

@Suite("earmark analyze: no key, rhythm, structure or pace without music")
struct NonMusicCLITests {
    @Test("dithered near-silence and real speech: empty results with the reason, in JSON and in text")
    func nonMusic() throws {
        let env: [String: String?] = ["EARMARK_MODEL": try TestModel.set().model.path]
        let audio = try TestAudio.set()
        let tmp = try TemporaryDirectory("non-music")
        // The issue's file: 30 s of white noise at −90 dB, dithered to 16 bits by sox.
        try Run.sox(["-n", "-r", "44100", "-c", "1", "-b", "16", tmp.path("dither.wav"), "synth", "30", "whitenoise", "vol", "-90dB"])
        let out = try EarmarkCLI.run(["analyze", "--only", "key,rhythm,structure,pace", "--json", tmp.path("dither.wav"),
                                      audio.speech[0].path], environment: env)
        #expect(out.status == 0, "\(out)")
        let reports = try JSONSerialization.jsonObject(with: out.stdout) as! [[String: Any]]
        for (report, reason) in zip(reports, ["silence", "speech"]) {
            let music = try #require(report["music"] as? [String: Any])
            #expect(music["reason"] as? String == reason && (music["ranges"] as? [Any])?.isEmpty == true, "\(music)")
            #expect(report["key"] is NSNull)
            let rhythm = try #require(report["rhythm"] as? [String: Any])
            #expect((rhythm["beats"] as? [Any])?.isEmpty == true && rhythm["bpm"] == nil && rhythm["reason"] as? String == reason)
            let structure = try #require(report["structure"] as? [String: Any])
            #expect((structure["sections"] as? [Any])?.isEmpty == true && structure["reason"] as? String == reason)
            let pace = try #require(report["pace"] as? [String: Any])
            #expect((pace["values"] as? [Any])?.isEmpty == true && pace["reason"] as? String == reason)
        }
        let text = try EarmarkCLI.run(["analyze", tmp.path("dither.wav")], environment: env).stdoutText
        for line in ["music none (silence)", "key none (silence)", "rhythm none (silence)", "structure none (silence)", "pace none (silence)"] {
            #expect(text.contains(line), "\(text)")
        }
        // --whole-file measures everything as before: the dither's flux makes beats.
        let whole = try EarmarkCLI.run(["analyze", "--only", "rhythm", "--whole-file", "--json", tmp.path("dither.wav")], environment: env)
        let rhythm = try #require((try JSONSerialization.jsonObject(with: whole.stdout) as? [String: Any])?["rhythm"] as? [String: Any])
        #expect(((rhythm["beats"] as? [Any])?.count ?? 0) > 10, "\(rhythm)")
    }
}
