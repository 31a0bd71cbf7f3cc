// The AVX2 + FMA variant of the prepacked-B GEMM (compiled with -mavx2 -mfma
// -mno-avx512f: CMakeLists.txt).
#define KAIWU_PACKED_NS isa_avx2
#include "backends/cpu/sgemm_packed_tiles.inc"
