#include "support/random_operands.h"

#include <cmath>
#include <random>

namespace kvstash::test {

void put_fp16(uint8_t* p, float v) {
    const uint16_t h = fp32_to_fp16(v);
    std::memcpy(p, &h, 2);
}

std::vector<uint8_t> random_weights(TensorType type, int64_t rows, int64_t cols, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> byte(0, 255);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const TensorTypeTraits& traits = tensor_type_traits(type);
    const uint64_t row_bytes = tensor_row_bytes(type, cols);
    std::vector<uint8_t> w(row_bytes * static_cast<uint64_t>(rows));
    if (traits.block_size == 1) {
        for (int64_t i = 0; i < rows * cols; ++i) {
            const float v = normal(rng) * 0.5f;
            if (type == TensorType::F32) {
                std::memcpy(w.data() + 4 * i, &v, 4);
            } else if (type == TensorType::F16) {
                put_fp16(w.data() + 2 * i, v);
            } else {  // bf16: the top half of the fp32 bits
                uint32_t bits;
                std::memcpy(&bits, &v, 4);
                const uint16_t h = static_cast<uint16_t>(bits >> 16);
                std::memcpy(w.data() + 2 * i, &h, 2);
            }
        }
        return w;
    }
    for (uint8_t& b : w) b = static_cast<uint8_t>(byte(rng));
    for (uint64_t off = 0; off < w.size(); off += traits.type_size) {
        uint8_t* blk = w.data() + off;
        switch (type) {
            case TensorType::Q8_0: put_fp16(blk, normal(rng) * 0.01f); break;
            case TensorType::Q4_0: put_fp16(blk, normal(rng) * 0.05f); break;
            case TensorType::Q4_1:
                put_fp16(blk, std::abs(normal(rng)) * 0.05f);
                put_fp16(blk + 2, -std::abs(normal(rng)) * 0.4f);
                break;
            case TensorType::Q4_K:
            case TensorType::Q5_K:
                put_fp16(blk, std::abs(normal(rng)) * 0.002f);
                put_fp16(blk + 2, std::abs(normal(rng)) * 0.004f);
                break;
            case TensorType::Q6_K: put_fp16(blk + 208, normal(rng) * 0.0005f); break;
            default: break;
        }
    }
    return w;
}

std::vector<float> random_activations(int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = normal(rng);
    return x;
}

}  // namespace kvstash::test
