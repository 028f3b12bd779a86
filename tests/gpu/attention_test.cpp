// KV store and attention on the GPU: K/V rows land in f16 / f32 / q8_0 blocks bitwise as the CPU stores them, and
// attention over them is bitwise the CPU's scalar path (backends/cpu/attention/attention.h's definition with the
// reference per-row operations), with causal masking, GQA, chunks of 256 keys at absolute positions, sliding windows,
// several sequences in one call, and batch invariance from 1 to 256 rows.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "backends/cpu/attention/attention_rows.h"
#include "backends/cpu/exp/exp_f32.h"
#include "format/quantize.h"
#include "gpu_test_support.h"

namespace kvstash {
namespace {

using gpu_test::DeviceBuffer;

constexpr int64_t kBlockTokens = 32;
constexpr int64_t kChunkKeys = 256;

// One sequence's cache on the device (blocks of 32 tokens of `type`) and its host copy after the store.
struct DeviceCache {
    int64_t n_blocks = 0;
    int64_t row_bytes = 0;
    TensorType type = TensorType::F16;
    std::vector<DeviceBuffer<uint8_t>*> k, v;
    std::unique_ptr<DeviceBuffer<uint8_t*>> k_table, v_table;
    std::vector<uint8_t> k_host, v_host;  // n_blocks * kBlockTokens * row_bytes, downloaded

    DeviceCache(int64_t tokens, int64_t elems, TensorType t)
        : n_blocks((tokens + kBlockTokens - 1) / kBlockTokens),
          row_bytes(static_cast<int64_t>(kernels::kv_row_offset(t, elems))),
          type(t) {
        std::vector<uint8_t*> kp, vp;
        for (int64_t b = 0; b < n_blocks; ++b) {
            k.push_back(new DeviceBuffer<uint8_t>(static_cast<size_t>(kBlockTokens * row_bytes)));
            v.push_back(new DeviceBuffer<uint8_t>(static_cast<size_t>(kBlockTokens * row_bytes)));
            kp.push_back(k.back()->get());
            vp.push_back(v.back()->get());
        }
        k_table = std::make_unique<DeviceBuffer<uint8_t*>>(kp);
        v_table = std::make_unique<DeviceBuffer<uint8_t*>>(vp);
    }
    ~DeviceCache() {
        for (auto* b : k) delete b;
        for (auto* b : v) delete b;
    }
    cuda::KvBlocks view() const { return {k_table->get(), v_table->get(), kBlockTokens, row_bytes, type}; }
    void download() {
        k_host.clear();
        v_host.clear();
        for (int64_t b = 0; b < n_blocks; ++b) {
            const std::vector<uint8_t> kb = k[b]->download(), vb = v[b]->download();
            k_host.insert(k_host.end(), kb.begin(), kb.end());
            v_host.insert(v_host.end(), vb.begin(), vb.end());
        }
    }
    // Position pos's row, from element `first` on (the CPU's offset arithmetic,
    // backends/cpu/attention/attention_rows.h).
    const uint8_t* k_row(int64_t pos, int64_t first) const {
        return k_host.data() + pos * row_bytes + kernels::kv_row_offset(type, first);
    }
    const uint8_t* v_row(int64_t pos, int64_t first) const {
        return v_host.data() + pos * row_bytes + kernels::kv_row_offset(type, first);
    }
};

// backends/cpu/attention/attention.h's definition with the scalar reference operations: one (row, head).
void reference_head(const cuda::AttentionShape& s, const DeviceCache& cache, const float* q, int64_t pos, int64_t head,
                    float* out) {
    const int64_t kv_head = head / (s.n_head / s.n_head_kv);
    const int64_t offset = kv_head * s.head_dim;
    const int64_t first = s.window > 0 && pos >= s.window ? pos - s.window + 1 : 0;
    std::vector<float> maxes, sums, accs;
    for (int64_t c = first / kChunkKeys; c <= pos / kChunkKeys; ++c) {
        const int64_t lo = std::max(first, c * kChunkKeys), hi = std::min(pos, c * kChunkKeys + kChunkKeys - 1);
        std::vector<float> scores;
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t j = lo; j <= hi; ++j) {
            scores.push_back(kernels::reference::attention_dot(q, cache.k_row(j, offset), s.head_dim, cache.type) *
                             s.scale);
            if (scores.back() > m) m = scores.back();
        }
        kernels::reference::exp_f32_shifted_row(scores.data(), scores.data(), static_cast<int64_t>(scores.size()), m);
        float sum = 0.0f;
        for (float e : scores) sum += e;
        std::vector<float> acc(static_cast<size_t>(s.head_dim), 0.0f);
        for (int64_t j = lo; j <= hi; ++j) {
            kernels::reference::attention_axpy(acc.data(), scores[j - lo], cache.v_row(j, offset), s.head_dim,
                                               cache.type);
        }
        maxes.push_back(m);
        sums.push_back(sum);
        accs.insert(accs.end(), acc.begin(), acc.end());
    }
    float m = maxes[0];
    for (float mk : maxes) m = std::max(m, mk);
    float l = 0.0f;
    std::fill(out, out + s.head_dim, 0.0f);
    for (size_t k = 0; k < maxes.size(); ++k) {
        const float f = kernels::exp_f32(maxes[k] - m);
        l += sums[k] * f;
        for (int64_t d = 0; d < s.head_dim; ++d) out[d] += accs[k * s.head_dim + d] * f;
    }
    const float inv = 1.0f / l;
    for (int64_t d = 0; d < s.head_dim; ++d) out[d] *= inv;
}

// The rows stored for a Fixture: row r (sequence view[r], position pos[r]) has K k[r], V v[r].
struct StoredRows {
    std::vector<float> k, v;
    std::vector<int32_t> view;
    std::vector<int64_t> pos;
};

struct Fixture {
    cuda::AttentionShape shape;
    std::vector<int64_t> lengths;  // tokens stored per sequence
    std::vector<std::unique_ptr<DeviceCache>> caches;
    std::unique_ptr<DeviceBuffer<cuda::KvBlocks>> views;

