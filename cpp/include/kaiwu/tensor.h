// Element types, shapes, and the two tensor forms the engine passes around:
// TensorView (borrowed memory) and Tensor (owned, 64-byte aligned memory).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kaiwu {

/// Element types the engine stores. Values follow no external numbering;
/// conversions to and from ONNX codes live in the importer.
enum class DType : uint8_t {
  kUndefined = 0,
  kFloat32,
  kFloat64,
  kFloat16,
  kInt8,
  kUInt8,
  kInt16,
  kInt32,
  kInt64,
  kBool,
  kBFloat16,  ///< bfloat16: the engine's half precision on devices (precision="bf16")
};

size_t DTypeSize(DType t);
const char* DTypeName(DType t);
/// float16 or bfloat16.
constexpr bool IsHalf(DType t) { return t == DType::kFloat16 || t == DType::kBFloat16; }
inline bool IsFloat(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kFloat16 ||
         t == DType::kBFloat16;
}

template <typename T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::kFloat32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::kFloat64; };
template <> struct DTypeOf<int8_t> { static constexpr DType value = DType::kInt8; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::kUInt8; };
template <> struct DTypeOf<int16_t> { static constexpr DType value = DType::kInt16; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::kInt32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::kInt64; };
template <> struct DTypeOf<bool> { static constexpr DType value = DType::kBool; };

using Shape = std::vector<int64_t>;

int64_t NumElements(const Shape& shape);
std::string ShapeToString(const Shape& shape);
/// Row-major strides in elements.
std::vector<int64_t> Strides(const Shape& shape);

/// Where a TensorView's memory lives: host memory (pageable or page-locked),
/// or the memory of the session's device (a CUDA device pointer).
enum class MemoryKind : uint8_t { kHost = 0, kDevice };

/// Memory the engine does not own: a feed from the caller, or a slot in an arena.
struct TensorView {
  DType dtype = DType::kUndefined;
  Shape shape;
  void* data = nullptr;
  MemoryKind memory = MemoryKind::kHost;

  int64_t size() const { return NumElements(shape); }
  size_t bytes() const { return static_cast<size_t>(size()) * DTypeSize(dtype); }
  template <typename T> T* As() const { return static_cast<T*>(data); }
};

/// Memory the engine owns (weights, folded constants), aligned for SIMD.
class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, Shape shape);  // uninitialised storage
  /// Over storage allocated elsewhere (page-locked memory, a pool), at least
  /// bytes() long and 64-byte aligned; the tensor keeps it alive.
  Tensor(DType dtype, Shape shape, std::shared_ptr<void> storage)
      : dtype_(dtype), shape_(std::move(shape)), data_(std::move(storage)) {}

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t size() const { return NumElements(shape_); }
  size_t bytes() const { return static_cast<size_t>(size()) * DTypeSize(dtype_); }
  void* data() { return data_.get(); }
  const void* data() const { return data_.get(); }
  template <typename T> T* As() { return static_cast<T*>(data()); }
  template <typename T> const T* As() const { return static_cast<const T*>(data()); }
  TensorView view() const { return TensorView{dtype_, shape_, const_cast<void*>(data())}; }

 private:
  DType dtype_ = DType::kUndefined;
  Shape shape_;
  std::shared_ptr<void> data_;
};

/// 64-byte aligned allocation released with AlignedFree.
void* AlignedAlloc(size_t bytes);
void AlignedFree(void* p);

}  // namespace kaiwu
