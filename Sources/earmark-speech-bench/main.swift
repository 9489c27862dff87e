// earmark-speech-bench: speed of the Whisper recogniser on real recordings, stage by stage.
//   earmark-speech-bench [--model PATH] [--language CODE] [--words] [--detect SOUND-MODEL] FILE...
// Prints, per file, the seconds spent in the front end, the encoder and the decoder, the transcript, and
// × real time (audio seconds / processing seconds, model loading excluded; it is printed on its own).
// --words times every word; --detect finds the speech with the sound model first (its time is included).
import EarmarkKit
import Foundation

var modelPath = SpeechModel.defaultRelativePath
var language: String?
var files: [String] = []
var words = false
var soundModelPath: String?
var args = CommandLine.arguments.dropFirst().makeIterator()
while let a = args.next() {
    switch a {
    case "--model": modelPath = args.next() ?? modelPath
    case "--language": language = args.next()
    case "--words": words = true
    case "--detect": soundModelPath = args.next()
    case "-h", "--help":
        print("usage: earmark-speech-bench [--model PATH] [--language CODE] [--words] [--detect SOUND-MODEL] FILE...")
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
do {
    var start = clock.now
    let model = try SpeechModel(path: modelPath)
    let recognizer = WhisperRecognizer(model: model)
    let detector = try soundModelPath.map { SpeechDetector(soundModel: try SoundModel(path: $0)) }
    print(String(format: "model load %.2f s", seconds(clock.now - start)))
    var totalAudio = 0.0, totalTime = 0.0
    for file in files {
        let samples = try SpeechAudio.load(path: file, sampleRate: recognizer.sampleRate)
        let audio = Double(samples.count) / Double(recognizer.sampleRate)
        start = clock.now
        let mel = recognizer.frontEnd.spectrogram(samples)
        let melTime = seconds(clock.now - start)
        // One window encoded on its own, for the encoder's share.
        start = clock.now
        _ = recognizer.encode(window: mel.window(start: 0, length: model.frontEnd.chunkFrames))
        let encodeTime = seconds(clock.now - start)
        start = clock.now
        let speech = try detector?.ranges(samples: samples, sampleRate: recognizer.sampleRate)
        let detectTime = seconds(clock.now - start)
        let result = try recognizer.transcribe(samples: samples, options: TranscriptionOptions(language: language, wordTimestamps: words),
                                               speech: speech)
        let total = seconds(clock.now - start)
        totalAudio += audio
        totalTime += total
        print(String(format: "%@: %.1f s audio, transcribed in %.2f s = %.1f× real time (log-mel %.3f s, one window's encoder %.2f s)",
                     file, audio, total, audio / total, melTime, encodeTime))
        if let speech {
            print(String(format: "  speech detection %.2f s: %d ranges, %.1f s", detectTime, speech.count, speech.reduce(0) { $0 + $1.duration }))
        }
        print("  [\(result.language)] \(result.text)")
    }
    print(String(format: "all: %.1f s audio in %.2f s = %.1f× real time", totalAudio, totalTime, totalAudio / totalTime))
} catch {
    FileHandle.standardError.write(Data("earmark-speech-bench: \(error)\n".utf8))
    exit(1)
}
