import EarmarkFuzzing

/// libFuzzer's entry point: one input through the signature-file reader.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzSignature(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    FuzzTarget.signature.run(UnsafeRawBufferPointer(start: data, count: size))
    return 0
}

/// Fuzzes with libFuzzer in a fuzz build (tools/fuzz.sh), replays the files it is given otherwise.
@main
enum FuzzSignatureMain {
    static func main() { FuzzTarget.signature.main(fuzzSignature) }
}
