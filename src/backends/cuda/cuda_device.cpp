// The CUDA device's identity and memory for KV blocks (backends/cuda/cuda_backend.h), and CUDA errors as
// kvstash errors (backends/cuda/cuda_device_memory.h). Not yet run on a GPU (docs/cuda.md).
#include <cuda_runtime.h>

#include <string>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_device_memory.h"
#include "backends/cuda/cuda_ops.cuh"
#include "kvstash/error.h"

namespace kvstash {

void check_cuda(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return;
    (void)cudaGetLastError();  // clear a non-sticky error so that later calls report their own
    if (e == cudaErrorMemoryAllocation) {
        throw Error(ErrorCode::out_of_range, std::string("the GPU is out of memory (") + what +
                                                 "): use a smaller model, context or batch, or --device cpu");
    }
    throw Error(ErrorCode::internal, std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e));
}

int cuda_device_count() { return cuda::device_count(); }

int cuda_compute_capability() {
    if (cuda_device_count() == 0) return 0;
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return p.major * 10 + p.minor;
}

std::string cuda_device_description() {
    if (cuda_device_count() == 0) return {};
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) {
        (void)cudaGetLastError();
        return {};
    }
    return std::string(p.name) + " (sm_" + std::to_string(p.major * 10 + p.minor) + ", " +
           std::to_string(p.totalGlobalMem >> 30) + " GiB)";
}

namespace {

// KV blocks in device memory. Block copies (copy-on-write) stay on the device; the staging path
// (kv/kv_block_staging.h: state files, prefix-cache tiers, checksums) goes through to_host / from_host.
// Copies ordered by whole-device synchronisation on both sides: the backend's stream is non-blocking (it
// does not wait for the legacy default stream, nor the default stream for it), and a device-to-device
// cudaMemcpy returns before it is done, so each copy waits for every kernel before it and is waited for.
class CudaKvAllocator final : public KvBlockAllocator {
public:
    MemorySpace space() const override { return MemorySpace::device; }
    uint8_t* allocate(size_t bytes) override {
        void* p = nullptr;
        check_cuda(cudaMalloc(&p, bytes), "allocating a KV block");  // 256-byte aligned
        return static_cast<uint8_t*>(p);
    }
    void release(uint8_t* p, size_t /*bytes*/) noexcept override { cudaFree(p); }
    void copy(uint8_t* dst, const uint8_t* src, size_t n) override { transfer(dst, src, n, cudaMemcpyDeviceToDevice); }
    void to_host(uint8_t* host, const uint8_t* src, size_t n) override {
        transfer(host, src, n, cudaMemcpyDeviceToHost);
    }
    void from_host(uint8_t* dst, const uint8_t* host, size_t n) override {
        transfer(dst, host, n, cudaMemcpyHostToDevice);
    }

private:
    static void transfer(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
        check_cuda(cudaDeviceSynchronize(), "waiting for the kernels before a KV block copy");
        check_cuda(cudaMemcpy(dst, src, n, kind), "copying a KV block");
        check_cuda(cudaDeviceSynchronize(), "finishing a KV block copy");
    }
};

}  // namespace

KvBlockAllocator& cuda_kv_allocator() {
    static CudaKvAllocator allocator;
    return allocator;
}

}  // namespace kvstash
