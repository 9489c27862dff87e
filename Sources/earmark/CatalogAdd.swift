import ArgumentParser
import EarmarkKit
import Foundation

struct CatalogAddCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "add",
        abstract: "Fingerprint audio files and add them to the catalog.",
        discussion: """
        Folders are searched recursively for audio files (\(audioFileExtensions.sorted().joined(separator: ", "))). \
        The catalog is created when missing. Each file is stored in its own transaction, so an \
        interrupted run keeps everything added so far.

        Files already in the catalog with the same path, size and modification time are reported \
        as `unchanged` and not decoded again (their descriptions are not changed either; use \
        `earmark catalog update`). A file whose decoded audio is identical to a stored track is \
        skipped and reported as `same audio as #ID`; when that track's file no longer exists, the \
        file was moved or renamed, and the track is relinked to it (`moved`), so later adds find \
        it unchanged without decoding it.

        Without a title (from --title or --metadata) a track is titled after its file name.

        Metadata CSV (--metadata): UTF-8, RFC 4180 (fields with commas, quotes or line breaks in \
        double quotes; a quote inside them doubled). The header row must have a `path` or `file` \
        column; a row applies to a file when that value equals the path as given on the command \
        line, its absolute path (relative values may be relative to the current folder or to the \
        CSV's folder), or its file name. Columns `title`, `artist` and `album` set those fields; \
        every other non-empty column is stored as a metadata string. Example:

          path,title,artist,album,isrc
          song1.flac,"Hello, World",The Band,First,GBXXX0000001

        With --analyze, each file's loudness (EBU R 128: integrated, range, peaks, short-term once a \
        second) and its sound classification (leading labels and their share of the time, speech \
        ranges, a timeline of leading labels; needs the model of tools/fetch-model.sh, else it is \
        skipped with a warning) are computed in the same decoding pass and stored with the track \
        (`catalog info` shows them). A file with speech also gets its transcript (kind `speech`: \
        language, segments and their words with times; Whisper base of tools/fetch-speech-model.sh reads \
        only where the classifier hears speech; skipped with a warning when that model is missing, and \
        with --no-transcribe). It is off by default because it makes indexing far slower.

        With --json the result is one object: {"results": [{"path", "status" (added, duplicate, \
        moved, unchanged, failed), "track", "error"}], "added", "duplicate", "moved", "unchanged", "failed"}.

        Exit codes: 0 every file was added, skipped or unchanged; 2 some file failed, or a catalog \
        error occurred (locked, read-only, damaged).
        """
    )

    @OptionGroup var options: GlobalOptions

    @Argument(help: ArgumentHelp("Audio files and folders to add.", valueName: "file-or-folder"))
    var paths: [String]

    @Option(help: ArgumentHelp("Track title (only when adding a single file).", valueName: "title"))
    var title: String?

    @Option(help: ArgumentHelp("Track artist (only when adding a single file).", valueName: "artist"))
    var artist: String?

    @Option(help: ArgumentHelp("Album (only when adding a single file).", valueName: "album"))
    var album: String?

    @Option(help: ArgumentHelp("CSV file with per-file titles, artists, albums and other metadata (see below).",
                               valueName: "csv"))
    var metadata: String?

    @Flag(help: "Also measure loudness and classify the sound in the same decoding pass and store both (indexing is far slower).")
    var analyze = false

    @Option(help: ArgumentHelp("Sound model for --analyze (default: see `earmark classify --help`).", valueName: "path"))
    var model: String?

    @Option(name: .customLong("speech-model"), help: ArgumentHelp(
        "Speech model for --analyze's transcript (default: see `earmark transcribe --help`).", valueName: "path"))
    var speechModelPath: String?

    @Flag(name: .customLong("no-transcribe"), help: "With --analyze, store no transcript (transcribing is the slowest part of it).")
    var noTranscribe = false

    @Option(name: [.customShort("j"), .long], parsing: .unconditional, help: ArgumentHelp(
        "Files decoded in parallel. Default: the number of processor cores.", valueName: "n"))
    var jobs: Int?

    @Option(help: ArgumentHelp("""
        Landmark keys of a new catalog: pairs (the default) or triplets (experimental: far faster \
        matching beyond about 1,000 hours of audio, a few more short noisy clips missed; see \
        docs/matching.md). A catalog keeps the keys it was created with.
        """, valueName: "keys"))
    var landmarks: LandmarkKeys?

    func validate() throws {
        if let jobs, jobs < 1 { throw ValidationError("--jobs must be at least 1.") }
        if title != nil || artist != nil || album != nil {
            var isFolder: ObjCBool = false
            if paths.count != 1 || (FileManager.default.fileExists(atPath: paths[0], isDirectory: &isFolder) && isFolder.boolValue) {
                throw ValidationError("--title, --artist and --album need exactly one audio file; use --metadata for several.")
            }
        }
    }

    private enum Item {
        case file(Int)
        case failed(path: String, error: String)
    }

    mutating func run() async throws {
        let options = options
        let (title, artist, album, metadataPath, jobs) = (title, artist, album, metadata, jobs)
        let paths = paths
        try await reportingErrors {
            // Expand each argument on its own so one missing path fails only itself.
            var files: [String] = []
            var items: [Item] = []
            for arg in paths {
                do {
                    let found = try expandAudioPaths([arg])
                    if found.isEmpty { warn("\(arg): no audio files found") }
                    for f in found {
                        items.append(.file(files.count))
                        files.append(f)
                    }
                } catch {
                    items.append(.failed(path: arg, error: describe(error, file: arg)))
                }
            }
            let hasFieldOptions = title != nil || artist != nil || album != nil
            if items.isEmpty { throw CLIError("no audio files to add") }

            // Descriptions, resolved up front.
            var descriptions: [String: TrackDescription] = [:]
            if let metadataPath {
                let table = try MetadataTable(path: metadataPath)
                var used = Set<Int>()
                for f in files {
                    if let i = table.entryIndex(for: f) {
                        descriptions[f] = table.entries[i].description
                        used.insert(i)
                    }
                }
                let unused = table.entries.indices.filter { !used.contains($0) }
                if !unused.isEmpty {
                    let sample = unused.prefix(3).map { table.entries[$0].key }.joined(separator: ", ")
                    warn("\(metadataPath): \(unused.count) row(s) match no file being added (\(sample)\(unused.count > 3 ? ", …" : ""))")
                }
            }
            if hasFieldOptions, let f = files.first {
                var d = descriptions[f] ?? TrackDescription()
                if let title { d.title = title }
                if let artist { d.artist = artist }
                if let album { d.album = album }
                descriptions[f] = d
            }
            let frozen = descriptions

            var soundModel: SoundModel?
            var speechModel: SpeechModel?
            if analyze {
                do {
                    soundModel = try SoundModel.load(path: model)
                } catch let e as SoundModelError where e.code == .notFound && model == nil {
                    warn("sound classification skipped: \(e.message)")
                }
                if soundModel != nil, !noTranscribe {
                    do {
                        speechModel = try SpeechModel.load(path: speechModelPath)
                    } catch let e as SpeechModelError where e.code == .notFound && speechModelPath == nil {
                        warn("transcription skipped: \(e.message)")
                    }
                }
            }
            if let landmarks {
                let wanted: SignatureConfiguration = landmarks == .triplets ? .experimentalTriplets : .current
                let existing: SignatureConfiguration?
                do {
                    existing = try options.openReadOnly().configuration
                } catch let e as CatalogError where e.code == .notFound {
                    existing = nil
                }
                if let existing {
                    guard existing.landmarkShape == wanted.landmarkShape else {
                        throw CLIError("\(CatalogStores.shown(options.catalogPath)) was created with \(existing.landmarkShape.rawValue) keys; --landmarks chooses the keys of a new catalog only")
                    }
                } else {
                    _ = try CatalogStores.open(options.catalogPath, access: .create, busyTimeout: options.lockTimeout, configuration: wanted)
                }
            }
            let ingestor = Ingestor(catalogPath: options.catalogPath,
                                    workers: jobs ?? ProcessInfo.processInfo.activeProcessorCount,
                                    busyTimeout: options.lockTimeout, analyze: analyze, soundModel: soundModel,
                                    speechModel: speechModel)
            let bar = ProgressBar(enabled: !options.json && stderrIsTerminal)
            let human = !options.json
            // Human output: each file's line as soon as it is stored, paths that could not be read first.
            if human {
                for case .failed(let path, let error) in items {
                    bar.printLine(AddResultJSON(path: path, status: IngestOutcome.Status.failed.rawValue, track: nil,
                                                error: error, audioSeconds: 0).humanLine)
                }
            }
            let start = ContinuousClock.now
            let outcomes: [IngestOutcome]
            do {
                outcomes = try await ingestor.add(files: files, describe: { frozen[$0] ?? TrackDescription() },
                                                  progress: { p in
                    if human {
                        let o = p.outcome
                        bar.printLine(AddResultJSON(path: o.path, status: o.status.rawValue, track: o.track,
                                                    error: o.error.map { prefixed($0, with: o.path) },
                                                    audioSeconds: o.audioSeconds).humanLine)
                    }
                    bar.update(p)
                })
            } catch {
                bar.finish()
                throw error
            }
            bar.finish()
            let elapsed = ContinuousClock.now - start

            let results: [AddResultJSON] = items.map { item in
                switch item {
                case .file(let i):
                    let o = outcomes[i]
                    return AddResultJSON(path: o.path, status: o.status.rawValue, track: o.track,
                                         error: o.error.map { prefixed($0, with: o.path) }, audioSeconds: o.audioSeconds)
                case .failed(let path, let error):
                    return AddResultJSON(path: path, status: IngestOutcome.Status.failed.rawValue, track: nil,
                                         error: error, audioSeconds: 0)
                }
            }
            func count(_ s: IngestOutcome.Status) -> Int { results.filter { $0.status == s.rawValue }.count }
            let report = AddReport(results: results, added: count(.added), duplicate: count(.duplicate),
                                   moved: count(.moved), unchanged: count(.unchanged), failed: count(.failed))

            if options.json {
                try printJSON(report)
            } else {
                let audio = results.reduce(0) { $0 + $1.audioSeconds }
                let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) * 1e-18
                var summary = "\(report.added) added, \(report.duplicate) skipped (same audio), "
                    + (report.moved > 0 ? "\(report.moved) moved, " : "")
                    + "\(report.unchanged) unchanged, \(report.failed) failed"
                if audio > 0 {
                    summary += String(format: " — %.2f h of audio in %.1f s", audio / 3600, seconds)
                    if seconds > 0 { summary += String(format: " (%.0f× real-time)", audio / seconds) }
                }
                print(summary)
                // Every segment costs each looked-up key two more cache misses (docs/catalog.md).
                if report.added > 0, let layout = try? options.openReadOnly().indexLayout(), layout.segments >= 4 {
                    writeStderr("earmark: note: the hash index is in \(layout.segments) segments; after a bulk add, "
                                + "`earmark catalog migrate --compact` merges them into one, which queries read faster\n")
                }
            }
            if report.failed > 0 { throw ExitCode(2) }
        }
    }
}

