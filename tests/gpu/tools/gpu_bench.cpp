// Kernel timings on the GPU (no assertions; scripts/gpu_check.sh writes them to bench.txt): the dequantizing
// matmul at Llama 3.1 8B's projection shapes for each weight type, single-token (decode) and 512-token
// (prefill), with the weight bytes read per second and the arithmetic rate; attention decode at 8K context.
// CUDA events around 10 runs after 2 warm-ups, the mean per run. Numbers to find where time goes, not results
// for docs/benchmarks.md (those come from the whole forward pass, issue 29 item 6).
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "backends/cuda/cuda_ops.cuh"
#include "gpu_test_support.h"

namespace kvstash {
namespace {

using gpu_test::DeviceBuffer;

template <typename F>
float mean_ms(F&& run) {
    for (int i = 0; i < 2; ++i) run();
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    cudaEventRecord(start);
    const int runs = 10;
    for (int i = 0; i < runs; ++i) run();
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, start, stop);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    return ms / runs;
}

void bench_matmul() {
    std::printf("matmul (rows x cols, tokens): ms per call, weight GB/s, TFLOP/s\n");
    const int64_t shapes[][2] = {{4096, 4096}, {14336, 4096}, {4096, 14336}};
    for (TensorType type : gpu_test::gpu_weight_types()) {
        for (const auto& shape : shapes) {
            const int64_t rows = shape[0], cols = shape[1];
            const std::vector<uint8_t> w = gpu_test::random_weights(type, rows, cols, 1);
            DeviceBuffer<uint8_t> w_dev(w);
            for (int64_t tokens : {int64_t{1}, int64_t{512}}) {
                DeviceBuffer<float> x(static_cast<size_t>(tokens * cols)), y(static_cast<size_t>(tokens * rows));
                cudaMemset(x.get(), 0, static_cast<size_t>(tokens * cols) * sizeof(float));
                cuda::MatmulArgs a;
                a.type = type;
                a.W = w_dev.get();
                a.rows = rows;
                a.cols = cols;
                a.X = x.get();
                a.x_stride = cols;
                a.n_tokens = tokens;
                a.Y = y.get();
                a.y_stride = rows;
                const float ms = mean_ms([&] { cuda::matmul(a, nullptr); });
                const cudaError_t e = cudaDeviceSynchronize();
                std::printf("  %-5s %6lld x %6lld, %4lld tokens: %8.3f ms  %7.1f GB/s  %6.2f TFLOP/s%s\n",
                            tensor_type_name(static_cast<uint32_t>(type)).c_str(), static_cast<long long>(rows),
                            static_cast<long long>(cols), static_cast<long long>(tokens), ms,
                            static_cast<double>(w.size()) / (ms * 1e6), 2.0 * rows * cols * tokens / (ms * 1e9),
                            e == cudaSuccess ? "" : cudaGetErrorString(e));
            }
        }
    }
}

void bench_attention() {
    const int64_t context = 8192, n_head = 32, n_head_kv = 8, head_dim = 128, elems = n_head_kv * head_dim;
    const int64_t n_blocks = context / 32;
    std::vector<DeviceBuffer<uint8_t>*> blocks;
    std::vector<uint8_t*> k_ptrs, v_ptrs;
    for (int64_t b = 0; b < 2 * n_blocks; ++b) {
        blocks.push_back(new DeviceBuffer<uint8_t>(static_cast<size_t>(32 * elems * 2)));
        cudaMemset(blocks.back()->get(), 0, static_cast<size_t>(32 * elems) * 2);
        (b < n_blocks ? k_ptrs : v_ptrs).push_back(blocks.back()->get());
    }
    DeviceBuffer<uint8_t*> k_table(k_ptrs), v_table(v_ptrs);
    DeviceBuffer<cuda::KvBlocks> views(
        std::vector<cuda::KvBlocks>{{k_table.get(), v_table.get(), 32, elems * 2, TensorType::F16}});
    std::printf("attention decode, %lld keys, %lld heads (%lld KV), head_dim %lld: ms per call\n",
                static_cast<long long>(context), static_cast<long long>(n_head), static_cast<long long>(n_head_kv),
                static_cast<long long>(head_dim));
    for (int64_t rows : {int64_t{1}, int64_t{64}}) {
        const std::vector<int64_t> pos(static_cast<size_t>(rows), context - 1);
        const std::vector<int32_t> view(static_cast<size_t>(rows), 0);
        DeviceBuffer<int64_t> pos_dev(pos);
        DeviceBuffer<int32_t> view_dev(view);
        const cuda::AttentionShape s{n_head, n_head_kv, head_dim, 0.088f, 0};
        const size_t bytes = cuda::attention_workspace_bytes(s, pos.data(), rows);
        DeviceBuffer<uint8_t> ws(bytes);
        DeviceBuffer<float> q(static_cast<size_t>(rows * n_head * head_dim)),
            out(static_cast<size_t>(rows * n_head * head_dim));
        cudaMemset(q.get(), 0, static_cast<size_t>(rows * n_head * head_dim) * sizeof(float));
        const float ms = mean_ms([&] {
            cuda::attention(s, views.get(), view_dev.get(), pos_dev.get(), pos.data(), rows, q.get(), out.get(),
                            ws.get(), bytes, nullptr);
        });
        const cudaError_t e = cudaDeviceSynchronize();
        std::printf("  %3lld rows: %8.3f ms  (K+V %.1f GB/s per row)%s\n", static_cast<long long>(rows), ms,
                    2.0 * context * elems * 2 * rows / (ms * 1e6), e == cudaSuccess ? "" : cudaGetErrorString(e));
    }
    for (auto* b : blocks) delete b;
}

}  // namespace
}  // namespace kvstash

int main() {
    if (kvstash::cuda::device_count() == 0) {
        std::fprintf(stderr, "gpu_bench: no CUDA device: nothing measured\n");
        return 1;
    }
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, 0);
    std::printf("device: %s (%d SMs)\n", prop.name, prop.multiProcessorCount);
    kvstash::bench_matmul();
    kvstash::bench_attention();
    return 0;
}
