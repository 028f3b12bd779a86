// Tensor element types as GGUF numbers them, their block layouts, and the scalar dequantizer.
// Layouts follow ggml: a row of n elements is n / block_size blocks of type_size bytes each.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kvstash {

// Values are the ggml_type numbers stored in GGUF tensor infos; names are ggml's ("q4_K").
enum class TensorType : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q8_0 = 8,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    BF16 = 30,
};

// Q5_0 (ggml type 6) is read at load only: model/weights.cpp repacks its matrices to Q8_0 (the same values), so no
// kernel takes it. Not an enumerator, so that the kernels' switches over the computed types need not name it;
// traits, names and dequantize_row know it.
inline constexpr TensorType kTensorTypeQ5_0 = static_cast<TensorType>(6);

struct TensorTypeTraits {
    const char* name;     // "q4_K", exactly as ggml spells it
    uint32_t block_size;  // elements per block (1 for plain float types)
    uint32_t type_size;   // bytes per block
};

// True for the types kvstash computes with (the enumerators above).
bool is_supported_tensor_type(uint32_t raw_type);
// True for the types a GGUF may hold: those and kTensorTypeQ5_0 (converted at load).
bool is_readable_tensor_type(uint32_t raw_type);
// Name of any ggml type number, supported or not ("q5_1", "iq2_xxs", ... or "type 77").
std::string tensor_type_name(uint32_t raw_type);
// Traits of a supported type.
const TensorTypeTraits& tensor_type_traits(TensorType type);
// Bytes taken by a row of n elements; throws Error(bad_format) if n is not a multiple of the block size.
uint64_t tensor_row_bytes(TensorType type, int64_t n);

// Scalar reference: decode n elements (n a multiple of the block size) of `type` at `src` into `dst`.
void dequantize_row(TensorType type, const void* src, float* dst, int64_t n);

// fp16 / bf16 <-> fp32 conversions (round to nearest even on the way down).
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);
float bf16_to_fp32(uint16_t h);

}  // namespace kvstash
