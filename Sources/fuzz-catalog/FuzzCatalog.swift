import EarmarkFuzzing

/// libFuzzer's entry point: one input through the catalog reader (a catalog export).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzCatalog(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    FuzzTarget.catalog.run(UnsafeRawBufferPointer(start: data, count: size))
    return 0
}

/// Fuzzes with libFuzzer in a fuzz build (tools/fuzz.sh), replays the files it is given otherwise.
@main
enum FuzzCatalogMain {
    static func main() { FuzzTarget.catalog.main(fuzzCatalog) }
}
