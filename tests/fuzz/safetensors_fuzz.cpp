// libFuzzer target for the safetensors reader: any input must either parse or raise kvstash::Error. After a
// successful parse every tensor's first and last byte is read and its size checked against shape × dtype, so
// a wrong bounds check surfaces as an ASan report or a trap. Run: tests/fuzz/run_safetensors_fuzz.sh.
#include <cstddef>
#include <cstdint>

#include "format/safetensors.h"
#include "kvstash/error.h"

namespace {
volatile uint64_t g_sink;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using kvstash::safetensors::File;
    std::unique_ptr<File> file;
    try {
        file = File::parse(data, size, "fuzz-input");
    } catch (const kvstash::Error&) {
        return 0;
    }
    for (const auto& [key, value] : file->metadata()) g_sink = g_sink + key.size() + value.size();
    for (const auto& tensor : file->tensors()) {
        if (file->find_tensor(tensor.name) == nullptr) __builtin_trap();
        const uint64_t element = tensor.type == kvstash::TensorType::F32 ? 4 : 2;
        if (static_cast<uint64_t>(tensor.n_elements()) * element != tensor.n_bytes) __builtin_trap();
        const uint8_t* bytes = file->tensor_data(tensor);
        if (bytes < data || bytes + tensor.n_bytes > data + size) __builtin_trap();
        if (tensor.n_bytes > 0) g_sink = g_sink + bytes[0] + bytes[tensor.n_bytes - 1];
    }
    return 0;
}
