@_exported import EarmarkClassification
@_exported import EarmarkAnalysis
@_exported import EarmarkAudio
@_exported import EarmarkCatalog
@_exported import EarmarkMatching
@_exported import EarmarkSignature
@_exported import EarmarkSpeech
@_exported import EarmarkStreaming
import Foundation

/// A file decoded once and turned into a signature and a content digest.
public struct FingerprintedFile: Sendable {
    public var path: String
    public var signature: Signature
    /// ``AudioDigest`` of the decoded 44.1 kHz mono audio; for a signature file, ``Signature/contentIdentity``.
    public var contentHash: String
    /// The decoder that read the audio; nil for a signature file.
    public var decoder: AudioFileReader.Decoder?
    /// EBU R 128 loudness of the file, when asked for (measured on its own channels and rate); nil for a signature file.
    public var loudness: LoudnessResult? = nil
    /// Sound classification of the whole file, when asked for.
    public var sound: SoundAnalysis? = nil
    /// Instrument activity from the same classification (AudioSet models only).
    public var instruments: InstrumentActivity? = nil
    /// Where the file holds music, when key, rhythm, structure or pace was asked for: those are measured
    /// only inside its ranges, and its reason says why they are empty (silence, speech, no music).
    public var music: MusicPresence? = nil
    /// Key and key ranges, when asked for (nil also when the audio has no pitch, or no music: see ``music``).
    public var key: KeyResult? = nil
    /// Beats, bars and BPM, when asked for (nil also when the audio has no pulse).
    public var rhythm: RhythmResult? = nil
    /// Sections, segments and phrases, when asked for.
    public var structure: StructureResult? = nil
    /// Musical events per minute over time, when asked for.
    public var pace: PaceResult? = nil
    /// What is said, when a transcript was asked for (kind `speech`; no segments when there is no speech).
    public var speech: SpeechAnalysis? = nil
}

/// Which analyses a decoding pass computes besides the signature.
public struct Analyses: Sendable {
    public var loudness = false
    public var key = false
    public var rhythm = false
    public var structure = false
    public var pace = false
    /// Sound classification (and instrument activity, for AudioSet models) with this model.
    public var sound: SoundModel? = nil
    /// A transcript of the speech (Whisper, with word times) with this model; speech is found with `sound`, so it needs that too.
    public var speech: SpeechModel? = nil
    /// Key, rhythm, structure and pace only where there is music (``MusicPresence``: from `sound`'s music
    /// and speech scores when a model is given, else from the level alone); false: over the whole file.
    public var musicOnly = true

    public init(loudness: Bool = false, key: Bool = false, rhythm: Bool = false, structure: Bool = false, pace: Bool = false,
                sound: SoundModel? = nil, speech: SpeechModel? = nil) {
        self.loudness = loudness
        self.key = key
        self.rhythm = rhythm
        self.structure = structure
        self.pace = pace
        self.sound = sound
        self.speech = speech
    }

    /// Loudness, key, rhythm, structure and pace, plus sound classification when a model is given.
    public static func all(sound: SoundModel?) -> Analyses {
        Analyses(loudness: true, key: true, rhythm: true, structure: true, pace: true, sound: sound)
    }

    var any: Bool { loudness || key || rhythm || structure || pace || sound != nil || speech != nil }
}

/// Decodes audio files into signatures in one streaming pass.
public enum Fingerprinter {
    /// Reads `path` (any supported format) and returns its signature and content digest.
    /// Files whose name ends in `.earsig` are read (and validated) as signature files instead.
    /// The same single decoding pass also computes the `analyses` asked for.
    public static func fingerprint(path: String, configuration: SignatureConfiguration = .current,
                                   digest: Bool = true, analyses: Analyses = Analyses()) throws -> FingerprintedFile {
        if path.lowercased().hasSuffix(".earsig") {
            let sig = try readSignatureFile(path: path)
            return FingerprintedFile(path: path, signature: sig, contentHash: digest ? sig.contentIdentity : "", decoder: nil)
        }
        if analyses.any { return try fingerprintAnalyzing(path: path, configuration: configuration, digest: digest, analyses: analyses) }
        let reader = try AudioFileReader(path: path)
        let generator = SignatureGenerator(configuration: configuration)
        var hasher = AudioDigest()
        while let chunk = try reader.next() {
            try generator.append(chunk)
            if digest { hasher.update(chunk) }
        }
        return FingerprintedFile(path: path, signature: generator.signature(),
                                 contentHash: digest ? hasher.finalizeHex() : "", decoder: reader.decoder)
    }
}

