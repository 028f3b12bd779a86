// The process's device (engine/device.h): --device / -ngl values, and what --device cuda says where it
// cannot be honoured (a build without CUDA, or no GPU). The GPU itself: tests/gpu/e2e (label gpu).
#include <gtest/gtest.h>

#include <string>

#include "backends/cpu/runtime/numerics.h"
#include "engine/device.h"
#include "kv/kv_block_allocator.h"
#include "kvstash/error.h"

namespace kvstash {
namespace {

TEST(DeviceChoice, NamesAndLayerCounts) {
    EXPECT_EQ(parse_device("cpu"), DeviceKind::cpu);
    EXPECT_EQ(parse_device("cuda"), DeviceKind::cuda);
    EXPECT_THROW(parse_device("tpu"), Error);
    EXPECT_EQ(device_from_gpu_layers(0), DeviceKind::cpu);
    EXPECT_EQ(device_from_gpu_layers(1), DeviceKind::cuda);
    EXPECT_EQ(device_from_gpu_layers(999), DeviceKind::cuda);
    EXPECT_THROW(device_from_gpu_layers(-1), Error);
}

TEST(DeviceChoice, CpuChangesNothing) {
    use_device(DeviceKind::cpu);
    EXPECT_EQ(process_device(), DeviceKind::cpu);
    EXPECT_EQ(process_device_description(), "cpu");
    EXPECT_EQ(&default_kv_allocator(), &host_kv_allocator());
    EXPECT_EQ(current_numerics(), numerics_of(active_isa()));
}

// Where this suite runs there is no GPU: --device cuda is refused with what is missing, and nothing of the
// process's choice changes.
TEST(DeviceChoice, CudaWithoutABuildOrAGpuSaysWhich) {
    try {
        use_device(DeviceKind::cuda);
        if (cuda_built()) GTEST_SKIP() << "a GPU is present: tests/gpu/e2e covers it";
        ADD_FAILURE() << "a build without CUDA accepted --device cuda";
    } catch (const Error& e) {
        const std::string what = e.what();
        EXPECT_EQ(e.code(), ErrorCode::unsupported);
        EXPECT_NE(what.find(cuda_built() ? "no CUDA device" : "built without CUDA"), std::string::npos) << what;
        EXPECT_NE(what.find("--device cpu"), std::string::npos) << what;
    }
    EXPECT_EQ(process_device(), DeviceKind::cpu);
    EXPECT_EQ(&default_kv_allocator(), &host_kv_allocator());
}

TEST(DeviceChoice, CudaNumericsPathsNameTheArchitecture) {
    const NumericsPath sm90 = cuda_numerics_path(90);
    EXPECT_TRUE(is_cuda_path(sm90));
    EXPECT_FALSE(is_cuda_path(NumericsPath::avx512_vnni));
    EXPECT_NE(sm90, cuda_numerics_path(89));
    EXPECT_EQ(describe(Numerics{kNumericsEpoch, sm90}), "epoch " + std::to_string(kNumericsEpoch) + ", cuda sm_90");
}

}  // namespace
}  // namespace kvstash
