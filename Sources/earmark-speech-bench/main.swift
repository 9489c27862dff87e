// earmark-speech-bench: speed of the Whisper recogniser on real recordings, stage by stage.
//   earmark-speech-bench [--model PATH] [--language CODE] [--beam N] [--words] [--detect SOUND-MODEL] [--json]
//                        [--short-padding SECONDS | --whole-windows] [--no-previous-text] FILE...
// Prints, per file, the seconds spent in the front end, the encoder and the decoder, the transcript, and
// × real time (audio seconds / processing seconds, model loading excluded; it is printed on its own).
// --beam N: beams of the beam search (default 5; 1 decodes greedily). --words times every word; --detect finds
// the speech with the sound model first (its time is included). --json: one JSON object a line per file
// ({file, audio, seconds, cpu, language, text}; cpu: the process's user + system seconds for that file, which a
// loaded machine does not inflate as it does wall time) instead, then {audio, seconds, cpu} for all
// (tools/speech-eval.sh reads it).
// --short-padding S: TranscriptionOptions.shortWindowPadding (the library's default: 8); --whole-windows: nil (every
// window encoded whole, as CTranslate2 does); --no-previous-text: conditionOnPreviousText off.
// --decoder-weights float16|int8: how the decoder's per-token weights are held (DecoderWeights; default: the library's).
// --encoder-weights float32|int8: how the encoder's linear layers are held (EncoderWeights; default: the library's).
// --trace: every window's start, temperature, mean log-probability, compression ratio, no-speech probability and
// text on standard error, and with --json every segment ({start, end, text}) in the file's line.
import EarmarkClassification
import EarmarkSpeech
import Foundation