extension Fingerprinter {
    /// Reads and validates a `.earsig` file; a file larger than any valid signature is refused unread.
    public static func readSignatureFile(path: String) throws -> Signature {
        let limit = Signature.maximumFileBytes()
        let data: Data
        do {
            let handle = try FileHandle(forReadingFrom: URL(fileURLWithPath: path))
            defer { try? handle.close() }
            data = try handle.read(upToCount: limit + 1) ?? Data()
        } catch {
            throw AudioError(.unreadable, "cannot read: \(error.localizedDescription)", path: path)
        }
        do {
            return try Signature(dataRepresentation: data)
        } catch let e as SignatureError {
            throw SignatureError(e.code, "\(path): \(e.message)")
        }
    }

    /// Decodes `path` once for the `analyses` alone (no signature: the result's signature is empty).
    public static func analyze(path: String, analyses: Analyses) throws -> FingerprintedFile {
        try fingerprintAnalyzing(path: path, configuration: .current, digest: false, analyses: analyses, signature: false)
    }

    /// One pass over the file's own channels: the loudness meter takes them as they are, the fingerprint
    /// their average converted to 44.1 kHz, exactly as ``AudioFileReader`` makes it (same chunks, same
    /// downmix), so signatures and digests do not depend on whether loudness was measured.
    /// One decoding pass feeding the signature generator and every analysis asked for (loudness on the
    /// file's own channels and rate, sound classification from the same buffers).
    static func fingerprintAnalyzing(path: String, configuration: SignatureConfiguration, digest: Bool,
                                     analyses request: Analyses, signature: Bool = true) throws -> FingerprintedFile {
        let reader = try MultichannelFileReader(path: path)
        let keyDetector = request.key ? try KeyDetector(inputRate: reader.sampleRate) : nil
        // Structure's phrases need the bars, and pace the onset envelope: both come from the beat tracker.
        let beatTracker = request.rhythm || request.structure || request.pace ? try BeatTracker(inputRate: reader.sampleRate) : nil
        let structure = request.structure ? try StructureAnalyzer(inputRate: reader.sampleRate) : nil
        // The transcriber reads the same mono buffers (resampled once to 16 kHz) and only where it hears speech.
        let transcriber = try request.speech.flatMap { speech in
            try request.sound.map { sound in
                try SpeechAnalyzer(recognizer: WhisperRecognizer(model: speech), detector: SpeechDetector(soundModel: sound),
                                   options: SpeechStreamOptions(transcription: TranscriptionOptions(wordTimestamps: true), maximumStretch: 60,
                                                                reportsVolatile: false))
            }
        }
        var spoken: [SpeechResult] = []
        let meter = request.loudness ? try LoudnessMeter(sampleRate: reader.sampleRate, channels: reader.channels) : nil
        // Music presence: from the classifier's windows when it runs, else from the level of the same windows.
        let gated = request.musicOnly && (request.key || request.rhythm || request.structure || request.pace)
        let levels = gated && request.sound == nil ? LevelWindows(sampleRate: reader.sampleRate) : nil
        // Whole-file analysis classifies back-to-back patches (no overlap): half the cost of `classify`'s default.
        let classifier = try request.sound.map {
            try SoundClassificationStream(model: $0, options: ClassificationOptions(windowDuration: $0.frontEnd.patchDuration, overlapFactor: 0))
        }
        // ffmpeg's own mono downmix made every fingerprint of such files so far; keep it (a pass of its
        // own), and analyse the stereo stream here.
        let separate = signature && reader.decoder == .ffmpeg ? try fingerprint(path: path, configuration: configuration, digest: digest) : nil
        let signing = signature && separate == nil
        let resampler = signing ? try Resampler(inputRate: reader.sampleRate) : nil
        let generator = signing ? SignatureGenerator(configuration: configuration) : nil
        var hasher = AudioDigest()
        var frames = 0
        func feed(_ mono: [Float]) throws {
            guard !mono.isEmpty, let generator else { return }
            try generator.append(mono)
            if digest { hasher.update(mono) }
        }
        var windows: [SoundWindow] = []
        while let buffer = try reader.next() {
            meter?.append(buffer.samples)
            frames += buffer.frameCount
            let mono = buffer.mono
            // One downmix serves every mono consumer, the classifier included.
            windows += try classifier?.append(PCMBuffer(samples: mono, sampleRate: buffer.sampleRate)) ?? []
            spoken += try transcriber?.append(PCMBuffer(samples: mono, sampleRate: buffer.sampleRate)) ?? []
            levels?.append(mono)
            keyDetector?.append(mono)
            beatTracker?.append(mono)
            structure?.append(mono)
            if let resampler { try feed(resampler.process(mono)) }
        }
        guard frames > 0 else { throw AudioError(.empty, "no audio samples in file", path: path) }
        if let resampler { try feed(resampler.flush()) }
        windows += classifier?.finish() ?? []
        var f = separate ?? FingerprintedFile(
            path: path,
            signature: generator?.signature()
                ?? Signature(configurationVersion: configuration.version, duration: Double(frames) / reader.sampleRate, peaks: []),
            contentHash: digest && signing ? hasher.finalizeHex() : "", decoder: reader.decoder)
        f.loudness = meter?.result()
        f.sound = classifier.map { SoundAnalysis(windows: windows, duration: $0.duration, model: $0.model, options: $0.options) }
        f.instruments = classifier.flatMap {
            InstrumentActivity.supports($0.model) ? try? InstrumentActivity(windows: windows, duration: $0.duration, model: $0.model) : nil
        }
        if let transcriber, let model = request.speech {
            spoken += try transcriber.finish()
            f.speech = SpeechAnalysis(model: model.name, duration: transcriber.duration, results: spoken)
        }
        if gated {
            let duration = Double(frames) / reader.sampleRate
            if let classifier {
                f.music = MusicPresence(evidence: musicEvidence(windows, model: classifier.model), duration: duration)
            } else if let levels {
                f.music = MusicPresence(evidence: levels.evidence(), duration: duration)
            }
        }
        let music = f.music
        f.key = keyDetector?.result(music: music)
        let rhythm = beatTracker?.result(music: music)
        f.rhythm = request.rhythm ? rhythm : nil
        f.structure = structure?.result(bars: rhythm?.bars ?? [], music: music)
        f.pace = request.pace ? beatTracker?.pace(music: music) : nil
        return f
    }
}

