import ArgumentParser
import EarmarkKit
import Foundation

struct AnalyzeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "analyze",
        abstract: "Measure music metadata of audio files: loudness, key, rhythm, structure, pace, instrument activity.",
        discussion: """
        Loudness follows EBU R 128 / ITU-R BS.1770-4 (as libebur128 measures it), measured on the file's own channels \
        and sample rate: integrated loudness (LUFS), loudness range (LU), true peak (dBTP), sample \
        peak (dBFS), and momentary (400 ms) and short-term (3 s) loudness every 100 ms. Silence has no \
        loudness: those values are null.

        Key: the tonic (C, C#, Db, … B: the spelling of the usual key signature) and mode of the whole \
        piece, with its strength (correlation of the piece's pitch-class profile with the key's, −1…1) \
        and margin over the runner-up, and the key over time as ranges (modulations), from 8-s windows \
        every 2 s smoothed with a penalty for changing key. Audio without pitch (silence, noise) may \
        have no key: null.

        Rhythm: beat times, bar (downbeat) times with the beats per bar (3 or 4), and the tempo in BPM \
        (null with fewer than two beats), from a spectral-flux onset envelope, a tempo estimate, \
        dynamic-programming beat tracking that follows onsets and harmonic changes, and the bar phase \
        whose beats have the most harmonic change and bass onset strength.

        Structure: sections (large parts, labelled A, B, … by similarity), segments (finer changes) and \
        phrases (four bars each, inside segments) as time ranges, from the novelty of a self-similarity \
        matrix of pitch-class and mel-cepstral features; section boundaries also weigh whether the music \
        before and after them repeats and keeps its pulse, so their number is not fixed in advance.

        Pace: musical events (note and drum onsets) per minute, overall and over 10-s ranges every 5 s.

        Key, rhythm, structure and pace are measured only where there is music: windows of about a second \
        under −55 dBFS are silence, and with the sound model (when it is installed, also when --only leaves \
        instruments out) a window is music when YAMNet's music labels say so. The music's time ranges are \
        printed when they leave part of the file out; a file without music gets no key, no beats, no sections \
        and no pace, with the reason (silence, speech, no music). Without the sound model only silence is told \
        apart. --whole-file measures the whole file as before.

        Instrument activity comes from the sound classifier (YAMNet, see `earmark classify --help`): \
        for each family (drums, bass, guitar, keys, strings, brass, woodwinds, voice, synth) a 0…1 \
        activity curve, one value per 0.96-s window, back to back, and the time ranges where it plays. \
        With YAMNet the curve is the family's probability from the instrument head shipped with Earmark \
        (trained on YAMNet's window embeddings), scaled down where YAMNet hears little music and averaged \
        over a few seconds; a range starts where the curve reaches the family's onset threshold and lasts \
        while it stays at its offset threshold (gaps up to 1 s joined, ranges under 1 s dropped). Without \
        the head (or with another model) the curve is the best score among the family's AudioSet labels, \
        with thresholds 0.1 and 0.05; the result's `method` says which. Instrument activity is left out, \
        with a warning, when no model is installed, unless --only names it or --model is given (then a \
        missing model is an error).

        --json: one object {path, loudness: {integrated, range, truePeak, samplePeak, maximumMomentary, \
        maximumShortTerm, momentary: [{start, end, value}], shortTerm: [{start, end, value}], duration, \
        sampleRate, channels}, key: {tonic, mode, strength, margin, ranges: [{start, end, tonic, mode}], \
        duration}, rhythm: {beats, bars, beatsPerBar, bpm, tempo: [{start, end, bpm}], timeSignature, timeSignatures: [{start, end, timeSignature}], duration}, structure: {sections: [{start, end, \
        label}], segments, phrases, duration}, pace: {overall, values: [{start, end, value}], duration}, instruments: {model, method, duration, families: [{family, activeRanges: [{start, end}], \
        activity: [{start, end, value}]}]}, music: {ranges: [{start, end}], reason, method, duration}, error} per file; \
        an array for several files. Without music, rhythm, structure and pace are empty and carry a reason; key is null.

        --only picks dimensions: loudness, key, rhythm, structure, pace, instruments.

        --svg out.svg (one file only) also draws what was measured as a timeline: loudness (momentary and \
        short-term), beats and bars, sections and segments, key ranges, instrument activity per family, and \
        with the sound model the sound classes and speech ranges, on one time axis (see docs/analysis.md).

        Exit codes: 0 every file analysed; 2 some file could not be read, or the sound model could not be \
        loaded; 64 invalid usage. See docs/analysis.md.
        """
    )

    @Flag(help: "Print JSON on standard output instead of text.")
    var json = false

    @Option(help: ArgumentHelp("Dimensions to compute, comma-separated (loudness, key, rhythm, structure, pace, instruments). Default: all available.", valueName: "list"))
    var only: String?

    @Option(help: ArgumentHelp("Sound model for instrument activity (default: see `earmark classify --help`).", valueName: "path"))
    var model: String?

    @Option(help: ArgumentHelp("Also draw the analysis as an SVG timeline into this file (one input file only).", valueName: "out.svg"))
    var svg: String?

    @Flag(help: "Measure key, rhythm, structure and pace over the whole file, music or not.")
    var wholeFile = false

    @Argument(help: ArgumentHelp("Audio files to analyse.", valueName: "file"))
    var files: [String]

    private var asked: [String]? {
        only.map { $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) } }
    }

    func validate() throws {
        for a in asked ?? [] where !["loudness", "key", "rhythm", "structure", "pace", "instruments"].contains(a) {
            throw ValidationError("--only: unknown dimension '\(a)' (loudness, key, rhythm, structure, pace, instruments).")
        }
        if svg != nil, files.count != 1 {
            throw ValidationError("--svg draws one file's timeline; give exactly one file (got \(files.count)).")
        }
        if let svg, svg.isEmpty { throw ValidationError("--svg needs a file name.") }
    }

    mutating func run() async throws {
        let wantLoudness = asked?.contains("loudness") ?? true
        let wantKey = asked?.contains("key") ?? true
        let wantRhythm = asked?.contains("rhythm") ?? true
        let wantStructure = asked?.contains("structure") ?? true
        let wantPace = asked?.contains("pace") ?? true
        var soundModel: SoundModel?
        if asked?.contains("instruments") ?? true {
            do {
                soundModel = try SoundModel.load(path: model)
                guard InstrumentActivity.supports(soundModel!) else {
                    throw SoundModelError(.inconsistent, "\(soundModel!.name) does not have YAMNet's AudioSet labels that instrument activity needs")
                }
            } catch let e as SoundModelError where e.code == .notFound && asked == nil && model == nil {
                warn("instrument activity skipped: \(e.message)")
                soundModel = nil
            } catch {
                writeStderr("earmark: \(error)\n")
                throw ExitCode(2)
            }
        }
        let wantInstruments = soundModel != nil
        // The classifier tells music from speech for key, rhythm, structure and pace, when the model is installed.
        if soundModel == nil, !wholeFile, wantKey || wantRhythm || wantStructure || wantPace {
            soundModel = try? SoundModel.load(path: model)
        }
        var reports: [AnalysisReport] = []
        var failed = 0
        for file in files {
            do {
                var analyses = Analyses(loudness: wantLoudness, key: wantKey, rhythm: wantRhythm,
                                        structure: wantStructure, pace: wantPace, sound: soundModel)
                analyses.musicOnly = !wholeFile
                var f = try Fingerprinter.analyze(path: file, analyses: analyses)
                if !wantInstruments {
                    f.instruments = nil
                    f.sound = nil
                }
                let report = AnalysisReport(path: file, loudness: f.loudness, key: wantKey ? .some(f.key) : nil,
                                            rhythm: wantRhythm ? .some(f.rhythm) : nil, structure: wantStructure ? .some(f.structure) : nil,
                                            pace: wantPace ? .some(f.pace) : nil, instruments: f.instruments, music: f.music, error: nil)
                if let svg {
                    let timeline = AnalysisTimeline(title: URL(fileURLWithPath: file).lastPathComponent, file: f)
                    do {
                        try writeTimeline(timeline.svg(), to: svg)
                    } catch {
                        writeStderr("earmark: error: \(describe(error))\n")
                        throw ExitCode(2)
                    }
                }
                if !json { print(report.humanText + (svg.map { "\n  timeline \($0)" } ?? "")) }
                reports.append(report)
            } catch {
                let message = describe(error, file: file)
                writeStderr(message + "\n")
                reports.append(AnalysisReport(path: file, loudness: nil, key: nil, rhythm: nil, structure: nil, pace: nil, instruments: nil,
                                              music: nil, error: message))
                failed += 1
            }
        }
        if json { if files.count == 1 { try printJSON(reports[0]) } else { try printJSON(reports) } }
        if failed > 0 { throw ExitCode(2) }
    }
}

