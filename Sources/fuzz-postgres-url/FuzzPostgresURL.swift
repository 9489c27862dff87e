import EarmarkFuzzing

/// libFuzzer's entry point: one input through the PostgreSQL URL parser.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzPostgresURL(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    FuzzTarget.postgresURL.run(UnsafeRawBufferPointer(start: data, count: size))
    return 0
}

/// Fuzzes with libFuzzer in a fuzz build (tools/fuzz.sh), replays the files it is given otherwise.
@main
enum FuzzPostgresURLMain {
    static func main() { FuzzTarget.postgresURL.main(fuzzPostgresURL) }
}
