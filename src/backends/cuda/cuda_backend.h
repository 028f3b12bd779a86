// The CUDA backend (docs/cuda.md): the forward pass's ops (model/backend.h) on the kernels of
// backends/cuda/cuda_ops.cuh, weights copied to the device when a model is bound, activations and KV blocks
// in device memory. Host C++ (compiled by the host compiler into the library only with -DKVSTASH_CUDA=ON;
// the library's glob leaves this directory out otherwise). The Llama family (llama, qwen2 and the other
// RMSNorm + SwiGLU + RoPE transformers) only: everything else is refused by name at bind time.
#pragma once

#include <memory>
#include <string>

#include "kv/kv_block_allocator.h"
#include "model/backend.h"

namespace kvstash {

// Usable CUDA devices (0 without a driver or a device; never throws).
int cuda_device_count();
// Device 0's compute capability as major × 10 + minor (90 for an H100 / H200); 0 without a device.
int cuda_compute_capability();
// "NVIDIA H200 (sm_90, 139 GiB)"; empty without a device.
std::string cuda_device_description();

// KV blocks in device memory (cudaMalloc / cudaFree, copies with cudaMemcpy). The process's one instance.
KvBlockAllocator& cuda_kv_allocator();

// A backend on device 0. Throws Error(unsupported) when there is no usable device.
std::unique_ptr<Backend> make_cuda_backend();

}  // namespace kvstash
