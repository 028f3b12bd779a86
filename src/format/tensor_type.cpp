// Tensor type traits, names and the scalar reference dequantizer.
// Block layouts and formulas follow ggml (ggml-common.h, ggml-quants.c dequantize_row_*): every float
// operation below is the one ggml performs, in the same order, so decoding is bitwise exact.
//
// Contraction of a*b+c into an FMA would change the rounding (ggml and gguf-py round the product first).
#pragma GCC optimize("fp-contract=off")

#include "format/tensor_type.h"

#include <cstring>
#include <string>

#include "kvstash/error.h"

namespace kvstash {
namespace {

constexpr int kQK = 32;    // elements per block of the q4_0 / q4_1 / q8_0 family
constexpr int kQKK = 256;  // elements per super-block of the K-quants

struct TypeEntry {
    uint32_t raw;
    const char* name;
    uint32_t block_size;
    uint32_t type_size;
};

// Every ggml_type number known to date (ggml.c type_traits). Types 4, 5, 31-33 and 36-38 were removed
// from ggml; their old names are kept so that a file using them gets a readable error.
constexpr TypeEntry kTypes[] = {
    {0, "f32", 1, 4},         {1, "f16", 1, 2},         {2, "q4_0", 32, 18},      {3, "q4_1", 32, 20},
    {4, "q4_2", 0, 0},        {5, "q4_3", 0, 0},        {6, "q5_0", 32, 22},      {7, "q5_1", 32, 24},
    {8, "q8_0", 32, 34},      {9, "q8_1", 32, 36},      {10, "q2_K", 256, 84},    {11, "q3_K", 256, 110},
    {12, "q4_K", 256, 144},   {13, "q5_K", 256, 176},   {14, "q6_K", 256, 210},   {15, "q8_K", 256, 292},
    {16, "iq2_xxs", 256, 66}, {17, "iq2_xs", 256, 74},  {18, "iq3_xxs", 256, 98}, {19, "iq1_s", 256, 50},
    {20, "iq4_nl", 32, 18},   {21, "iq3_s", 256, 110},  {22, "iq2_s", 256, 82},   {23, "iq4_xs", 256, 136},
    {24, "i8", 1, 1},         {25, "i16", 1, 2},        {26, "i32", 1, 4},        {27, "i64", 1, 8},
    {28, "f64", 1, 8},        {29, "iq1_m", 256, 56},   {30, "bf16", 1, 2},       {31, "q4_0_4_4", 0, 0},
    {32, "q4_0_4_8", 0, 0},   {33, "q4_0_8_8", 0, 0},   {34, "tq1_0", 256, 54},   {35, "tq2_0", 256, 66},
    {36, "iq4_nl_4_4", 0, 0}, {37, "iq4_nl_4_8", 0, 0}, {38, "iq4_nl_8_8", 0, 0}, {39, "mxfp4", 32, 17},
    {40, "nvfp4", 64, 36},    {41, "q1_0", 128, 18},
};
constexpr uint32_t kTypeCount = sizeof(kTypes) / sizeof(kTypes[0]);
static_assert(kTypes[kTypeCount - 1].raw == kTypeCount - 1, "kTypes is indexed by the type number");

const TensorTypeTraits kF32{"f32", 1, 4};
const TensorTypeTraits kF16{"f16", 1, 2};
const TensorTypeTraits kBF16{"bf16", 1, 2};
const TensorTypeTraits kQ4_0{"q4_0", 32, 18};    // fp16 d; 16 B of nibbles
const TensorTypeTraits kQ4_1{"q4_1", 32, 20};    // fp16 d, fp16 m; 16 B of nibbles
const TensorTypeTraits kQ5_0{"q5_0", 32, 22};    // fp16 d; 4 B fifth bits; 16 B of nibbles
const TensorTypeTraits kQ8_0{"q8_0", 32, 34};    // fp16 d; 32 int8
const TensorTypeTraits kQ4_K{"q4_K", 256, 144};  // fp16 d, dmin; 12 B scales; 128 B nibbles
const TensorTypeTraits kQ5_K{"q5_K", 256, 176};  // fp16 d, dmin; 12 B scales; 32 B high bits; 128 B nibbles
const TensorTypeTraits kQ6_K{"q6_K", 256, 210};  // 128 B low nibbles; 64 B high 2 bits; 16 int8 scales; fp16 d

uint16_t load_u16(const uint8_t* p) {
    uint16_t v;
    std::memcpy(&v, p, 2);  // GGUF is little-endian, as is every machine kvstash targets
    return v;
}

float load_fp16(const uint8_t* p) { return fp16_to_fp32(load_u16(p)); }

// q4_0: x = d * (q - 8); element j from the low nibble of byte j, element j + 16 from its high nibble.
void dequantize_q4_0(const uint8_t* src, float* dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b, src += 18, dst += kQK) {
        const float d = load_fp16(src);
        const uint8_t* qs = src + 2;
        for (int j = 0; j < kQK / 2; ++j) {
            const int x0 = (qs[j] & 0x0F) - 8;
            const int x1 = (qs[j] >> 4) - 8;
            dst[j] = static_cast<float>(x0) * d;
            dst[j + kQK / 2] = static_cast<float>(x1) * d;
        }
    }
}

// q4_1: x = d * q + m.
void dequantize_q4_1(const uint8_t* src, float* dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b, src += 20, dst += kQK) {
        const float d = load_fp16(src);
        const float m = load_fp16(src + 2);
        const uint8_t* qs = src + 4;
        for (int j = 0; j < kQK / 2; ++j) {
            const int x0 = qs[j] & 0x0F;
            const int x1 = qs[j] >> 4;
            dst[j] = static_cast<float>(x0) * d + m;
            dst[j + kQK / 2] = static_cast<float>(x1) * d + m;
        }
    }
}