struct AnalysisReport: Encodable {
    var path: String
    var loudness: LoudnessResult?
    /// nil: not asked; .some(nil): asked, no key found.
    var key: KeyResult??
    var rhythm: RhythmResult??
    var structure: StructureResult??
    var pace: PaceResult??
    var instruments: InstrumentActivity?
    /// Where the music is (nil when neither key, rhythm, structure nor pace was asked for, or with --whole-file).
    var music: MusicPresence?
    var error: String?

    enum CodingKeys: String, CodingKey { case path, loudness, key, rhythm, structure, pace, instruments, music, error }
    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(path, forKey: .path)
        try c.encode(loudness, forKey: .loudness)
        try c.encode(key ?? nil, forKey: .key)
        try c.encode(rhythm ?? nil, forKey: .rhythm)
        try c.encode(structure ?? nil, forKey: .structure)
        try c.encode(pace ?? nil, forKey: .pace)
        try c.encode(instruments, forKey: .instruments)
        try c.encode(music, forKey: .music)
        try c.encode(error, forKey: .error)
    }

    var humanText: String {
        if let error { return "\(path): \(error)" }
        var lines: [String] = []
        if let l = loudness {
            lines.append("\(path): \(formatDuration(l.duration)), \(l.channels) ch, \(Int(l.sampleRate)) Hz")
            lines.append("  loudness \(formatLevel(l.integrated, "LUFS")) integrated, range \(formatLevel(l.range, "LU")), true peak \(formatLevel(l.truePeak, "dBTP")), "
                         + "sample peak \(formatLevel(l.samplePeak, "dBFS"))")
            lines.append("  loudest 400 ms \(formatLevel(l.maximumMomentary, "LUFS")), loudest 3 s \(formatLevel(l.maximumShortTerm, "LUFS"))")
        } else {
            lines.append("\(path):" + (instruments.map { " \(formatDuration($0.duration))" } ?? ""))
        }
        // Without music: one reason for every dimension asked for.
        if let music, let reason = music.reason {
            lines.append("  music none (\(reason.rawValue))")
            for (name, asked) in [("key", key != nil), ("rhythm", rhythm != nil), ("structure", structure != nil), ("pace", pace != nil)] where asked {
                lines.append("  \(name) none (\(reason.rawValue))")
            }
            if let i = instruments { lines.append("  instruments: " + i.summaryText) }
            return lines.joined(separator: "\n")
        }
        if let music, music.hasMusic, !music.coversAll {
            lines.append("  music " + music.ranges.map { "\(formatDuration($0.start))–\(formatDuration($0.end))" }.joined(separator: ", "))
        }
        if let k = key {
            if let k {
                var text = "  key \(k.tonic) \(k.mode.rawValue)" + String(format: " (strength %.2f)", k.strength)
                if k.ranges.count > 1 {
                    text += "; " + k.ranges.map { "\(formatDuration($0.start)) \($0.tonic) \($0.mode.rawValue)" }.joined(separator: ", ")
                }
                lines.append(text)
            } else {
                lines.append("  key unknown (no pitched sound)")
            }
        }
        if let r = rhythm {
            if let r, let bpm = r.bpm {
                var text = String(format: "  rhythm %.1f BPM, %d beats, %d bars of %d", bpm, r.beats.count, r.bars.count, r.beatsPerBar)
                if let signature = r.timeSignature {
                    text += r.timeSignatures.count > 1
                        ? ", time " + r.timeSignatures.map { "\(formatDuration($0.start)) \($0.timeSignature)" }.joined(separator: ", ")
                        : ", time \(signature)"
                }
                if r.tempo.count > 1 {
                    text += "; tempo " + r.tempo.map { "\(formatDuration($0.start)) " + String(format: "%.0f", $0.bpm) }.joined(separator: ", ")
                }
                lines.append(text)
            } else {
                lines.append("  rhythm unknown (no steady pulse)")
            }
        }
        if let st = structure, let st {
            let sections = st.sections.map { "\(formatDuration($0.start)) \($0.label ?? "")" }.joined(separator: ", ")
            lines.append("  structure \(st.sections.count) sections (\(sections)), \(st.segments.count) segments, \(st.phrases.count) phrases")
        }
        if let p = pace, let p { lines.append(String(format: "  pace %.0f events a minute", p.overall)) }
        if let i = instruments { lines.append("  instruments: " + i.summaryText) }
        return lines.joined(separator: "\n")
    }
}
