import ArgumentParser
import EarmarkKit
import Foundation

struct ClassifyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "classify",
        abstract: "Say what sounds a file holds (speech, music, instruments, noises …) over time.",
        discussion: """
        Runs a sound classifier (by default YAMNet: 521 AudioSet labels, fetched and converted once by \
        tools/fetch-model.sh) over windows of the audio and prints, for each stretch where the same label \
        leads, its time range and the leading labels with their confidences (0…1), then the dominant \
        labels and the time ranges with speech.

        Windows: --window seconds (at least the model's 0.96-s patch; a longer window averages its \
        patches) and --overlap, the fraction shared by neighbouring windows (0 ≤ overlap < 1).

        --json: {path, model, windowDuration, overlapFactor, duration, windows: [{start, duration, labels: \
        [{label, identifier, confidence}]}], summary: {dominant: [{label, identifier, share, meanConfidence}], \
        speech: [{start, end}], speechShare, duration}, error}; an array for several files.

        The model is --model PATH, else $EARMARK_MODEL, else models/yamnet.emodel beside the executable's \
        source tree or in the working directory, else ~/.local/share/earmark/models/yamnet.emodel.

        Exit codes: 0 every file classified; 2 a file or the model could not be read.
        """
    )

    @Flag(help: "Print JSON on standard output instead of text.")
    var json = false

    @Option(parsing: .unconditional, help: ArgumentHelp("Labels per window.", valueName: "k"))
    var top: Int = 3

    @Option(parsing: .unconditional, help: ArgumentHelp("Window length in seconds (default: the model's patch, 0.96 s for YAMNet).", valueName: "seconds"))
    var window: Double?

    @Option(parsing: .unconditional, help: ArgumentHelp("Fraction of a window shared with the next, 0 ≤ f < 1.", valueName: "f"))
    var overlap: Double = 0.5

    @Option(help: ArgumentHelp("Sound model file (.emodel).", valueName: "path"))
    var model: String?

    @Flag(help: "Print the model's labels (index, identifier, name) and exit.")
    var labels = false

    @Argument(help: ArgumentHelp("Audio files to classify.", valueName: "file"))
    var files: [String] = []

    func validate() throws {
        if !labels, files.isEmpty { throw ValidationError("Give at least one audio file (or --labels).") }
        if top < 1 { throw ValidationError("--top must be at least 1.") }
        if let w = window, !(w.isFinite && w > 0 && w <= 3600) { throw ValidationError("--window must be between 0.96 and 3600 seconds.") }
        if !(overlap.isFinite && overlap >= 0 && overlap < 1) { throw ValidationError("--overlap must be at least 0 and below 1.") }
    }

    mutating func run() async throws {
        let soundModel = try loadSoundModel(model)
        if labels {
            if json {
                try printJSON(soundModel.labels.enumerated().map { LabelEntry(index: $0.offset, identifier: $0.element.mid, label: $0.element.name) })
            } else {
                for (i, l) in soundModel.labels.enumerated() { print("\(i)\t\(l.mid)\t\(l.name)") }
            }
            return
        }
        let options = ClassificationOptions(windowDuration: window ?? soundModel.frontEnd.patchDuration, overlapFactor: overlap, topK: top)
        do {
            try options.validate(for: soundModel)
        } catch {
            writeStderr("earmark: \(error)\n")
            throw ExitCode(64)
        }
        let classifier = SoundClassifier(model: soundModel)
        let speech = SpeechActivity(model: soundModel)
        var reports: [ClassificationReport] = []
        var failed = 0
        for file in files {
            let bar = stderrIsTerminal ? SecondsProgress(label: PathName.last(file)) : nil
            do {
                let windows = try classifier.classify(path: file, options: options) { bar?.update($0) }
                bar?.finish()
                let duration = windows.last.map { $0.start + $0.duration } ?? 0
                let report = ClassificationReport(path: file, model: soundModel.name, windowDuration: options.windowDuration,
                                                  overlapFactor: options.overlapFactor, duration: duration, windows: windows,
                                                  summary: SoundSummary(windows: windows, duration: duration, speechDetector: speech),
                                                  error: nil)
                if !json { print(report.humanText) }
                reports.append(report)
            } catch {
                bar?.finish()
                let message = describe(error, file: file)
                writeStderr(message + "\n")
                reports.append(ClassificationReport(path: file, model: soundModel.name, windowDuration: options.windowDuration,
                                                    overlapFactor: options.overlapFactor, duration: 0, windows: [], summary: nil, error: message))
                failed += 1
            }
        }
        if json { if files.count == 1 { try printJSON(reports[0]) } else { try printJSON(reports) } }
        if failed > 0 { throw ExitCode(2) }
    }
}