// q5_0: x = d * (q - 16), q = nibble | fifth bit << 4; element j from the low nibble of byte j and bit j
// of qh, element j + 16 from its high nibble and bit j + 16.
void dequantize_q5_0(const uint8_t* src, float* dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b, src += 22, dst += kQK) {
        const float d = load_fp16(src);
        uint32_t qh;
        std::memcpy(&qh, src + 2, 4);
        const uint8_t* qs = src + 6;
        for (int j = 0; j < kQK / 2; ++j) {
            const int x0 = static_cast<int>((qs[j] & 0x0F) | (((qh >> j) & 1u) << 4)) - 16;
            const int x1 = static_cast<int>((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4)) - 16;
            dst[j] = static_cast<float>(x0) * d;
            dst[j + kQK / 2] = static_cast<float>(x1) * d;
        }
    }
}

// q8_0: x = q * d.
void dequantize_q8_0(const uint8_t* src, float* dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b, src += 34, dst += kQK) {
        const float d = load_fp16(src);
        const int8_t* qs = reinterpret_cast<const int8_t*>(src + 2);
        for (int j = 0; j < kQK; ++j) dst[j] = static_cast<float>(qs[j]) * d;
    }
}

// The 12 scale bytes of q4_K / q5_K hold eight 6-bit scales and eight 6-bit mins (ggml get_scale_min_k4).
void k_quant_scale_min(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// q4_K: 8 sub-blocks of 32; x = (d * sc) * q - (dmin * m). Bytes 32*i..32*i+31 of the nibbles hold
// sub-block 2i (low nibbles) and 2i+1 (high nibbles).
void dequantize_q4_k(const uint8_t* src, float* dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b, src += 144) {
        const float d = load_fp16(src);
        const float dmin = load_fp16(src + 2);
        const uint8_t* scales = src + 4;
        const uint8_t* q = src + 16;
        for (int j = 0; j < kQKK; j += 64) {
            uint8_t sc, m;
            k_quant_scale_min(j / 32, scales, &sc, &m);
            const float d1 = d * sc;
            const float m1 = dmin * m;
            k_quant_scale_min(j / 32 + 1, scales, &sc, &m);
            const float d2 = d * sc;
            const float m2 = dmin * m;
            for (int l = 0; l < 32; ++l) *dst++ = d1 * static_cast<float>(q[l] & 0x0F) - m1;
            for (int l = 0; l < 32; ++l) *dst++ = d2 * static_cast<float>(q[l] >> 4) - m2;
            q += 32;
        }
    }
}

