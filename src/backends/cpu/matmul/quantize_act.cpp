// Per-row 16-bit (two int8 planes) quantization of activations (see quantize_act.h).
#pragma GCC optimize("fp-contract=off")  // the scale and products exactly as written

#include "backends/cpu/matmul/quantize_act.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/runtime/thread_pool.h"

namespace kvstash::kernels {

QuantizedActivations::QuantizedActivations() = default;
QuantizedActivations::~QuantizedActivations() = default;
QuantizedActivations::QuantizedActivations(const QuantizedActivations&) = default;
QuantizedActivations& QuantizedActivations::operator=(const QuantizedActivations&) = default;
QuantizedActivations::QuantizedActivations(QuantizedActivations&&) noexcept = default;
QuantizedActivations& QuantizedActivations::operator=(QuantizedActivations&&) noexcept = default;

bool uses_integer_activations(TensorType type) { return has_integer_path(type); }

bool has_integer_path(TensorType type) {
    if (type == kTensorTypeQ5_0) return true;  // the scalar and AVX2 kernels (backends/cpu/matmul/matmul.h)
    switch (type) {
        case TensorType::Q4_0:
        case TensorType::Q4_1:
        case TensorType::Q8_0:
        case TensorType::Q4_K:
        case TensorType::Q5_K:
        case TensorType::Q6_K: return true;
        case TensorType::F32:
        case TensorType::F16:
        case TensorType::BF16: return false;
    }
    return false;
}

int64_t activation_block(TensorType type) { return tensor_type_traits(type).block_size == 256 ? 256 : 32; }

void quantize_activations(const float* X, int64_t n_tokens, int64_t cols, int64_t block, QuantizedActivations& out,
                          ThreadPool* pool, QuantizeRowFn row_fn) {
    out.n_tokens = n_tokens;
    out.cols = cols;
    out.block = block;
    const auto n = static_cast<size_t>(n_tokens);
    auto fit = [n](auto& v, int64_t per_row) {
        if (v.size() < n * static_cast<size_t>(per_row)) v.resize(n * static_cast<size_t>(per_row));
    };
    fit(out.h, cols);
    fit(out.l, cols);
    fit(out.q, cols);
    fit(out.d, cols / block);
    fit(out.h32, cols / 32);
    fit(out.l32, cols / 32);
    fit(out.h16, cols / 16);
    fit(out.l16, cols / 16);
    auto one = [&](int64_t t) {
        row_fn(X + t * cols, cols, block, out.h.data() + t * cols, out.l.data() + t * cols,
               out.d.data() + t * (cols / block), out.h32.data() + t * (cols / 32), out.l32.data() + t * (cols / 32),
               out.h16.data() + t * (cols / 16), out.l16.data() + t * (cols / 16));
        const int8_t* h = out.h.data() + t * cols;
        const int8_t* l = out.l.data() + t * cols;
        int16_t* q = out.q.data() + t * cols;
        for (int64_t i = 0; i < cols; ++i) q[i] = static_cast<int16_t>(256 * h[i] + l[i]);  // exact: |q| <= 32639
    };
    constexpr int64_t kTokensPerTask = 16;
    if (pool == nullptr || pool->n_threads() <= 1 || n_tokens < 2 * kTokensPerTask) {
        for (int64_t t = 0; t < n_tokens; ++t) one(t);
        return;
    }
    const int64_t n_tasks = (n_tokens + kTokensPerTask - 1) / kTokensPerTask;
    pool->run(n_tasks, [&](int64_t task) {
        for (int64_t t = task * kTokensPerTask; t < std::min(n_tokens, (task + 1) * kTokensPerTask); ++t) one(t);
    });
}

void copy_activation_rows(const QuantizedActivations& from, int64_t t0, int64_t n, QuantizedActivations& to) {
    to.n_tokens = n;
    to.cols = from.cols;
    to.block = from.block;
    auto copy = [&](const auto& src, auto& dst, int64_t per_row) {
        const auto begin = src.begin() + t0 * per_row;
        dst.assign(begin, begin + n * per_row);
    };
    copy(from.h, to.h, from.cols);
    copy(from.l, to.l, from.cols);
    copy(from.q, to.q, from.cols);
    copy(from.d, to.d, from.cols / from.block);
    copy(from.h32, to.h32, from.cols / 32);
    copy(from.l32, to.l32, from.cols / 32);
    copy(from.h16, to.h16, from.cols / 16);
    copy(from.l16, to.l16, from.cols / 16);
}

}  // namespace kvstash::kernels
