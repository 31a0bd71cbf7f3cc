// The AVX2 + FMA variant of the channels-last conv tiles (compiled with
// -mavx2 -mfma -mno-avx512f: CMakeLists.txt).
#define KAIWU_CONV_NS isa_avx2
#include "backends/cpu/conv_nhwc_tiles.inc"