/// The classifier's windows as evidence of music: each window's level, its best music label's score and
/// its best speech label's score (labels grouped as ``SoundCategory/table(for:)`` groups them). A model
/// without a music label gives the level alone.
func musicEvidence(_ windows: [SoundWindow], model: SoundModel) -> [MusicEvidence] {
    let table = SoundCategory.table(for: model)
    let music = table.indices.filter { table[$0] == .music }, speech = table.indices.filter { table[$0] == .speech }
    func best(_ labels: [Int], _ scores: [Float]) -> Double {
        Double(labels.map { scores.indices.contains($0) ? scores[$0] : 0 }.max() ?? 0)
    }
    return windows.map { w in
        MusicEvidence(start: w.start, end: w.start + w.duration, level: w.level,
                      music: music.isEmpty ? nil : best(music, w.scores), speech: music.isEmpty ? nil : best(speech, w.scores))
    }
}

/// Audio file extensions picked up when a folder is added.
public let audioFileExtensions: Set<String> = ["wav", "wave", "aif", "aiff", "aifc", "flac", "ogg", "oga", "opus",
                                               "mp3", "m4a", "aac", "mp4", "webm", "mka", "wma", "caf", "w64"]

/// Expands folders (recursively) into their audio files, sorted; plain file arguments are kept as given.
public func expandAudioPaths(_ paths: [String]) throws -> [String] {
    var out: [String] = []
    for p in paths {
        var isDir: ObjCBool = false
        guard FileManager.default.fileExists(atPath: p, isDirectory: &isDir) else {
            throw AudioError(.unreadable, "no such file or folder", path: p)
        }
        if isDir.boolValue {
            guard let e = FileManager.default.enumerator(atPath: p) else { continue }
            var found: [String] = []
            for case let rel as String in e {
                let ext = URL(fileURLWithPath: rel).pathExtension.lowercased()
                if audioFileExtensions.contains(ext) { found.append((p as NSString).appendingPathComponent(rel)) }
            }
            out += found.sorted()
        } else {
            out.append(p)
        }
    }
    return out
}
