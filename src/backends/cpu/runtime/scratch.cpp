// Growable scratch arrays (see scratch.h): compiled for the baseline instruction set on purpose.

#include "backends/cpu/runtime/scratch.h"

#include <cstdlib>
#include <new>

namespace kvstash::kernels {
namespace {

constexpr size_t kAlignment = 64;

}  // namespace

ScratchArray::ScratchArray() noexcept : data_(nullptr), capacity_(0) {}

ScratchArray::~ScratchArray() { std::free(data_); }

void* ScratchArray::reserve(size_t bytes) {
    if (bytes <= capacity_ && data_ != nullptr) return data_;
    // aligned_alloc wants a multiple of the alignment; never ask for 0 bytes.
    const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    const size_t size = rounded == 0 ? kAlignment : rounded;
    if (rounded < bytes) throw std::bad_alloc();  // overflow
    void* p = std::aligned_alloc(kAlignment, size);
    if (p == nullptr) throw std::bad_alloc();
    std::free(data_);
    data_ = p;
    capacity_ = size;
    return data_;
}

float* ScratchArray::floats(size_t count) {
    if (count > SIZE_MAX / sizeof(float)) throw std::bad_alloc();
    return static_cast<float*>(reserve(count * sizeof(float)));
}

int32_t* ScratchArray::ints(size_t count) {
    if (count > SIZE_MAX / sizeof(int32_t)) throw std::bad_alloc();
    return static_cast<int32_t*>(reserve(count * sizeof(int32_t)));
}

uint8_t* ScratchArray::bytes(size_t count) { return static_cast<uint8_t*>(reserve(count)); }

}  // namespace kvstash::kernels
