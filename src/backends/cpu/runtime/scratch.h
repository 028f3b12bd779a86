// Growable per-thread scratch arrays for the kernel files compiled for one instruction set.
//
// Why those files do not use std::vector: a file compiled with -mavx512f (or -mavx2) that instantiates
// an out-of-line member of std::vector<float> (resize's _M_default_append, the destructor) emits it as
// a weak symbol built for that instruction set. The linker keeps one copy of each weak symbol for the
// whole program, possibly that one, and plain code elsewhere then dies with SIGILL on a machine without
// the extension. Every member here is defined in scratch.cpp, compiled for the baseline, so a kernel
// file using ScratchArray emits nothing shared. scripts/check_isa_symbols.sh (ctest
// unit.check_isa_symbols) checks that no instruction-set file defines a weak symbol.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvstash::kernels {

class ScratchArray {
public:
    ScratchArray() noexcept;
    ~ScratchArray();
    ScratchArray(const ScratchArray&) = delete;
    ScratchArray& operator=(const ScratchArray&) = delete;

    // At least `count` elements, 64-byte aligned. The contents are kept while the array does not grow
    // and unspecified after it grows: callers write before they read.
    float* floats(size_t count);
    int32_t* ints(size_t count);
    uint8_t* bytes(size_t count);

private:
    void* reserve(size_t bytes);

    void* data_;
    size_t capacity_;
};

}  // namespace kvstash::kernels
