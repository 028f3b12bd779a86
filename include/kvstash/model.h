// kvstash public API: a model loaded from a GGUF file, immutable and shared.
//
//   auto model = kvstash::Model::load("models/SmolLM2-135M-Instruct.Q4_1.gguf");
//   kvstash::State state(*model);                    // state.h: empty sequence, f16 KV cache
//   kvstash::Evaluator eval(model, /*n_threads=*/2);  // evaluator.h
//   eval.eval(state, tokens);                        // prefill: appends tokens, computes logits
//   std::span<const float> next = state.last_logits();  // n_vocab logits of the last position
//
// The model is immutable and may be shared by any number of states and evaluators. The logits at
// position i are a function of tokens[0..i] only, bitwise, however the tokens were split across eval()
// calls and whatever the thread count.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvstash/error.h"

namespace kvstash {

class Tokenizer;

// The shape of a model, as read from its metadata (what callers size buffers and report with).
struct ModelInfo {
    std::string architecture;  // general.architecture, e.g. "llama"
    std::string name;          // general.name (informational)
    int64_t n_layer = 0;
    int64_t n_embd = 0;
    int64_t n_head = 0;
    int64_t n_head_kv = 0;  // < n_head: grouped-query attention
    int64_t head_dim = 0;
    int64_t n_vocab = 0;
    int64_t n_ctx_train = 0;
    // Layers with an attention KV cache (all of a Llama model's; none of a Mamba model's) and layers
    // with a fixed-size recurrent state (Mamba blocks).
    int64_t n_kv_layers = 0;
    int64_t n_recurrent_layers = 0;
    uint64_t recurrent_state_bytes = 0;  // per sequence: every recurrent layer's conv window + SSM state (f32)

    int64_t n_embd_kv() const { return n_head_kv * head_dim; }  // K or V width per token and layer
};

// Weights quantized at load, for a Hugging Face model directory (a GGUF keeps its own types): none; q8_0 as
// llama.cpp's converter's --outtype q8_0 (matrices whose rows are not whole 32-blocks become f16, as there); q4_K
// with ggml's q4_K quantizer (the bytes of llama-quantize without an importance matrix) for every matrix whose
// rows are whole 256-blocks, the q8_0 rule for the others (llama-quantize would pick q5_0 there).
enum class LoadQuantization { none, q8_0, q4_K };

// How far the long part of a load has come: today the copy of the weights repacked for the CPU's prefill tiles
// (seconds on an 8B model: `kvstash info` says "repacked: ... made in S s"); `what` names it, `done` and `total`
// count its bytes.
struct LoadProgress {
    std::string_view what;
    uint64_t done = 0;
    uint64_t total = 0;
};

struct ModelLoadOptions {
    LoadQuantization quantize = LoadQuantization::none;
    // Threads for the work of a load (the repacking); 0: one per hardware thread. No bit depends on it.
    int n_threads = 0;
    // Called on the loading thread about 5 times a second while that work runs, and once when it is done
    // (done == total); not called where there is none (nothing to repack, KVSTASH_REPACK=off, a GPU backend).
    std::function<void(const LoadProgress&)> on_progress = {};
};

class Model {
public:
    // Memory-maps a GGUF file, or a Hugging Face model directory (config.json, *.safetensors, tokenizer.json),
    // and binds its tensors. Throws Error on a missing, malformed or unsupported file.
    static std::shared_ptr<const Model> load(const std::string& path);
    static std::shared_ptr<const Model> load(const std::string& path, const ModelLoadOptions& options);
    ~Model();
    Model(const Model&) = delete;
    Model& operator=(const Model&) = delete;

    const std::string& path() const;
    const ModelInfo& info() const;
    int64_t n_vocab() const;
    int64_t n_ctx_train() const;
    // The tokenizer built from the file's vocabulary; throws Error(unsupported) if it has none kvstash handles.
    const Tokenizer& tokenizer() const;
    // Bytes of weight matrices read per evaluated token batch (for bandwidth figures).
    uint64_t weight_bytes() const;
    // A one-screen human-readable summary of the metadata and tensors.
    std::string describe() const;
    // What the file has that is odd but loadable, one sentence each (e.g. an eos token id past the
    // vocabulary, used as "no such token"). The library never prints: programs show these (the CLI as
    // "kvstash: warning: ..." on stderr, serve in its start-up log).
    const std::vector<std::string>& warnings() const;

private:
    Model();
    struct Impl;
    friend struct ModelAccess;  // the library's own access to Impl (src/model/model_access.h)
    std::unique_ptr<Impl> impl_;
};

}  // namespace kvstash
