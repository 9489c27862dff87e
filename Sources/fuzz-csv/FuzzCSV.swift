import EarmarkFuzzing

/// libFuzzer's entry point: one input through the metadata CSV reader.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzCSV(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    FuzzTarget.csv.run(UnsafeRawBufferPointer(start: data, count: size))
    return 0
}

/// Fuzzes with libFuzzer in a fuzz build (tools/fuzz.sh), replays the files it is given otherwise.
@main
enum FuzzCSVMain {
    static func main() { FuzzTarget.csv.main(fuzzCSV) }
}
