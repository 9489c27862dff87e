import ArgumentParser
import EarmarkKit
import Foundation

struct TrainClassifierCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "train-classifier",
        abstract: "Train a sound classifier of your own labels on top of the base model.",
        discussion: """
        FOLDER holds one sub-folder per label, named by the label, with audio files of that sound \
        (any format `earmark classify` reads):

          sounds/doorbell/*.wav   sounds/kettle/*.flac   sounds/quiet/*.ogg

        Every file is cut into the base model's windows (0.96 s, half overlapping); each window's \
        embedding (YAMNet: 1,024 values) is a training example. A linear softmax head is trained on \
        them and written, with the base network, as one model file that `earmark classify --model` \
        (and match/listen --classify --model) use like any other. When every label has two files or \
        more, one file per label is held out once to report a validation accuracy.

        --json: {output, labels: [{label, files, windows}], trainingAccuracy, validationAccuracy}.

        Exit codes: 0 written; 2 unreadable audio, too few labels or files, or the output exists \
        (use --force); 64 invalid usage.
        """
    )

    @Argument(help: ArgumentHelp("Folder with one sub-folder of audio files per label.", valueName: "folder"))
    var folder: String

    @Option(name: [.customShort("o"), .long], help: ArgumentHelp("Model file to write.", valueName: "path"))
    var output: String

    @Option(help: ArgumentHelp("Base model whose embeddings are used (default: see `earmark classify --help`).", valueName: "path"))
    var base: String?

    @Option(help: ArgumentHelp("Name stored in the model.", valueName: "name"))
    var name: String?

    @Option(parsing: .unconditional, help: ArgumentHelp("Training passes over the examples.", valueName: "n"))
    var epochs: Int = 300

    @Flag(help: "Replace an existing output file.")
    var force = false

    @Flag(help: "Print JSON on standard output instead of text.")
    var json = false

    func validate() throws {
        if epochs < 1 || epochs > 100_000 { throw ValidationError("--epochs must be between 1 and 100000.") }
    }

    mutating func run() async throws {
        do {
            try train()
        } catch let e as ExitCode {
            throw e
        } catch {
            writeStderr("earmark: \(describe(error))\n")
            throw ExitCode(2)
        }
    }

    private func train() throws {
        if FileManager.default.fileExists(atPath: output), !force {
            throw CLIError("\(output) exists; use --force to replace it")
        }
        var isDir: ObjCBool = false
        guard FileManager.default.fileExists(atPath: folder, isDirectory: &isDir), isDir.boolValue else {
            throw CLIError("\(folder) is not a folder")
        }
        let labelNames = try FileManager.default.contentsOfDirectory(atPath: folder).filter { name in
            var d: ObjCBool = false
            return !name.hasPrefix(".") && FileManager.default.fileExists(atPath: (folder as NSString).appendingPathComponent(name), isDirectory: &d) && d.boolValue
        }.sorted()
        guard labelNames.count >= 2 else {
            throw CLIError("\(folder) needs at least two label sub-folders (found \(labelNames.count))")
        }
        let model = try SoundModel.load(path: base)
        let classifier = SoundClassifier(model: model)
        var examples: [HeadTrainer.Example] = []
        var stats: [LabelStats] = []
        var fileIndex = 0
        for (label, labelName) in labelNames.enumerated() {
            let files = try expandAudioPaths([(folder as NSString).appendingPathComponent(labelName)])
            guard !files.isEmpty else { throw CLIError("\(labelName): no audio files in its folder") }
            var windows = 0
            for file in files {
                let bar = stderrIsTerminal && !json ? SecondsProgress(label: PathName.last(file)) : nil
                let found: [SoundWindow]
                do {
                    found = try classifier.classify(path: file) { bar?.update($0) }
                } catch {
                    bar?.finish()
                    throw CLIError(describe(error, file: file))
                }
                bar?.finish()
                for w in found { examples.append(HeadTrainer.Example(embedding: w.embedding, label: label, file: fileIndex)) }
                windows += found.count
                fileIndex += 1
            }
            stats.append(LabelStats(label: labelName, files: files.count, windows: windows))
        }
        let result = HeadTrainer.train(examples, labels: labelNames.count, epochs: epochs)
        let labels = labelNames.map { SoundLabel(mid: "custom:" + $0, name: $0) }
        let modelName = name ?? PathName.stem(output)
        let data = try model.withHead(labels: labels, weights: result.weights, bias: result.bias, name: modelName,
                                      description: "\(labelNames.count) labels (\(labelNames.joined(separator: ", "))) trained on \(examples.count) windows of \(fileIndex) files from \(folder)")
        // Written whole to a temporary file first, so a failure never leaves a half model.
        let temporary = output + ".tmp-\(getpid())"
        do {
            try data.write(to: URL(fileURLWithPath: temporary))
            _ = try SoundModel(path: temporary)
            if FileManager.default.fileExists(atPath: output) { try FileManager.default.removeItem(atPath: output) }
            try FileManager.default.moveItem(atPath: temporary, toPath: output)
        } catch {
            try? FileManager.default.removeItem(atPath: temporary)
            throw error
        }
        let report = TrainingReport(output: output, labels: stats, trainingAccuracy: result.trainingAccuracy,
                                    validationAccuracy: result.validationAccuracy)
        if json {
            try printJSON(report)
        } else {
            for s in stats { print("\(s.label): \(s.files) file\(s.files == 1 ? "" : "s"), \(s.windows) windows") }
            var line = String(format: "training accuracy %.1f %%", 100 * result.trainingAccuracy)
            if let v = result.validationAccuracy { line += String(format: ", held-out files %.1f %%", 100 * v) }
            print(line)
            print("wrote \(output) (\(String(format: "%.1f", Double(data.count) / 1_000_000)) MB)")
        }
    }
}

private struct LabelStats: Encodable {
    var label: String
    var files: Int
    var windows: Int
}

private struct TrainingReport: Encodable {
    var output: String
    var labels: [LabelStats]
    var trainingAccuracy: Double
    var validationAccuracy: Double?

    enum CodingKeys: String, CodingKey { case output, labels, trainingAccuracy, validationAccuracy }
    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(output, forKey: .output)
        try c.encode(labels, forKey: .labels)
        try c.encode(trainingAccuracy, forKey: .trainingAccuracy)
        try c.encode(validationAccuracy, forKey: .validationAccuracy)
    }
}
