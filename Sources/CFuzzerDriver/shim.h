// libFuzzer's driver, called by the fuzz targets' own main in fuzz builds (-sanitize=fuzzer links
// compiler-rt's libFuzzer, which defines it). Only declared here: nothing links it in a plain build.
#include <stddef.h>
#include <stdint.h>
int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const uint8_t *data, size_t size));