    // types[i]: sequence i's cache type (F16 where not given).
    Fixture(cuda::AttentionShape s, std::vector<int64_t> lens, std::vector<TensorType> types = {})
        : shape(s), lengths(std::move(lens)) {
        const int64_t elems = s.n_head_kv * s.head_dim;
        std::vector<cuda::KvBlocks> host_views;
        for (size_t i = 0; i < lengths.size(); ++i) {
            const TensorType type = i < types.size() ? types[i] : TensorType::F16;
            caches.push_back(std::make_unique<DeviceCache>(lengths[i], elems, type));
            host_views.push_back(caches.back()->view());
        }
        views = std::make_unique<DeviceBuffer<cuda::KvBlocks>>(host_views);
    }

    // Stores random K/V for every position of every sequence, in one kv_store call of all rows.
    StoredRows store(uint32_t seed) {
        StoredRows rows;
        const int64_t elems = shape.n_head_kv * shape.head_dim;
        for (size_t i = 0; i < lengths.size(); ++i) {
            for (int64_t p = 0; p < lengths[i]; ++p) {
                rows.view.push_back(static_cast<int32_t>(i));
                rows.pos.push_back(p);
            }
        }
        const auto n = static_cast<int64_t>(rows.pos.size());
        rows.k = gpu_test::random_floats(static_cast<size_t>(n * elems), -2.0f, 2.0f, seed);
        rows.v = gpu_test::random_floats(static_cast<size_t>(n * elems), -2.0f, 2.0f, seed + 1);
        DeviceBuffer<float> k_dev(rows.k), v_dev(rows.v);
        DeviceBuffer<int32_t> view_dev(rows.view);
        DeviceBuffer<int64_t> pos_dev(rows.pos);
        EXPECT_EQ(cudaSuccess, cuda::kv_store(views->get(), view_dev.get(), pos_dev.get(), k_dev.get(), elems,
                                              v_dev.get(), elems, n, elems, nullptr));
        EXPECT_EQ(cudaSuccess, cudaDeviceSynchronize());
        for (auto& c : caches) c->download();
        return rows;
    }

