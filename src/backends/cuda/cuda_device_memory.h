// Device memory for the CUDA backend's host code: an owning buffer that only grows, and the one way a
// CUDA runtime error becomes a kvstash::Error (naming the operation and the runtime's message).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <utility>

namespace kvstash {

// Throws Error(internal) "CUDA error in <what>: <cudaGetErrorString>" unless e is cudaSuccess; an
// out-of-memory error is Error(out_of_range) with what to do.
void check_cuda(cudaError_t e, const char* what);

template <class T>
size_t bytes_of(int64_t n) {
    return static_cast<size_t>(n) * sizeof(T);
}

// cudaMalloc'd bytes, grown (contents dropped) by reserve; never shrinks. Move-only.
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    ~DeviceBuffer() { release(); }
    DeviceBuffer(DeviceBuffer&& o) noexcept
        : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
        if (this != &o) {
            release();
            data_ = std::exchange(o.data_, nullptr);
            size_ = std::exchange(o.size_, 0);
        }
        return *this;
    }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    // At least `bytes` (> 0 allocates; the old contents are gone when it grows).
    void reserve(size_t bytes) {
        if (bytes <= size_) return;
        release();
        check_cuda(cudaMalloc(&data_, bytes), "cudaMalloc");
        size_ = bytes;
    }
    void* data() const { return data_; }
    size_t size() const { return size_; }

private:
    void release() noexcept {
        if (data_ != nullptr) cudaFree(data_);
        data_ = nullptr;
        size_ = 0;
    }
    void* data_ = nullptr;
    size_t size_ = 0;
};

}  // namespace kvstash
