import EarmarkFuzzing

/// libFuzzer's entry point: one input through the speech-model loader.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzSpeechModel(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    FuzzTarget.speechModel.run(UnsafeRawBufferPointer(start: data, count: size))
    return 0
}

/// Fuzzes with libFuzzer in a fuzz build (tools/fuzz.sh), replays the files it is given otherwise.
@main
enum FuzzSpeechModelMain {
    static func main() { FuzzTarget.speechModel.main(fuzzSpeechModel) }
}
