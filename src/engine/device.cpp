// The process's device (engine/device.h).
#include "engine/device.h"

#include <atomic>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/runtime/numerics.h"
#include "kv/kv_block_allocator.h"
#include "kvstash/error.h"
#ifdef KVSTASH_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

namespace kvstash {
namespace {
std::atomic<DeviceKind> chosen{DeviceKind::cpu};
}  // namespace

DeviceKind parse_device(std::string_view name) {
    if (name == "cpu") return DeviceKind::cpu;
    if (name == "cuda" || name == "gpu") return DeviceKind::cuda;
    throw Error(ErrorCode::invalid_argument, "--device " + std::string(name) + ": expected cpu or cuda");
}

DeviceKind device_from_gpu_layers(int n_gpu_layers) {
    if (n_gpu_layers < 0) {
        throw Error(ErrorCode::invalid_argument,
                    "-ngl " + std::to_string(n_gpu_layers) + ": expected 0 (CPU) or more (the whole model on the GPU)");
    }
    return n_gpu_layers == 0 ? DeviceKind::cpu : DeviceKind::cuda;
}

bool cuda_built() {
#ifdef KVSTASH_HAVE_CUDA
    return true;
#else
    return false;
#endif
}

void use_device(DeviceKind device) {
    if (device == DeviceKind::cpu) return;
#ifdef KVSTASH_HAVE_CUDA
    if (cuda_device_count() == 0) {
        throw Error(ErrorCode::unsupported,
                    "--device cuda: no CUDA device is usable here (no NVIDIA driver, no GPU, or CUDA_VISIBLE_DEVICES "
                    "hides them); use --device cpu");
    }
    set_default_kv_allocator(cuda_kv_allocator());
    set_process_numerics_path(cuda_numerics_path(cuda_compute_capability()));
    chosen.store(DeviceKind::cuda);
#else
    throw Error(ErrorCode::unsupported,
                "--device cuda: this kvstash was built without CUDA; rebuild with cmake -DKVSTASH_CUDA=ON "
                "(README, \"GPU (CUDA)\") or use --device cpu");
#endif
}

DeviceKind process_device() { return chosen.load(); }

std::string process_device_description() {
#ifdef KVSTASH_HAVE_CUDA
    if (process_device() == DeviceKind::cuda) return "cuda: " + cuda_device_description();
#endif
    return "cpu";
}

std::unique_ptr<Backend> make_process_backend(int n_threads) {
#ifdef KVSTASH_HAVE_CUDA
    if (process_device() == DeviceKind::cuda) return make_cuda_backend();
#endif
    return make_cpu_backend(n_threads);
}

}  // namespace kvstash
