// The Mamba kernels on aarch64: the one 16-lane definition (ssm_f32x16.h), the vector as four NEON registers.
#include "backends/cpu/ssm/ssm_f32x16.h"

namespace kvstash::kernels {

void ssm_conv_neon(const SsmConvArgs& args, int64_t channel_begin, int64_t channel_end) {
    simd::ssm_conv(args, channel_begin, channel_end);
}

void ssm_scan_neon(const SsmScanArgs& args, int64_t head_begin, int64_t head_end) {
    simd::ssm_scan(args, head_begin, head_end);
}

}  // namespace kvstash::kernels
