// The grouped-query attention kernels (backends/cpu/attention/attention_group.h) called directly, with shapes the
// engine's calls reach rarely or never: many heads (prefill tiles of up to 32 rows × a group: the V rows converted once
// and the values walked in key blocks) over key counts that are not a multiple of the key block, from
// positions inside a KV block. Each head's partial (max, sum, numerator-weighted values) is bitwise the
// per-row operations' (backends/cpu/attention/attention_rows.h), as backends/cpu/attention/attention.cpp's
// chunk_partial_rows defines it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/attention/attention_group.h"
#include "backends/cpu/attention/attention_rows.h"
#include "backends/cpu/runtime/dispatch.h"
#include "format/quantize.h"
#include "format/tensor_type.h"

namespace kvstash {
namespace {

constexpr int64_t kBlockTokens = 32;
constexpr int64_t kHeadDim = 64;
constexpr int64_t kKvHeads = 2;  // the heads read KV head 1 (a row offset)

// n_pos rows of K and V (kKvHeads * head_dim values of `type`) in blocks of kBlockTokens rows.
struct Rows {
    int64_t head_dim = 0;
    uint64_t row_bytes = 0;
    std::vector<std::vector<uint8_t>> k, v;
    std::vector<const uint8_t*> k_table, v_table;

    Rows(TensorType type, int64_t n_pos, std::mt19937& rng, int64_t head_size = kHeadDim) : head_dim(head_size) {
        const int64_t width = kKvHeads * head_dim;
        row_bytes = tensor_row_bytes(type, width);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        std::vector<float> row(static_cast<size_t>(width));
        for (int64_t b = 0; b * kBlockTokens < n_pos; ++b) {
            for (auto* blocks : {&k, &v}) {
                blocks->emplace_back(kBlockTokens * row_bytes);
                for (int64_t r = 0; r < kBlockTokens; ++r) {
                    for (float& x : row) x = normal(rng);
                    uint8_t* dst = blocks->back().data() + r * row_bytes;
                    if (type == TensorType::F32) {
                        std::memcpy(dst, row.data(), row.size() * sizeof(float));
                    } else if (type == TensorType::F16) {
                        for (int64_t i = 0; i < width; ++i) {
                            const uint16_t h = fp32_to_fp16(row[static_cast<size_t>(i)]);
                            std::memcpy(dst + 2 * i, &h, 2);
                        }
                    } else {
                        quantize_row_q8_0(row.data(), dst, width);
                    }
                }
            }
            k_table.push_back(k.back().data());
            v_table.push_back(v.back().data());
        }
    }
};

// One call of the ISA's group kernel (heads with query vectors q, keys first_key.., head h the first
// head_keys[h] of them, or n_keys for all if head_keys is empty, from the head_first[h]-th, or the first if head_first
// is empty) against chunk_partial_rows (backends/cpu/attention/attention.cpp), the definition, head by head.
void check_call(Isa isa, TensorType type, const Rows& rows, const std::vector<float>& q, int64_t first_key,
                int64_t n_keys, const std::vector<int64_t>& head_keys, const std::vector<int64_t>& head_first = {}) {
    const int64_t head_dim = rows.head_dim;
    const int64_t n_heads = static_cast<int64_t>(q.size()) / head_dim;
    const kernels::AttentionRowOps ops = kernels::attention_row_ops(Isa::scalar);  // every ISA: the scalar bits
    const uint64_t offset = kernels::kv_row_offset(type, head_dim);                // KV head 1
    std::vector<float> scores(static_cast<size_t>(n_heads * n_keys));
    std::vector<float> max(static_cast<size_t>(n_heads)), sum(max.size()), acc(q.size());
    kernels::AttentionGroupArgs args;
    args.q = q.data();
    args.n_heads = n_heads;
    args.head_dim = head_dim;
    args.first_key = first_key;
    args.n_keys = n_keys;
    args.scale = 0.125f;
    args.head_keys = head_keys.empty() ? nullptr : head_keys.data();
    args.head_first = head_first.empty() ? nullptr : head_first.data();
    args.k_blocks = rows.k_table.data();
    args.v_blocks = rows.v_table.data();
    args.offset = offset;
    args.block_tokens = kBlockTokens;
    args.row_bytes = rows.row_bytes;
    args.type = type;
    args.scores = scores.data();
    args.max_score = max.data();
    args.sum = sum.data();
    args.acc = acc.data();
    kernels::kernel_table(isa).attention_group(args);
    auto row = [&](const std::vector<const uint8_t*>& t, int64_t pos) {
        return t[pos / kBlockTokens] + (pos % kBlockTokens) * rows.row_bytes + offset;
    };
    for (int64_t h = 0; h < n_heads; ++h) {
        const int64_t from = first_key + (head_first.empty() ? 0 : head_first[h]);
        const int64_t n = first_key + (head_keys.empty() ? n_keys : head_keys[h]) - from;
        std::vector<float> s(static_cast<size_t>(n)), a(static_cast<size_t>(head_dim), 0.0f);
        float m = -INFINITY;
        for (int64_t j = 0; j < n; ++j) {
            s[j] = ops.dot(q.data() + h * head_dim, row(rows.k_table, from + j), head_dim, type) * args.scale;
            if (s[j] > m) m = s[j];
        }
        ops.exp_shifted(s.data(), s.data(), n, m);
        float l = 0.0f;
        for (int64_t j = 0; j < n; ++j) l += s[j];
        for (int64_t j = 0; j < n; ++j) ops.axpy(a.data(), s[j], row(rows.v_table, from + j), head_dim, type);
        ASSERT_EQ(0, std::memcmp(&m, &max[h], sizeof(float))) << "head " << h << " max";
        ASSERT_EQ(0, std::memcmp(&l, &sum[h], sizeof(float))) << "head " << h << " sum";
        ASSERT_EQ(0, std::memcmp(a.data(), acc.data() + h * head_dim, head_dim * sizeof(float)))
            << "head " << h << " values";
    }
}

// The types each ISA's group kernel reads (AVX-512 reads q8_0 caches with the AVX2 kernels).
std::vector<TensorType> group_types(Isa isa) {
    if (isa == Isa::avx2) return {TensorType::F16, TensorType::F32, TensorType::Q8_0};
    return {TensorType::F16, TensorType::F32};
}

TEST(AttentionGroup, ManyHeadsAnyKeyCountEqualPerRowOperationsBitwise) {
    for (Isa isa : available_isas()) {
        if (kernels::kernel_table(isa).attention_group == nullptr) continue;
        for (TensorType type : group_types(isa)) {
            std::mt19937 rng(static_cast<uint32_t>(type) + 5);
            const Rows rows(type, 600, rng);
            std::normal_distribution<float> normal(0.0f, 2.0f);
            for (int64_t n_heads : {3, 11, 12, 13, 16, 17, 24, 32, 33, 96}) {
                std::vector<float> q(static_cast<size_t>(n_heads * kHeadDim));
                for (float& x : q) x = normal(rng);
                for (int64_t first_key : {0, 37, 256}) {
                    for (int64_t n_keys : {1, 9, 64, 65, 200, 256}) {
                        SCOPED_TRACE(std::string(isa_name(isa)) + " " + tensor_type_name(static_cast<uint32_t>(type)) +
                                     " heads " + std::to_string(n_heads) + " keys " + std::to_string(first_key) + "+" +
                                     std::to_string(n_keys));
                        check_call(isa, type, rows, q, first_key, n_keys, {});
                    }
                }
            }
        }
    }
}

// Whether the ISA's group kernel takes a head size (attention_group.h).
bool group_kernel_takes(Isa isa, int64_t head_dim) {
    if (kernels::kernel_table(isa).attention_group == nullptr) return false;
    return isa == Isa::avx2 ? kernels::attention_group_avx2_supports(head_dim)
                            : kernels::attention_group_avx512_supports(head_dim);
}

// Head sizes other than 64 (a last half of 16 lanes where head_dim is 16n + 8; q8_0 on multiples of 32 only), with
// few heads and with many (the heads-in-lanes paths: blocks of 16 heads, a last block with idle lanes), and
// rows of a chunk's diagonal in one call whose heads' key counts differ inside one block of 16 lanes.
TEST(AttentionGroup, EveryHeadSizeEqualsPerRowOperationsBitwise) {
    for (Isa isa : available_isas()) {
        for (int64_t head_dim : {8, 16, 24, 40, 72, 128, 256, 512}) {
            if (!group_kernel_takes(isa, head_dim)) continue;
            for (TensorType type : group_types(isa)) {
                if (type == TensorType::Q8_0 && head_dim % 32 != 0) continue;
                std::mt19937 rng(static_cast<uint32_t>(head_dim) + static_cast<uint32_t>(type));
                const Rows rows(type, 300, rng, head_dim);
                std::normal_distribution<float> normal(0.0f, 2.0f);
                for (int64_t n_heads : {3, 12, 17, 33}) {
                    std::vector<float> q(static_cast<size_t>(n_heads * head_dim));
                    for (float& x : q) x = normal(rng);
                    for (int64_t n_keys : {1, 13, 256}) {
                        SCOPED_TRACE(std::string(isa_name(isa)) + " " + tensor_type_name(static_cast<uint32_t>(type)) +
                                     " head_dim " + std::to_string(head_dim) + " heads " + std::to_string(n_heads) +
                                     " keys " + std::to_string(n_keys));
                        check_call(isa, type, rows, q, 40, n_keys, {});
                        if (n_keys < 13) continue;
                        std::vector<int64_t> head_keys;  // one row of 3 heads per key count, up to n_keys
                        for (int64_t h = 0; h < n_heads; ++h) head_keys.push_back(n_keys - (n_heads - 1 - h) / 3);
                        check_call(isa, type, rows, q, 40, n_keys, head_keys);
                    }
                }
            }
        }
    }
}

// The rows of a chunk's diagonal in one call (AttentionGroupArgs::head_keys), on every ISA with a group kernel: groups
// of 3 heads (one row each) with one key more per row, from 1 key and from inside the chunk, across the 64-key value
// blocks and the passes of heads; and rows in no particular order.
TEST(AttentionGroup, HeadsWithDifferentKeyCountsEqualPerRowOperationsBitwise) {
    int64_t kernels_checked = 0;
    for (Isa isa : available_isas()) {
        if (kernels::kernel_table(isa).attention_group == nullptr) continue;
        ++kernels_checked;
        for (TensorType type : group_types(isa)) {
            std::mt19937 rng(static_cast<uint32_t>(type) + 9);
            const Rows rows(type, 600, rng);
            std::normal_distribution<float> normal(0.0f, 2.0f);
            for (int64_t n_rows : {2, 5, 32}) {
                std::vector<float> q(static_cast<size_t>(3 * n_rows * kHeadDim));
                for (float& x : q) x = normal(rng);
                for (int64_t first_keys : {1, 50, 225}) {
                    for (bool shuffled : {false, true}) {
                        std::vector<int64_t> row_keys;
                        for (int64_t r = 0; r < n_rows; ++r) row_keys.push_back(first_keys + r);
                        if (shuffled) std::shuffle(row_keys.begin(), row_keys.end(), rng);
                        std::vector<int64_t> head_keys;
                        for (int64_t n : row_keys) head_keys.insert(head_keys.end(), 3, n);
                        const int64_t n_keys = *std::max_element(head_keys.begin(), head_keys.end());
                        SCOPED_TRACE(std::string(isa_name(isa)) + " " + tensor_type_name(static_cast<uint32_t>(type)) +
                                     " rows " + std::to_string(n_rows) + " keys from " + std::to_string(first_keys) +
                                     (shuffled ? " shuffled" : ""));
                        check_call(isa, type, rows, q, 256, n_keys, head_keys);
                    }
                }
            }
        }
    }
    if (kernels_checked == 0) GTEST_SKIP() << "no ISA with a group kernel on this CPU";
}

// Rows whose sliding windows start inside the chunk in one call (AttentionGroupArgs::head_first: the AVX2 kernel, which
// Gemma 3's head size 256 takes on AVX-512 CPUs too): groups of heads (4 query heads to 1 KV head as Gemma 3 270M, 3 as
// SmolLM2) starting one key later per row, seeing the chunk to its end or (a window shorter than a chunk, on its
// diagonal) one key more per row as well; few rows (each run of heads alone) and many (16 heads in the lanes, rows
// across blocks of 16 lanes and of value keys).
TEST(AttentionGroup, HeadsStartingAtDifferentKeysEqualPerRowOperationsBitwise) {
    const std::vector<Isa> isas = available_isas();
    if (std::find(isas.begin(), isas.end(), Isa::avx2) == isas.end()) {
        GTEST_SKIP() << "no AVX2 on this CPU: the only kernel that takes AttentionGroupArgs::head_first";
    }
    for (int64_t head_dim : {64, 256}) {
        for (TensorType type : group_types(Isa::avx2)) {
            std::mt19937 rng(static_cast<uint32_t>(head_dim) + static_cast<uint32_t>(type) + 11);
            const Rows rows(type, 300, rng, head_dim);
            std::normal_distribution<float> normal(0.0f, 2.0f);
            for (int64_t group : {4, 3}) {
                for (int64_t n_rows : {1, 2, 3, 5, 32}) {
                    std::vector<float> q(static_cast<size_t>(group * n_rows * head_dim));
                    for (float& x : q) x = normal(rng);
                    for (int64_t first : {0, 7, 100}) {
                        for (bool diagonal : {false, true}) {
                            // Row r: keys [first + r, end_r), end_r = the chunk's end, or first + r + 20 + r on the
                            // diagonal of a 21-key window.
                            std::vector<int64_t> head_first, head_keys;
                            for (int64_t r = 0; r < n_rows; ++r) {
                                head_first.insert(head_first.end(), static_cast<size_t>(group), first + r);
                                head_keys.insert(head_keys.end(), static_cast<size_t>(group),
                                                 diagonal ? first + 2 * r + 21 : first + n_rows + 40);
                            }
                            const int64_t n_keys = *std::max_element(head_keys.begin(), head_keys.end());
                            SCOPED_TRACE(std::string(tensor_type_name(static_cast<uint32_t>(type))) + " head_dim " +
                                         std::to_string(head_dim) + " group " + std::to_string(group) + " rows " +
                                         std::to_string(n_rows) + " first " + std::to_string(first) +
                                         (diagonal ? " diagonal" : ""));
                            check_call(Isa::avx2, type, rows, q, 30, n_keys, head_keys, head_first);
                        }
                    }
                }
            }
        }
    }
}

}  // namespace
}  // namespace kvstash
