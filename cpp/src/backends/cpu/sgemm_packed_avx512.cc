// The AVX-512F variant of the prepacked-B GEMM (compiled with -mavx512f:
// CMakeLists.txt).
#define KAIWU_PACKED_NS isa_avx512
#include "backends/cpu/sgemm_packed_tiles.inc"
