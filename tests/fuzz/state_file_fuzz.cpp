// libFuzzer target for the state file reader: any input must either load (into the tiny model
// tests/fixtures/tiny/llama3_rope_f32.gguf or the hybrid tests/fixtures/recurrent/granitehybrid_f32.gguf,
// whose fingerprints the seeds carry; the latter reaches the recurrent and checkpoint sections of format
// version 2) or raise kvstash::Error.
// Anything else (a crash, an out-of-bounds read, undefined behaviour, another exception type, a huge
// allocation) is a finding. Each input is tried as is and again with its checksums recomputed, so that
// mutations also reach the code behind the checksums. A state that loads must save and load again, and
// re-saving that must give the same bytes. Run: tests/fuzz/run_state_fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvstash/error.h"
#include "kvstash/model.h"
#include "kvstash/state.h"
#include "state/state_file_format.h"

namespace {

namespace sf = kvstash::state_file;

volatile uint64_t g_sink;

const kvstash::Model& fuzz_model() {
    static const std::shared_ptr<const kvstash::Model> model =
        kvstash::Model::load(KVSTASH_SOURCE_DIR "/tests/fixtures/tiny/llama3_rope_f32.gguf");
    return *model;
}

const kvstash::Model& fuzz_hybrid_model() {
    static const std::shared_ptr<const kvstash::Model> model =
        kvstash::Model::load(KVSTASH_SOURCE_DIR "/tests/fixtures/recurrent/granitehybrid_f32.gguf");
    return *model;
}

void try_input(std::span<const uint8_t> bytes) {
    try {
        const kvstash::StateFileInfo info = sf::inspect_state_bytes(bytes, "fuzz-input", kvstash::Checksums::verify);
        g_sink = g_sink + info.file_bytes + info.kv_bytes + static_cast<uint64_t>(info.n_tokens);
    } catch (const kvstash::Error&) {}
    for (const kvstash::Model* model : {&fuzz_model(), &fuzz_hybrid_model()}) {
        try {
            const kvstash::State state = sf::decode_state(*model, bytes, "fuzz-input");
            g_sink = g_sink + static_cast<uint64_t>(state.n_tokens()) + state.last_logits().size();
            // What loaded is a valid state: it must save, and its copy must load and save identically.
            const std::vector<uint8_t> again = sf::encode_state_to_memory(state);
            const std::vector<uint8_t> twice = sf::encode_state_to_memory(sf::decode_state(*model, again, "re-saved"));
            if (again != twice) __builtin_trap();
        } catch (const kvstash::Error&) {}
    }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    (void)fuzz_model();
    (void)fuzz_hybrid_model();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try_input({data, size});
    std::vector<uint8_t> fixed(data, data + size);
    sf::rewrite_checksums(fixed);
    try_input(fixed);
    return 0;
}