// q5_K: as q4_K with a fifth bit per element from qh: bit (2i) of qh[l] for sub-block 2i, bit (2i+1)
// for sub-block 2i+1.
void dequantize_q5_k(const uint8_t* src, float* dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b, src += 176) {
        const float d = load_fp16(src);
        const float dmin = load_fp16(src + 2);
        const uint8_t* scales = src + 4;
        const uint8_t* qh = src + 16;
        const uint8_t* ql = src + 48;
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0; j < kQKK; j += 64) {
            uint8_t sc, m;
            k_quant_scale_min(j / 32, scales, &sc, &m);
            const float d1 = d * sc;
            const float m1 = dmin * m;
            k_quant_scale_min(j / 32 + 1, scales, &sc, &m);
            const float d2 = d * sc;
            const float m2 = dmin * m;
            for (int l = 0; l < 32; ++l) {
                const int q = (ql[l] & 0x0F) + ((qh[l] & u1) ? 16 : 0);
                *dst++ = d1 * static_cast<float>(q) - m1;
            }
            for (int l = 0; l < 32; ++l) {
                const int q = (ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0);
                *dst++ = d2 * static_cast<float>(q) - m2;
            }
            ql += 32;
            u1 = static_cast<uint8_t>(u1 << 2);
            u2 = static_cast<uint8_t>(u2 << 2);
        }
    }
}