private struct LabelEntry: Encodable {
    var index: Int
    var identifier: String
    var label: String
}

/// A live "decoded m:ss" line on standard error for a long file.
final class SecondsProgress {
    let label: String
    private var last = 0.0
    init(label: String) { self.label = label }
    func update(_ seconds: Double) {
        let now = monotonicSeconds()
        guard now - last >= 0.2 else { return }
        last = now
        writeStderr("\r\(label): \(formatDuration(seconds)) classified\u{1B}[K")
    }
    func finish() { writeStderr("\r\u{1B}[K") }
}

struct ClassificationReport: Encodable {
    var path: String
    var model: String
    var windowDuration: Double
    var overlapFactor: Double
    var duration: Double
    var windows: [SoundWindow]
    var summary: SoundSummary?
    var error: String?

    enum CodingKeys: String, CodingKey { case path, model, windowDuration, overlapFactor, duration, windows, summary, error }
    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(path, forKey: .path)
        try c.encode(model, forKey: .model)
        try c.encode(windowDuration, forKey: .windowDuration)
        try c.encode(overlapFactor, forKey: .overlapFactor)
        try c.encode(duration, forKey: .duration)
        try c.encode(windows, forKey: .windows)
        try c.encode(summary, forKey: .summary)
        try c.encode(error, forKey: .error)
    }

    /// Runs of windows with the same leading label, one line each, then the summary.
    var humanText: String {
        guard error == nil else { return "\(path): \(error!)" }
        var lines = ["\(path): \(formatDuration(duration)), \(windows.count) windows of \(String(format: "%.2f", windowDuration)) s"]
        var i = 0
        while i < windows.count {
            guard let lead = windows[i].labels.first else { i += 1; continue }
            var j = i
            var sums: [String: (sum: Double, name: String)] = [:]
            while j < windows.count, windows[j].labels.first?.identifier == lead.identifier {
                for l in windows[j].labels { sums[l.identifier, default: (0, l.label)].sum += l.confidence }
                j += 1
            }
            let n = Double(j - i)
            let ranked = sums.sorted { $0.value.sum > $1.value.sum || ($0.value.sum == $1.value.sum && $0.key < $1.key) }
            let text = ranked.prefix(windows[i].labels.count).map { "\($0.value.name) \(String(format: "%.2f", $0.value.sum / n))" }
            let end = windows[j - 1].start + windows[j - 1].duration
            lines.append("  \(clock(windows[i].start)) – \(clock(end))  \(text.joined(separator: ", "))")
            i = j
        }
        if let s = summary {
            let dominant = s.dominant.map { "\($0.label) \(Int(($0.share * 100).rounded())) %" }.joined(separator: ", ")
            lines.append("  leading: \(dominant.isEmpty ? "—" : dominant)")
            let speech = s.speech.isEmpty ? "none" : s.speech.map { "\(clock($0.start))–\(clock($0.end))" }.joined(separator: ", ")
            lines.append("  speech: \(speech)")
        }
        return lines.joined(separator: "\n")
    }

    private func clock(_ t: Double) -> String {
        let m = Int(t) / 60
        return String(format: "%d:%04.1f", m, t - Double(m * 60))
    }
}
