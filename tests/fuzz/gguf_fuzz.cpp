// libFuzzer target for the GGUF reader: any input must either parse or raise kvstash::Error. Anything
// else (a crash, an out-of-bounds read, undefined behaviour, another exception type, a huge allocation)
// is a finding. After a successful parse, every accessor is exercised and every tensor's first and last
// byte is read, so a wrong bounds check surfaces as an ASan report. Run: tests/fuzz/run_gguf_fuzz.sh.
#include <cstddef>
#include <cstdint>

#include "format/gguf.h"
#include "kvstash/error.h"

namespace {

volatile uint64_t g_sink;  // keeps the reads below from being optimised away

void touch_value(const kvstash::gguf::Value& v) {
    g_sink = g_sink + v.uinteger + v.string.size() + static_cast<uint64_t>(v.real != 0.0);
    for (const auto& element : v.array) touch_value(element);
}

template <typename Call>
void ignore_errors(Call&& call) {
    try {
        call();
    } catch (const kvstash::Error&) {}
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using kvstash::gguf::File;
    std::unique_ptr<File> file;
    try {
        file = File::parse(data, size, "fuzz-input");
    } catch (const kvstash::Error&) {
        return 0;
    }
    g_sink = g_sink + file->version() + file->alignment() + file->data_offset();
    for (const auto& entry : file->metadata()) {
        const std::string& key = entry.first;  // not a structured binding: clang 14 cannot capture those
        touch_value(entry.second);
        if (file->find(key) == nullptr) __builtin_trap();
        ignore_errors([&] { (void)file->get_int(key); });
        ignore_errors([&] { (void)file->get_float(key); });
        ignore_errors([&] { (void)file->get_string(key); });
        ignore_errors([&] { (void)file->get_bool(key); });
        ignore_errors([&] { (void)file->get_array(key, kvstash::gguf::ValueType::STRING); });
    }
    for (const auto& tensor : file->tensors()) {
        if (file->find_tensor(tensor.name) != &tensor) __builtin_trap();
        const uint8_t* bytes = file->tensor_data(tensor);
        g_sink = g_sink + static_cast<uint64_t>(tensor.n_elements());
        if (tensor.n_bytes > 0) g_sink = g_sink + bytes[0] + bytes[tensor.n_bytes - 1];
    }
    return 0;
}