/// One file of `catalog add --json`.
struct AddResultJSON: Encodable {
    var path: String
    var status: String
    var track: Track?
    var error: String?
    var audioSeconds: Double

    enum CodingKeys: String, CodingKey { case path, status, track, error }

    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(path, forKey: .path)
        try c.encode(status, forKey: .status)
        try c.encode(track, forKey: .track)   // null when absent
        try c.encode(error, forKey: .error)
    }

    var humanLine: String {
        switch status {
        case "added":
            guard let t = track else { return "added      \(path)" }
            return "added      \(pad("#\(t.id)", 5)) \(trackLabel(t)) (\(formatDuration(t.duration)))"
        case "duplicate":
            guard let t = track else { return "skipped    \(path): same audio as a stored track" }
            return "skipped    \(path): same audio as #\(t.id) \(trackLabel(t))"
        case "moved":
            guard let t = track else { return "moved      \(path)" }
            return "moved      \(pad("#\(t.id)", 5)) \(trackLabel(t)): its file is now \(path)"
        case "unchanged":
            guard let t = track else { return "unchanged  \(path)" }
            return "unchanged  \(pad("#\(t.id)", 5)) \(trackLabel(t)) (\(formatDuration(t.duration)))"
        default:
            return "FAILED     \(error ?? path)"
        }
    }
}

/// The whole of `catalog add --json`.
struct AddReport: Encodable {
    var results: [AddResultJSON]
    var added: Int
    var duplicate: Int
    var moved: Int
    var unchanged: Int
    var failed: Int
}

/// `catalog add --landmarks`: the landmark design of a new catalog.
enum LandmarkKeys: String, ExpressibleByArgument, CaseIterable {
    case pairs, triplets
}