var modelPath = SpeechModel.defaultRelativePath
var language: String?
var files: [String] = []
var words = false
var soundModelPath: String?
var beam = 5
var json = false
var shortPadding = TranscriptionOptions().shortWindowPadding
var previousText = true
var trace = false
var decoderWeights = DecoderWeights.standard
var encoderWeights = EncoderWeights.standard
var args = CommandLine.arguments.dropFirst().makeIterator()
while let a = args.next() {
    switch a {
    case "--model": modelPath = args.next() ?? modelPath
    case "--language": language = args.next()
    case "--words": words = true
    case "--detect": soundModelPath = args.next()
    case "--beam": beam = args.next().flatMap { Int($0) }.map { max(1, $0) } ?? beam
    case "--json": json = true
    case "--short-padding": shortPadding = args.next().flatMap { Double($0) }
    case "--whole-windows": shortPadding = nil
    case "--no-previous-text": previousText = false
    case "--trace": trace = true
    case "--decoder-weights":
        let value = args.next() ?? ""
        guard let w = DecoderWeights(rawValue: value) else {
            FileHandle.standardError.write(Data("earmark-speech-bench: --decoder-weights takes float16 or int8, not \(value)\n".utf8))
            exit(2)
        }
        decoderWeights = w
    case "--encoder-weights":
        let value = args.next() ?? ""
        guard let w = EncoderWeights(rawValue: value) else {
            FileHandle.standardError.write(Data("earmark-speech-bench: --encoder-weights takes float32 or int8, not \(value)\n".utf8))
            exit(2)
        }
        encoderWeights = w
    case "-h", "--help":
        print("usage: earmark-speech-bench [--model PATH] [--language CODE] [--beam N] [--words] [--detect SOUND-MODEL] [--json] "
              + "[--short-padding SECONDS | --whole-windows] [--no-previous-text] [--trace] [--decoder-weights float16|int8] "
              + "[--encoder-weights float32|int8] FILE...")
        exit(0)
    default: files.append(a)
    }
}
guard !files.isEmpty else {
    FileHandle.standardError.write(Data("earmark-speech-bench: no files (see --help)\n".utf8))
    exit(2)
}
let clock = ContinuousClock()
func seconds(_ d: Duration) -> Double { Double(d.components.seconds) + Double(d.components.attoseconds) * 1e-18 }
func cpuSeconds() -> Double {
    var t = timespec()
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t)
    return Double(t.tv_sec) + Double(t.tv_nsec) * 1e-9
}
do {
    var start = clock.now
    let model = try SpeechModel(path: modelPath, decoderWeights: decoderWeights, encoderWeights: encoderWeights)
    let recognizer = WhisperRecognizer(model: model)
    if trace {
        recognizer.windowObserver = { start, d, skipped in
            let text = recognizer.model.tokenizer.decode(d.tokens)
            FileHandle.standardError.write(Data(String(format: "window %.2f s: T %.1f, logprob %.3f, ratio %.3f, no-speech %.3f%@ |%@\n",
                                                        start, d.temperature, d.averageLogProbability, d.compressionRatio,
                                                        d.noSpeechProbability, skipped ? " (skipped)" : "", text).utf8))
        }
    }
    let detector = try soundModelPath.map { SpeechDetector(soundModel: try SoundModel(path: $0)) }
    if !json { print(String(format: "model load %.2f s", seconds(clock.now - start))) }
    var totalAudio = 0.0, totalTime = 0.0, totalCPU = 0.0
    for file in files {
        let samples = try SpeechAudio.load(path: file, sampleRate: recognizer.sampleRate)
        let audio = Double(samples.count) / Double(recognizer.sampleRate)
        var melTime = 0.0, encodeTime = 0.0
        if !json {
            start = clock.now
            let mel = recognizer.frontEnd.spectrogram(samples)
            melTime = seconds(clock.now - start)
            // One window encoded on its own, for the encoder's share.
            start = clock.now
            _ = recognizer.encode(window: mel.window(start: 0, length: model.frontEnd.chunkFrames))
            encodeTime = seconds(clock.now - start)
        }
        start = clock.now
        let cpuStart = cpuSeconds()
        let speech = try detector?.ranges(samples: samples, sampleRate: recognizer.sampleRate)
        let detectTime = seconds(clock.now - start)
        var options = TranscriptionOptions(language: language, wordTimestamps: words, beamSize: beam)
        options.shortWindowPadding = shortPadding
        options.conditionOnPreviousText = previousText
        let result = try recognizer.transcribe(samples: samples, options: options, speech: speech)
        let total = seconds(clock.now - start)
        let cpu = cpuSeconds() - cpuStart
        totalAudio += audio
        totalTime += total
        totalCPU += cpu
        if json {
            var line: [String: Any] = ["file": file, "audio": audio, "seconds": total, "cpu": cpu, "language": result.language, "text": result.text]
            if trace { line["segments"] = result.segments.map { ["start": $0.start, "end": $0.end, "text": $0.text] as [String: Any] } }
            print(String(decoding: try JSONSerialization.data(withJSONObject: line, options: [.sortedKeys]), as: UTF8.self))
            continue
        }
        print(String(format: "%@: %.1f s audio, transcribed in %.2f s = %.1f× real time (log-mel %.3f s, one window's encoder %.2f s)",
                     file, audio, total, audio / total, melTime, encodeTime))
        if let speech {
            print(String(format: "  speech detection %.2f s: %d ranges, %.1f s", detectTime, speech.count, speech.reduce(0) { $0 + $1.duration }))
        }
        print("  [\(result.language)] \(result.text)")
    }
    if json {
        print(String(format: "{\"audio\": %.3f, \"seconds\": %.3f, \"cpu\": %.3f}", totalAudio, totalTime, totalCPU))
        exit(0)
    }
    print(String(format: "all: %.1f s audio in %.2f s = %.1f× real time", totalAudio, totalTime, totalAudio / totalTime))
} catch {
    FileHandle.standardError.write(Data("earmark-speech-bench: \(error)\n".utf8))
    exit(1)
}
