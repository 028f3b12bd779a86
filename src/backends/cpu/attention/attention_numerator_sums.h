// The softmax numerators of the grouped-query attention kernels (attention_group_avx2.cpp,
// attention_group_avx512.cpp): where they lie, and the sums of heads whose numerators are rows of
// AttentionGroupArgs::scores. Plain code with internal linkage, included into each instruction set's file: each
// keeps its own copy, compiled for its ISA (no weak symbol shared between them: backends/cpu/runtime/scratch.h).
#pragma once

#include <algorithm>
#include <cstdint>

#include "backends/cpu/attention/attention_group.h"

namespace kvstash::kernels {
namespace {  // NOLINT(google-build-namespaces, cert-dcl59-cpp): one copy per including ISA file

// Keys of head h: the first keys_of(a, h) of the chunk's n_keys (AttentionGroupArgs::head_keys).
inline int64_t keys_of(const AttentionGroupArgs& a, int64_t h) {
    return a.head_keys == nullptr ? a.n_keys : a.head_keys[h];
}
// Head h's first key: keys first_of(a, h)..keys_of(a, h) - 1 of the chunk (AttentionGroupArgs::head_first).
inline int64_t first_of(const AttentionGroupArgs& a, int64_t h) {
    return a.head_first == nullptr ? 0 : a.head_first[h];
}

// Where head h's numerator of key j is: e.head(h)[j * e.key_stride]. Rows of AttentionGroupArgs::scores (a row of
// n_keys per head, key stride 1; head_block 0), or the heads-in-lanes blocks of the many-heads paths (16 heads a block:
// head h at block h / 16, lane h % 16; key stride 16, head_block n_keys * 16 floats between blocks).
struct Numerators {
    const float* base;
    int64_t head_block;  // floats between blocks of 16 heads (0: a row per head)
    int64_t n_keys;
    int64_t key_stride;
    const float* head(int64_t h) const {
        return head_block == 0 ? base + h * n_keys : base + (h / 16) * head_block + h % 16;
    }
};

// sum[h] = the numerators of head h (a.scores + h * n_keys) added in key order from 0.0f (the per-row sum), H
// heads from h0 at once: H independent chains of dependent additions instead of one after the other (a chain
// waits for each addition's latency, key after key).
template <int H>
void numerator_sums(const AttentionGroupArgs& a, int64_t h0) {
    float sum[H];
    const float* e[H];
    int64_t common = a.n_keys;  // keys every one of the H heads has
    for (int i = 0; i < H; ++i) {
        sum[i] = 0.0f;
        e[i] = a.scores + (h0 + i) * a.n_keys;
        common = std::min(common, keys_of(a, h0 + i));
    }
    for (int64_t j = 0; j < common; ++j) {
        for (int i = 0; i < H; ++i) sum[i] += e[i][j];
    }
    for (int i = 0; i < H; ++i) {
        for (int64_t j = common; j < keys_of(a, h0 + i); ++j) sum[i] += e[i][j];
        a.sum[h0 + i] = sum[i];
    }
}

// Every head's sum, 8, 4 and then the rest at once.
inline void all_numerator_sums(const AttentionGroupArgs& a) {
    int64_t s0 = 0;
    for (; s0 + 8 <= a.n_heads; s0 += 8) numerator_sums<8>(a, s0);
    for (; s0 + 4 <= a.n_heads; s0 += 4) numerator_sums<4>(a, s0);
    switch (a.n_heads - s0) {
        case 3: numerator_sums<3>(a, s0); break;
        case 2: numerator_sums<2>(a, s0); break;
        case 1: numerator_sums<1>(a, s0); break;
        default: break;
    }
}

}  // namespace
}  // namespace kvstash::kernels
