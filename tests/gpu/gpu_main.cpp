// The GPU tests' main: says loudly when there is no usable CUDA device (every test that needs one then
// skips), so that a run on a machine without a GPU cannot be mistaken for a GPU run.
#include <gtest/gtest.h>

#include <cstdio>

#include "backends/cuda/cuda_ops.cuh"

int main(int argc, char** argv) {
    testing::InitGoogleTest(&argc, argv);
    const int n = kvstash::cuda::device_count();
    if (n == 0) {
        std::fprintf(stderr,
                     "\n*** gpu_tests: NO CUDA DEVICE (no driver, no GPU, or the runtime failed): every test that "
                     "needs a GPU SKIPS (the DevicePortsOnTheHost tests run on the CPU). Nothing was checked on a "
                     "GPU. ***\n\n");
    } else {
        cudaDeviceProp prop{};
        cudaGetDeviceProperties(&prop, 0);
        std::fprintf(stderr, "gpu_tests: %d CUDA device(s); device 0: %s, compute capability %d.%d\n", n, prop.name,
                     prop.major, prop.minor);
    }
    return RUN_ALL_TESTS();
}
