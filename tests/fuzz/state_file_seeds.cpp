// Writes the fuzz_state_file seed corpus: small valid state files of the tiny model the fuzzer loads
// (tests/fixtures/tiny/llama3_rope_f32.gguf) covering every section and option: empty, f16 and f32
// caches, a partly filled block after truncate, no logits, a sampler with logit_bias, q8_0, zstd; and
// states of the hybrid recurrent model (tests/fixtures/recurrent/granitehybrid_f32.gguf).
//   usage: fuzz_state_file_seeds <output directory>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kvstash/error.h"
#include "kvstash/evaluator.h"
#include "kvstash/model.h"
#include "kvstash/state.h"
#include "kvstash/state_file.h"
#include "state/state_file_format.h"

namespace {

void write(const std::string& dir, const std::string& name, const std::vector<uint8_t>& bytes) {
    std::ofstream out(dir + "/" + name, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!out) throw std::runtime_error("cannot write " + dir + "/" + name);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s <output directory>\n", argv[0]);
        return 2;
    }
    using namespace kvstash;
    namespace sf = state_file;
    const std::string dir = argv[1];
    std::filesystem::create_directories(dir);
    try {
        auto model = Model::load(KVSTASH_SOURCE_DIR "/tests/fixtures/tiny/llama3_rope_f32.gguf");
        Evaluator evaluator(model, 1);
        std::vector<int32_t> tokens;
        for (int i = 0; i < 40; ++i) tokens.push_back((i * 37 + 11) % static_cast<int32_t>(model->n_vocab()));

        write(dir, "empty.kvs", sf::encode_state_to_memory(State(*model, StateOptions{KvType::f16, 64})));

        State small(*model, StateOptions{KvType::f16, 64});
        evaluator.eval(small, std::span<const int32_t>(tokens.data(), 5));
        SamplerState sampler;
        sampler.params.logit_bias = {{1, -1.5f}, {7, 2.0f}};
        sampler.params.seed = 9;
        sampler.rng = {1, 2, 3, 4};
        small.set_sampler_state(sampler);
        write(dir, "f16_sampler.kvs", sf::encode_state_to_memory(small));
        write(dir, "f16_q8_0.kvs", sf::encode_state_to_memory(small, SaveOptions{.file_kv_type = KvType::q8_0}));
        write(dir, "f16_zstd.kvs", sf::encode_state_to_memory(small, SaveOptions{.compress = true}));

        State f32(*model, StateOptions{KvType::f32, 64});
        evaluator.eval(f32, std::span<const int32_t>(tokens.data(), 34));
        f32.truncate(33);  // no logits, stale rows in the last block
        write(dir, "f32_truncated.kvs", sf::encode_state_to_memory(f32));

        State repeated(*model, StateOptions{KvType::f16, 64});
        evaluator.eval(repeated, std::vector<int32_t>(36, 11));
        write(dir, "q8_0_zstd.kvs",
              sf::encode_state_to_memory(repeated, SaveOptions{.file_kv_type = KvType::q8_0, .compress = true}));

        // Format version 2's recurrent sections: a hybrid state with checkpoints and, after a
        // truncate, tokens waiting to be evaluated again.
        auto hybrid = Model::load(KVSTASH_SOURCE_DIR "/tests/fixtures/recurrent/granitehybrid_f32.gguf");
        Evaluator hybrid_evaluator(hybrid, 1);
        StateOptions options{KvType::f16, 64};
        options.checkpoint_interval = 8;
        State recurrent(*hybrid, options);
        hybrid_evaluator.eval(recurrent, std::span<const int32_t>(tokens.data(), 20));
        write(dir, "hybrid.kvs", sf::encode_state_to_memory(recurrent));
        recurrent.truncate(13);
        write(dir, "hybrid_pending.kvs", sf::encode_state_to_memory(recurrent));
        write(dir, "hybrid_pending_zstd_q8_0.kvs",
              sf::encode_state_to_memory(recurrent, SaveOptions{.file_kv_type = KvType::q8_0, .compress = true}));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "fuzz_state_file_seeds: %s\n", e.what());
        return 1;
    }
    return 0;
}