// q6_K: two halves of 128; in each, element l + 32*k (k = 0..3) takes 4 low bits from ql and 2 high
// bits from qh, q - 32 in [-32, 31], scaled by d * scales[l/16 + 2k] (int8 scale per 16 elements).
void dequantize_q6_k(const uint8_t* src, float* dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; ++b, src += 210) {
        const uint8_t* ql = src;
        const uint8_t* qh = src + 128;
        const int8_t* sc = reinterpret_cast<const int8_t*>(src + 192);
        const float d = load_fp16(src + 208);
        for (int half = 0; half < 2; ++half) {
            for (int l = 0; l < 32; ++l) {
                const int is = l / 16;
                const int q1 = static_cast<int>((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = static_cast<int>((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = static_cast<int>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = static_cast<int>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                dst[l + 0] = d * static_cast<float>(sc[is + 0]) * static_cast<float>(q1);
                dst[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
                dst[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
                dst[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
            }
            dst += 128;
            ql += 64;
            qh += 32;
            sc += 8;
        }
    }
}

}  // namespace

bool is_supported_tensor_type(uint32_t raw_type) {
    switch (static_cast<TensorType>(raw_type)) {
        case TensorType::F32:
        case TensorType::F16:
        case TensorType::Q4_0:
        case TensorType::Q4_1:
        case TensorType::Q8_0:
        case TensorType::Q4_K:
        case TensorType::Q5_K:
        case TensorType::Q6_K:
        case TensorType::BF16: return true;
    }
    return false;
}

bool is_readable_tensor_type(uint32_t raw_type) {
    return is_supported_tensor_type(raw_type) || static_cast<TensorType>(raw_type) == kTensorTypeQ5_0;
}

std::string tensor_type_name(uint32_t raw_type) {
    if (raw_type < kTypeCount) return kTypes[raw_type].name;
    return "type " + std::to_string(raw_type);
}

const TensorTypeTraits& tensor_type_traits(TensorType type) {
    switch (type) {
        case TensorType::F32: return kF32;
        case TensorType::F16: return kF16;
        case TensorType::Q4_0: return kQ4_0;
        case TensorType::Q4_1: return kQ4_1;
        case TensorType::Q8_0: return kQ8_0;
        case TensorType::Q4_K: return kQ4_K;
        case TensorType::Q5_K: return kQ5_K;
        case TensorType::Q6_K: return kQ6_K;
        case TensorType::BF16: return kBF16;
    }
    if (type == kTensorTypeQ5_0) return kQ5_0;
    throw Error(ErrorCode::unsupported,
                "tensor type " + tensor_type_name(static_cast<uint32_t>(type)) + " is not supported by kvstash");
}

uint64_t tensor_row_bytes(TensorType type, int64_t n) {
    const TensorTypeTraits& traits = tensor_type_traits(type);
    if (n < 0 || n % traits.block_size != 0) {
        throw Error(ErrorCode::bad_format, "a row of " + std::to_string(n) + " elements of type " + traits.name +
                                               " is not a whole number of " + std::to_string(traits.block_size) +
                                               "-element blocks");
    }
    return static_cast<uint64_t>(n / traits.block_size) * traits.type_size;
}

void dequantize_row(TensorType type, const void* src, float* dst, int64_t n) {
    const TensorTypeTraits& traits = tensor_type_traits(type);
    if (n < 0 || n % traits.block_size != 0) {
        throw Error(ErrorCode::invalid_argument, "dequantize_row: " + std::to_string(n) +
                                                     " elements is not a multiple of the " + traits.name +
                                                     " block size " + std::to_string(traits.block_size));
    }
    const auto* s = static_cast<const uint8_t*>(src);
    const int64_t n_blocks = n / traits.block_size;
    switch (type) {
        case TensorType::F32: std::memcpy(dst, s, static_cast<size_t>(n) * 4); return;
        case TensorType::F16:
            for (int64_t i = 0; i < n; ++i) dst[i] = load_fp16(s + 2 * i);
            return;
        case TensorType::BF16:
            for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(load_u16(s + 2 * i));
            return;
        case TensorType::Q4_0: dequantize_q4_0(s, dst, n_blocks); return;
        case TensorType::Q4_1: dequantize_q4_1(s, dst, n_blocks); return;
        case TensorType::Q8_0: dequantize_q8_0(s, dst, n_blocks); return;
        case TensorType::Q4_K: dequantize_q4_k(s, dst, n_blocks); return;
        case TensorType::Q5_K: dequantize_q5_k(s, dst, n_blocks); return;
        case TensorType::Q6_K: dequantize_q6_k(s, dst, n_blocks); return;
    }
    if (type == kTensorTypeQ5_0) dequantize_q5_0(s, dst, n_blocks);
}

float fp16_to_fp32(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
    const uint32_t exponent = (h >> 10) & 0x1F;
    uint32_t mantissa = h & 0x3FF;
    uint32_t bits;
    if (exponent == 0x1F) {
        bits = sign | 0x7F800000u | (mantissa << 13);  // inf, or NaN keeping its payload
    } else if (exponent != 0) {
        bits = sign | ((exponent + 112) << 23) | (mantissa << 13);  // rebias 15 -> 127
    } else if (mantissa == 0) {
        bits = sign;
    } else {
        // Subnormal half: normalize. value = mantissa * 2^-24.
        int e = 113;  // exponent field of 2^-14 in fp32 is 113; shift until the implicit bit appears
        while ((mantissa & 0x400) == 0) {
            mantissa <<= 1;
            --e;
        }
        bits = sign | (static_cast<uint32_t>(e) << 23) | ((mantissa & 0x3FF) << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

uint16_t fp32_to_fp16(float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
    const uint32_t abs = bits & 0x7FFFFFFF;
    if (abs > 0x7F800000) {  // NaN: keep the top payload bits, force quiet
        return static_cast<uint16_t>(sign | 0x7E00 | ((abs >> 13) & 0x3FF));
    }
    if (abs >= 0x477FF000) return static_cast<uint16_t>(sign | 0x7C00);  // rounds to >= 65520: inf
    if (abs >= 0x38800000) {                                             // normal half (>= 2^-14)
        const uint32_t rounded = abs + 0xFFF + ((abs >> 13) & 1);        // nearest even at bit 13
        return static_cast<uint16_t>(sign | ((rounded - 0x38000000) >> 13));
    }
    if (abs < 0x33000000) return sign;  // below 2^-25: rounds to zero (2^-25 itself is a tie to 0)
    // Subnormal half: value / 2^-24 rounded to nearest even.
    const uint32_t exponent = abs >> 23;  // 102..112
    const uint32_t mantissa = (abs & 0x7FFFFF) | 0x800000;
    const uint32_t shift = 126 - exponent;  // 14..24: mantissa * 2^(exponent-150) / 2^-24
    const uint32_t half_ulp = 1u << (shift - 1);
    uint32_t q = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    if (rest > half_ulp || (rest == half_ulp && (q & 1))) ++q;
    return static_cast<uint16_t>(sign | q);
}

float bf16_to_fp32(uint16_t h) {
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

}  // namespace kvstash
