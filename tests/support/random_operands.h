// Random but valid operands for the kernel tests: weights of every tensor type, f32 activations.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "format/tensor_type.h"

namespace kvstash::test {

inline const TensorType kAllTensorTypes[] = {TensorType::F32,  TensorType::F16,  TensorType::BF16,
                                             TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_1,
                                             TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K};

inline bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

// Writes v as fp16 at p.
void put_fp16(uint8_t* p, float v);

// rows × cols weights of `type`: quant bits are random bytes (every pattern is valid); the fp16 scales are
// overwritten with values of a typical magnitude (both signs), so the decoded weights are O(0.1-1).
std::vector<uint8_t> random_weights(TensorType type, int64_t rows, int64_t cols, uint32_t seed);
// n values from N(0, 1).
std::vector<float> random_activations(int64_t n, uint32_t seed);

}  // namespace kvstash::test
