// Which device the process's forward passes run on (--device cpu|cuda, -ngl N): chosen once, before any
// model is evaluated or any State is made, because a State's KV blocks live in the chosen device's memory
// (kv/kv_block_allocator.h) and its numerics are that device's (backends/cpu/runtime/numerics.h).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "model/backend.h"

namespace kvstash {

enum class DeviceKind { cpu, cuda };

// "cpu" or "cuda"; anything else is Error(invalid_argument) naming the accepted values.
DeviceKind parse_device(std::string_view name);
// llama.cpp's -ngl N (layers offloaded): 0 keeps the CPU; N > 0 (any N: kvstash puts the whole model on one
// device, never a split) means cuda.
DeviceKind device_from_gpu_layers(int n_gpu_layers);

// Whether this build has the CUDA backend (-DKVSTASH_CUDA=ON).
bool cuda_built();

// Chooses the device for the whole process. cuda: Error(unsupported) when kvstash was built without CUDA
// or no GPU is usable, saying what to do; then new States keep their KV blocks in device memory and
// current_numerics() names the GPU's architecture. cpu: nothing changes. Call before loading states.
void use_device(DeviceKind device);
DeviceKind process_device();
// "cpu", "cuda: NVIDIA H200 (sm_90, 139 GiB)".
std::string process_device_description();

// A backend on the process's device (evaluator.cpp): the CPU's with n_threads workers, or the GPU's.
std::unique_ptr<Backend> make_process_backend(int n_threads);

}  // namespace kvstash
