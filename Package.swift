// swift-tools-version: 6.1
import PackageDescription

// Pipeline: C shims ← EarmarkAudio (+ EarmarkCapture: microphones), EarmarkDSP ← EarmarkSignature ← EarmarkCatalog ← EarmarkMatching
// ← EarmarkStreaming (live sessions); EarmarkAnalysis (music metadata), EarmarkClassification (sound classes), EarmarkSpeech
// (speech to text) ← EarmarkKit
// ← EarmarkServer (HTTP API) ← earmark (CLI). Every C library comes from Debian through a system-library target.
// The stages that crunch numbers are optimised in debug builds too: unoptimised, their loops spent most of the test suite's
// time in generic metadata lookups and retains (a profile of `swift test`: about 70 % of its CPU time in
// libswiftCore and in our own -Onone code).
let optimizedInDebug: [SwiftSetting] = [.unsafeFlags(["-O"], .when(configuration: .debug))]

let package = Package(
    name: "Earmark",
    platforms: [.macOS(.v14)],
    products: [
        .library(name: "EarmarkKit", targets: ["EarmarkKit"]),
        .executable(name: "earmark", targets: ["earmark"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        // The HTTP server of `earmark serve`; without swift-configuration (its ConfigurationSupport trait).
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1", traits: ["FullFoundation"]),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-extras", from: "1.35.2"),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.8.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        // `GET /v1/listen` (WebSocket) of `earmark serve`, and the WebSocket client its tests use.
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket", from: "2.8.1"),
        // `GET /metrics` of `earmark serve` (Prometheus text format).
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        // The PostgreSQL catalog store (EarmarkCatalogPostgres).
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
    ],
    targets: [
        .systemLibrary(name: "CFFTW3", pkgConfig: "fftw3f", providers: [.apt(["libfftw3-dev"])]),
        .systemLibrary(name: "CSndFile", pkgConfig: "sndfile", providers: [.apt(["libsndfile1-dev"])]),
        .systemLibrary(name: "CSQLite3", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(name: "CSoxr", pkgConfig: "soxr", providers: [.apt(["libsoxr-dev"])]),
        .systemLibrary(name: "CMPG123", pkgConfig: "libmpg123", providers: [.apt(["libmpg123-dev"])]),
        // libopus's pkg-config adds -I/usr/include/opus; libogg's header is in /usr/include.
        .systemLibrary(name: "COpus", pkgConfig: "opus", providers: [.apt(["libopus-dev", "libogg-dev"])]),
        // No pkgConfig: libpulse-simple's .pc adds -pthread, which SwiftPM rejects with a warning;
        // the headers are in /usr/include and the modulemap names the libraries.
        .systemLibrary(name: "CPulseSimple", providers: [.apt(["libpulse-dev"])]),
        .systemLibrary(name: "CEBUR128", pkgConfig: "libebur128", providers: [.apt(["libebur128-dev"])]),
        .systemLibrary(name: "COpenBLAS", pkgConfig: "openblas", providers: [.apt(["libopenblas-dev"])]),
        // Whisper's repetition guard measures text with zlib (Foundation has no zlib API on Linux).
        .systemLibrary(name: "CZlib", pkgConfig: "zlib", providers: [.apt(["zlib1g-dev"])]),

        .target(name: "EarmarkAudio", dependencies: ["CSndFile", "CSoxr", "COpus", "CMPG123"], swiftSettings: optimizedInDebug),
        .target(name: "EarmarkCapture", dependencies: ["CPulseSimple", "EarmarkAudio"]),
        .target(name: "EarmarkDSP", dependencies: ["CFFTW3"], swiftSettings: optimizedInDebug),
        .target(name: "EarmarkSignature", dependencies: ["EarmarkDSP"], swiftSettings: optimizedInDebug),
        .systemLibrary(name: "CPrefetch"),
        .target(name: "EarmarkCatalog", dependencies: ["CSQLite3", "CPrefetch", "EarmarkSignature"], swiftSettings: optimizedInDebug),
        // The catalog on a PostgreSQL server (issue 19), the same CatalogStore as the SQLite file.
        .target(name: "EarmarkCatalogPostgres", dependencies: [
            "EarmarkCatalog", .product(name: "PostgresNIO", package: "postgres-nio"),
        ]),
        .target(name: "EarmarkMatching", dependencies: ["EarmarkSignature", "EarmarkCatalog"], swiftSettings: optimizedInDebug),
        // Synthetic tracks grown from real signatures, for benchmarks of catalogs larger than the music at hand.
        .target(name: "EarmarkSynthetic", dependencies: ["EarmarkDSP", "EarmarkSignature"], swiftSettings: optimizedInDebug),
        .target(name: "EarmarkStreaming", dependencies: ["EarmarkAudio", "EarmarkMatching"], swiftSettings: optimizedInDebug),
        .target(name: "EarmarkAnalysis", dependencies: ["EarmarkAudio", "EarmarkDSP"], swiftSettings: optimizedInDebug),
        // The instrument head (tools/train-instrument-head.sh) ships as a resource; InstrumentHead finds the bundle itself.
        .target(name: "EarmarkClassification", dependencies: ["COpenBLAS", "EarmarkAudio", "EarmarkDSP"],
                resources: [.copy("Resources/instrument-head.json")], swiftSettings: optimizedInDebug),
        // Matrix products with float16 weights for few rows (Whisper's decoder steps) and the attention's softmax,
        // AVX2/FMA/F16C chosen at run time, portable C otherwise.
        // Optimised in debug builds too: at -O0 the intrinsics run about 30 times slower, which made the speech tests crawl.
        .target(name: "CHalfGEMM", cSettings: [.unsafeFlags(["-O2"], .when(configuration: .debug))]),
        // Speech to text: Whisper base, the encoder in Float32 on OpenBLAS, the decoder on float16 weights (CHalfGEMM)
        // (model made by tools/fetch-speech-model.sh).
        .target(name: "EarmarkSpeech", dependencies: ["CHalfGEMM", "COpenBLAS", "CZlib", "EarmarkAudio", "EarmarkDSP", "EarmarkClassification"],
                swiftSettings: optimizedInDebug),
        .target(name: "EarmarkKit", dependencies: [
            "EarmarkAudio", "EarmarkSignature", "EarmarkCatalog", "EarmarkCatalogPostgres", "EarmarkMatching", "EarmarkStreaming", "EarmarkAnalysis",
            "EarmarkClassification", "EarmarkSpeech",
        ]),
        // `earmark serve`: the HTTP API over one warm catalog (Hummingbird 2).
        .target(name: "EarmarkServer", dependencies: [
            "EarmarkKit", .product(name: "Hummingbird", package: "hummingbird"), .product(name: "HummingbirdCore", package: "hummingbird"),
            .product(name: "NIOPosix", package: "swift-nio"),
            .product(name: "NIOHTTPTypes", package: "swift-nio-extras"), .product(name: "HTTPTypes", package: "swift-http-types"),
            .product(name: "Logging", package: "swift-log"), .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
            .product(name: "NIOHTTP1", package: "swift-nio"), .product(name: "NIOWebSocket", package: "swift-nio"),
            .product(name: "Prometheus", package: "swift-prometheus"),
        ], resources: [.copy("Page")]),   // the page at `/`: plain HTML, JS and CSS, no build step
        .executableTarget(name: "earmark", dependencies: [
            "EarmarkKit", "EarmarkCatalogPostgres", "EarmarkCapture", "EarmarkServer", .product(name: "ArgumentParser", package: "swift-argument-parser"),
        ]),
        .executableTarget(name: "earmark-bench", dependencies: ["EarmarkKit"]),
        .executableTarget(name: "earmark-listen-bench", dependencies: ["EarmarkKit", "EarmarkDSP"]),
        .executableTarget(name: "earmark-classify-bench", dependencies: ["EarmarkKit"]),
        .executableTarget(name: "earmark-music-bench", dependencies: ["EarmarkKit", "EarmarkDSP"]),
        .executableTarget(name: "earmark-speech-bench", dependencies: ["EarmarkSpeech", "EarmarkClassification"]),
        // Matching against catalogs of 100 h to 10,000 h grown with EarmarkSynthetic (tools/scale-bench.sh).
        .executableTarget(name: "earmark-scale-bench", dependencies: ["EarmarkKit", "EarmarkCatalogPostgres", "EarmarkSynthetic"]),
        .target(name: "EarmarkTestSupport", dependencies: ["EarmarkKit", "EarmarkDSP"], path: "Tests/EarmarkTestSupport"),

        .testTarget(name: "EarmarkAudioTests", dependencies: ["EarmarkAudio", "EarmarkTestSupport"]),
        .testTarget(name: "EarmarkDSPTests", dependencies: ["EarmarkDSP"]),
        .testTarget(name: "EarmarkSignatureTests", dependencies: ["EarmarkSignature", "EarmarkTestSupport"]),
        .testTarget(name: "EarmarkCatalogTests", dependencies: ["EarmarkCatalog", "EarmarkTestSupport"]),
        // Runs throwaway PostgreSQL 15 servers (initdb in temporary folders; tools/setup.sh installs postgresql-15).
        .testTarget(name: "EarmarkCatalogPostgresTests", dependencies: [
            "EarmarkCatalogPostgres", "EarmarkCatalog", "EarmarkMatching", "EarmarkTestSupport",
        ]),
        .testTarget(name: "EarmarkMatchingTests", dependencies: ["EarmarkMatching", "EarmarkTestSupport"]),
        .testTarget(name: "EarmarkSyntheticTests", dependencies: ["EarmarkSynthetic", "EarmarkTestSupport"]),
        .testTarget(name: "EarmarkAnalysisTests", dependencies: ["CEBUR128", "EarmarkAnalysis", "EarmarkTestSupport"]),
        .testTarget(name: "EarmarkSpeechTests", dependencies: ["CHalfGEMM", "EarmarkSpeech", "EarmarkTestSupport"]),
        .testTarget(name: "EarmarkClassificationTests", dependencies: ["EarmarkClassification", "EarmarkTestSupport"]),
        .testTarget(name: "EarmarkStreamingTests", dependencies: ["EarmarkStreaming", "EarmarkTestSupport"]),
        .testTarget(name: "EarmarkKitTests", dependencies: ["EarmarkKit", "EarmarkTestSupport"]),
        .testTarget(name: "EarmarkServerTests", dependencies: [
            "EarmarkServer", "EarmarkKit", "EarmarkTestSupport", .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
        ]),
        .testTarget(name: "EarmarkCLITests", dependencies: ["EarmarkAnalysis", "EarmarkKit", "EarmarkTestSupport"]),

        // Fuzzing (tools/fuzz.sh): one libFuzzer target per parser of outside bytes, all calling EarmarkFuzzing's
        // entry points; built without -DFUZZING, each replays the files it is given, as the replay tests do.
        .systemLibrary(name: "CFuzzerDriver"),
        // Only the parsers' own targets: a fuzz build (sanitizers, release) then compiles no server or PostgreSQL client.
        .target(name: "EarmarkFuzzing", dependencies: [
            "CFuzzerDriver", "CSQLite3", "EarmarkAudio", "EarmarkCatalog", "EarmarkClassification", "EarmarkSignature", "EarmarkSpeech",
        ]),
        .executableTarget(name: "fuzz-signature", dependencies: ["EarmarkFuzzing"]),
        .executableTarget(name: "fuzz-model", dependencies: ["EarmarkFuzzing"]),
        .executableTarget(name: "fuzz-catalog", dependencies: ["EarmarkFuzzing"]),
        .executableTarget(name: "fuzz-wav", dependencies: ["EarmarkFuzzing"]),
        .executableTarget(name: "fuzz-csv", dependencies: ["EarmarkFuzzing"]),
        .executableTarget(name: "fuzz-speech-model", dependencies: ["EarmarkFuzzing"]),
        .executableTarget(name: "fuzz-postgres-url", dependencies: ["EarmarkFuzzing"]),
        .testTarget(name: "EarmarkFuzzingTests", dependencies: ["EarmarkFuzzing", "EarmarkKit", "EarmarkTestSupport"]),
    ],
    swiftLanguageModes: [.v6]
)
