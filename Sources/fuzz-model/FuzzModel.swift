import EarmarkFuzzing

/// libFuzzer's entry point: one input through the sound-model loader.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzModel(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    FuzzTarget.model.run(UnsafeRawBufferPointer(start: data, count: size))
    return 0
}

/// Fuzzes with libFuzzer in a fuzz build (tools/fuzz.sh), replays the files it is given otherwise.
@main
enum FuzzModelMain {
    static func main() { FuzzTarget.model.main(fuzzModel) }
}
