// The AVX-512F variant of the channels-last conv tiles (compiled with
// -mavx512f: CMakeLists.txt).
#define KAIWU_CONV_NS isa_avx512
#include "backends/cpu/conv_nhwc_tiles.inc"
