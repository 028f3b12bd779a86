// The Mamba kernels' scalar reference (backends/cpu/ssm/ssm.h): the header's formulas, one rounding per written
// operation, which every ISA reproduces bit for bit. Also the two helpers every ISA shares (softplus and
// the conv window update), compiled here once for the baseline.
#pragma GCC optimize("fp-contract=off")  // the float steps exactly as written

#include <cmath>
#include <cstring>

#include "backends/cpu/exp/exp_f32.h"
#include "backends/cpu/ssm/ssm.h"

namespace kvstash::kernels {

namespace {
constexpr int kScanLanes = 16;  // the fixed partial sums of the reduction over d_state (ssm.h)

// in(i)[c] of ssm.h: x row i for i >= 0, window row d_conv - 1 + i before that.
inline float conv_input(const SsmConvArgs& a, int64_t i, int64_t c) {
    return i >= 0 ? a.x[i * a.x_stride + c] : a.window[(a.d_conv - 1 + i) * a.channels + c];
}
}  // namespace

float ssm_softplus_given_exp(float dt, float exp_dt) { return dt > 20.0f ? dt : std::log1p(exp_dt); }

float ssm_softplus(float dt) { return ssm_softplus_given_exp(dt, exp_f32(dt)); }

void ssm_conv_update_window(const SsmConvArgs& a, int64_t channel_begin, int64_t channel_end) {
    // New row j = in(n_tokens - d_conv + 1 + j). When that is still a window row it is old row
    // j + n_tokens, below row j: rows are rewritten in increasing j, so each is read before it changes.
    const int64_t rows = a.d_conv - 1;
    const size_t bytes = static_cast<size_t>(channel_end - channel_begin) * sizeof(float);
    for (int64_t j = 0; j < rows; ++j) {
        const int64_t i = a.n_tokens - rows + j;
        const float* src =
            i >= 0 ? a.x + i * a.x_stride + channel_begin : a.window + (rows + i) * a.channels + channel_begin;
        float* dst = a.window + j * a.channels + channel_begin;
        if (src != dst) std::memmove(dst, src, bytes);
    }
}

namespace reference {

void ssm_conv(const SsmConvArgs& a, int64_t channel_begin, int64_t channel_end) {
    for (int64_t c = channel_begin; c < channel_end; ++c) {
        const float* w = a.weight + c * a.d_conv;
        for (int64_t t = 0; t < a.n_tokens; ++t) {
            const int64_t first = t - a.d_conv + 1;
            float acc = conv_input(a, first, c) * w[0];
            for (int64_t k = 1; k < a.d_conv; ++k) acc = acc + conv_input(a, first + k, c) * w[k];
            if (a.bias) acc = acc + a.bias[c];
            a.out[t * a.out_stride + c] = acc / (1.0f + exp_f32(-acc));
        }
    }
    ssm_conv_update_window(a, channel_begin, channel_end);
}

void ssm_scan(const SsmScanArgs& a, int64_t head_begin, int64_t head_end) {
    const int64_t heads_per_group = a.n_head / a.n_group;
    for (int64_t t = 0; t < a.n_tokens; ++t) {
        for (int64_t h = head_begin; h < head_end; ++h) {
            const int64_t g = h / heads_per_group;
            const float dts = ssm_softplus(a.dt[t * a.dt_stride + h]);
            const float* B = a.B + t * a.B_stride + g * a.d_state;
            const float* C = a.C + t * a.C_stride + g * a.d_state;
            for (int64_t i = 0; i < a.head_dim; ++i) {
                const int64_t channel = h * a.head_dim + i;
                const float x = a.x[t * a.x_stride + channel];
                const float xdt = x * dts;
                float* state = a.state + channel * a.d_state;
                float partial[kScanLanes] = {};
                for (int64_t s = 0; s < a.d_state; ++s) {
                    const float decay = a.per_state_decay ? a.A[h * a.d_state + s] : a.A[h];
                    const float dA = exp_f32(dts * decay);
                    state[s] = state[s] * dA + B[s] * xdt;
                    partial[s % kScanLanes] = partial[s % kScanLanes] + state[s] * C[s];
                }
                for (int width = kScanLanes / 2; width >= 1; width /= 2) {
                    for (int j = 0; j < width; ++j) partial[j] = partial[j] + partial[j + width];
                }
                float y = partial[0];
                if (a.D) y = y + x * a.D[h];
                a.y[t * a.y_stride + channel] = y;
            }
        }
    }
}

}  // namespace reference
}  // namespace kvstash::kernels
