import EarmarkFuzzing

/// libFuzzer's entry point: one input through the WAV stream reader.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzWAV(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    FuzzTarget.wav.run(UnsafeRawBufferPointer(start: data, count: size))
    return 0
}

/// Fuzzes with libFuzzer in a fuzz build (tools/fuzz.sh), replays the files it is given otherwise.
@main
enum FuzzWAVMain {
    static func main() { FuzzTarget.wav.main(fuzzWAV) }
}