    std::vector<float> run(const std::vector<int32_t>& row_view, const std::vector<int64_t>& row_pos,
                           const std::vector<float>& q) {
        const auto n = static_cast<int64_t>(row_pos.size());
        const size_t bytes = cuda::attention_workspace_bytes(shape, row_pos.data(), n);
        DeviceBuffer<uint8_t> workspace(bytes);
        DeviceBuffer<int32_t> view_dev(row_view);
        DeviceBuffer<int64_t> pos_dev(row_pos);
        DeviceBuffer<float> q_dev(q), out_dev(q.size());
        EXPECT_EQ(cudaSuccess, cuda::attention(shape, views->get(), view_dev.get(), pos_dev.get(), row_pos.data(), n,
                                               q_dev.get(), out_dev.get(), workspace.get(), bytes, nullptr));
        EXPECT_EQ(cudaSuccess, cudaDeviceSynchronize());
        return out_dev.download();
    }
};

// n f32 values as the CPU stores them in a cache of `type`: fp32_to_fp16, as is, or quantize_row_q8_0.
std::vector<uint8_t> cpu_encoded(TensorType type, const float* x, int64_t n) {
    std::vector<uint8_t> out(kernels::kv_row_offset(type, n));
    if (type == TensorType::Q8_0) {
        quantize_row_q8_0(x, out.data(), n);
    } else if (type == TensorType::F32) {
        std::memcpy(out.data(), x, static_cast<size_t>(n) * 4);
    } else {
        for (int64_t i = 0; i < n; ++i) {
            const uint16_t h = fp32_to_fp16(x[i]);
            std::memcpy(out.data() + 2 * i, &h, 2);
        }
    }
    return out;
}

const char* kv_name(TensorType type) {
    return type == TensorType::F16 ? "f16" : (type == TensorType::F32 ? "f32" : "q8_0");
}

TEST(GpuKvStore, EveryCacheTypeBitwiseTheCpuIncludingSpecialValues) {
    KVSTASH_REQUIRE_GPU();
    const int64_t elems = 2 * 64;
    // Three sequences of the three cache types, stored in one call.
    Fixture f({4, 2, 64, 0.125f, 0}, {70, 33, 40}, {TensorType::F16, TensorType::F32, TensorType::Q8_0});
    const StoredRows rows = f.store(9);
    for (size_t r = 0; r < rows.pos.size(); ++r) {
        const DeviceCache& c = *f.caches[rows.view[r]];
        SCOPED_TRACE(kv_name(c.type));
        const std::vector<uint8_t> want_k = cpu_encoded(c.type, rows.k.data() + r * elems, elems);
        const std::vector<uint8_t> want_v = cpu_encoded(c.type, rows.v.data() + r * elems, elems);
        ASSERT_EQ(0, std::memcmp(want_k.data(), c.k_host.data() + rows.pos[r] * c.row_bytes, want_k.size())) << r;
        ASSERT_EQ(0, std::memcmp(want_v.data(), c.v_host.data() + rows.pos[r] * c.row_bytes, want_v.size())) << r;
    }
    // Special values at position 0 of each sequence.
    const float inf = std::numeric_limits<float>::infinity();
    std::vector<float> special(static_cast<size_t>(elems), 0.0f);
    const float values[] = {65504.0f, 65520.0f, -65536.0f, inf,   -inf,    std::nanf("0x123"), 6.1e-5f, 5.96e-8f,
                            2.98e-8f, 2.99e-8f, 1e-9f,     -0.0f, 1.0005f, 0.33333334f,        -2.5e-7f};
    std::copy(std::begin(values), std::end(values), special.begin());
    for (int64_t i = 32; i < elems; ++i) special[i] = 1e-3f * static_cast<float>(i % 7) - 2.5e-3f;  // ties for q8_0
    for (int32_t seq = 0; seq < 3; ++seq) {
        DeviceBuffer<float> s_dev(special);
        DeviceBuffer<int32_t> v0(std::vector<int32_t>{seq});
        DeviceBuffer<int64_t> p0(std::vector<int64_t>{0});
        KVSTASH_CUDA_OK(cuda::kv_store(f.views->get(), v0.get(), p0.get(), s_dev.get(), elems, s_dev.get(), elems, 1,
                                       elems, nullptr));
        KVSTASH_CUDA_OK(cudaDeviceSynchronize());
        DeviceCache& c = *f.caches[seq];
        c.download();
        const std::vector<uint8_t> want = cpu_encoded(c.type, special.data(), elems);
        EXPECT_EQ(0, std::memcmp(want.data(), c.k_host.data(), want.size())) << kv_name(c.type);
        EXPECT_EQ(0, std::memcmp(want.data(), c.v_host.data(), want.size())) << kv_name(c.type);
    }
}

void expect_reference(Fixture& f, const std::vector<int32_t>& row_view, const std::vector<int64_t>& row_pos,
                      const std::vector<float>& q, const std::vector<float>& got) {
    const int64_t width = f.shape.n_head * f.shape.head_dim;
    std::vector<float> want(static_cast<size_t>(f.shape.head_dim));
    for (size_t r = 0; r < row_pos.size(); ++r) {
        for (int64_t h = 0; h < f.shape.n_head; ++h) {
            reference_head(f.shape, *f.caches[row_view[r]], q.data() + r * width + h * f.shape.head_dim, row_pos[r], h,
                           want.data());
            ASSERT_TRUE(gpu_test::same_bits(got.data() + r * width + h * f.shape.head_dim, want.data(),
                                            static_cast<size_t>(f.shape.head_dim)))
                << "row " << r << " (sequence " << row_view[r] << ", position " << row_pos[r] << ") head " << h;
        }
    }
}

TEST(GpuAttention, BitwiseTheCpuScalarPathAcrossChunksAndSequences) {
    KVSTASH_REQUIRE_GPU();
    for (TensorType type : {TensorType::F16, TensorType::F32, TensorType::Q8_0}) {
        for (int64_t window : {int64_t{0}, int64_t{300}}) {
            SCOPED_TRACE(std::string(kv_name(type)) + " window " + std::to_string(window));
            Fixture f({8, 2, 128, 1.0f / std::sqrt(128.0f), window}, {800, 260}, {type, type});
            f.store(13);
            const std::vector<int32_t> row_view = {0, 0, 0, 0, 0, 0, 0, 1, 1, 1};
            const std::vector<int64_t> row_pos = {0, 1, 255, 256, 257, 511, 799, 0, 255, 259};
            const std::vector<float> q = gpu_test::random_floats(row_pos.size() * 8 * 128, -1.0f, 1.0f, 17);
            expect_reference(f, row_view, row_pos, q, f.run(row_view, row_pos, q));
        }
    }
}

// One query row's output bits alone equal its bits among 1..256 rows of mixed positions, sequences and cache
// types (an f16 and a q8_0 sequence in the same calls).
TEST(GpuAttention, BatchInvariantFrom1To256Rows) {
    KVSTASH_REQUIRE_GPU();
    Fixture f({12, 4, 64, 0.125f, 0}, {600, 300}, {TensorType::F16, TensorType::Q8_0});
    f.store(19);
    const int64_t width = 12 * 64, all = 256;
    std::vector<int32_t> row_view(all);
    std::vector<int64_t> row_pos(all);
    for (int64_t r = 0; r < all; ++r) {
        row_view[r] = static_cast<int32_t>(r % 3 == 2);
        row_pos[r] = row_view[r] == 0 ? (r * 37) % 600 : (r * 11) % 300;
    }
    const std::vector<float> q = gpu_test::random_floats(static_cast<size_t>(all * width), -1.0f, 1.0f, 23);
    const std::vector<float> full = f.run(row_view, row_pos, q);
    expect_reference(f, row_view, row_pos, q, full);
    for (int64_t offset : {0, 5, 100}) {
        for (int64_t n : {1, 2, 3, 8, 31, 64, 150, 256}) {
            if (offset + n > all) continue;
            const std::vector<int32_t> v(row_view.begin() + offset, row_view.begin() + offset + n);
            const std::vector<int64_t> p(row_pos.begin() + offset, row_pos.begin() + offset + n);
            const std::vector<float> qs(q.begin() + offset * width, q.begin() + (offset + n) * width);
            const std::vector<float> part = f.run(v, p, qs);
            ASSERT_TRUE(gpu_test::same_bits(part.data(), full.data() + offset * width, static_cast<size_t>(n * width)))
                << "batch of " << n << " rows from row " << offset;
        }
    }
}

TEST(GpuAttention, RefusesBadShapes) {
    KVSTASH_REQUIRE_GPU();
    const int64_t pos = 3;
    for (cuda::AttentionShape s : {cuda::AttentionShape{6, 4, 64, 1.0f, 0}, cuda::AttentionShape{4, 4, 512, 1.0f, 0}}) {
        EXPECT_EQ(cudaErrorInvalidValue,
                  cuda::attention(s, nullptr, nullptr, nullptr, &pos, 1, nullptr, nullptr, nullptr, 0, nullptr));
    }
}

}  // namespace
}  // namespace kvstash
