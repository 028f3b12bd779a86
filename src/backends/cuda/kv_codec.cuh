// Reading and writing one KV row element on the device, for the three cache types (kvstash::KvType): f16
// (fp32_to_fp16), f32 (as is) and q8_0 (blocks of 32 values: fp16 d = max|x| / 127, int8 q = round(x / d),
// read back as d * q, exact in f32). The q8_0 block writer is format/quantize.cpp's quantize_row_q8_0 (ggml's),
// operation for operation; the readers are backends/cpu/attention/attention_rows.h's. Host-compilable too (tests/gpu's
// DevicePortsOnTheHost tests check them against the CPU on the CPU).
#pragma once

#include <cstdint>

#include "backends/cuda/device_numerics.cuh"
#include "format/tensor_type.h"

namespace kvstash::cuda::device {

inline constexpr int64_t kQ8Block = 32;
inline constexpr int64_t kQ8BlockBytes = 34;

// Bytes before element i of a row (i a multiple of 32 for q8_0).
KVSTASH_HOST_DEVICE int64_t kv_offset(TensorType type, int64_t i) {
    return type == TensorType::Q8_0 ? i / kQ8Block * kQ8BlockBytes : i * (type == TensorType::F32 ? 4 : 2);
}

// Element i of the row at `row`.
KVSTASH_HOST_DEVICE float kv_load(const uint8_t* row, int64_t i, TensorType type) {
    if (type == TensorType::F16) return fp16_to_fp32(reinterpret_cast<const uint16_t*>(row)[i]);
    if (type == TensorType::F32) return reinterpret_cast<const float*>(row)[i];
    const uint8_t* block = row + i / kQ8Block * kQ8BlockBytes;
    const float d = fp16_to_fp32(static_cast<uint16_t>(block[0] | (block[1] << 8)));
    return mul_rn(d, static_cast<float>(static_cast<int8_t>(block[2 + i % kQ8Block])));
}

// One q8_0 block of 32 values x into out (34 bytes), as quantize_row_q8_0.
KVSTASH_HOST_DEVICE void quantize_block_q8_0(const float* x, uint8_t* out) {
    float amax = 0.0f;
    for (int j = 0; j < kQ8Block; ++j) amax = max_f(amax, abs_f(x[j]));
    const float d = div_rn(amax, 127.0f);
    const float id = d != 0.0f ? div_rn(1.0f, d) : 0.0f;
    const uint16_t d16 = fp32_to_fp16(d);
    out[0] = static_cast<uint8_t>(d16 & 0xFF);
    out[1] = static_cast<uint8_t>(d16 >> 8);
    for (int j = 0; j < kQ8Block; ++j) {
        const float q = round_half_away(mul_rn(x[j], id));
        const int8_t qi = (q >= -127.0f && q <= 127.0f) ? static_cast<int8_t>(q) : int8_t{0};
        out[2 + j] = static_cast<uint8_t>(qi);
    }
}

}  // namespace kvstash::cuda::device
