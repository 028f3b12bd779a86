// kvstash public API: a model, the state of one sequence, and the evaluator that advances states.
//
//   auto model = kvstash::Model::load("models/SmolLM2-135M-Instruct.Q4_1.gguf");
//   kvstash::State state(*model);                    // empty sequence, f16 KV cache
//   kvstash::Evaluator eval(model, /*n_threads=*/2);
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
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvstash/error.h"
#include "kvstash/sampler.h"

namespace kvstash {

struct ModelConfig;
class Tokenizer;

class Model {
public:
    // Memory-maps a GGUF file and binds its tensors. Throws Error on a missing, malformed or unsupported file.
    static std::shared_ptr<const Model> load(const std::string& path);
    ~Model();

    const std::string& path() const;
    const ModelConfig& config() const;
    int64_t n_vocab() const;
    int64_t n_ctx_train() const;
    // The tokenizer built from the file's vocabulary; throws Error(unsupported) if it has none kvstash handles.
    const Tokenizer& tokenizer() const;
    // Bytes of weight matrices read per evaluated token batch (for bandwidth figures).
    uint64_t weight_bytes() const;
    // A one-screen human-readable summary of the metadata and tensors.
    std::string describe() const;

    struct Impl;
    const Impl& impl() const { return *impl_; }

private:
    Model();
    std::unique_ptr<Impl> impl_;
};

enum class KvType { f16, f32 };

struct StateOptions {
    KvType kv_type = KvType::f16;
    int64_t n_ctx = 0;  // maximum tokens; 0 = the model's training context length
};

// Everything needed to continue a sequence: its tokens, their KV cache and the last position's logits.
// Caller-owned; copies are explicit (fork()).
class State {
public:
    explicit State(const Model& model, StateOptions options = {});
    ~State();
    State(State&&) noexcept;
    State& operator=(State&&) noexcept;
    State(const State&) = delete;
    State& operator=(const State&) = delete;

    // A new state sharing this one's KV blocks (copy-on-write); cost independent of the prefix length.
    State fork() const;
    // Rewinds to the first n tokens.
    void truncate(int64_t n);

    int64_t n_tokens() const;
    int64_t n_ctx() const;
    std::span<const int32_t> tokens() const;
    // Logits (n_vocab) after the last token; empty before the first eval().
    std::span<const float> last_logits() const;
    // The sampler's state once generation has started on this sequence (kept with the state so that a
    // saved state continues the same random sequence); null before.
    const SamplerState* sampler_state() const;
    void set_sampler_state(const SamplerState& sampler);

    struct Impl;
    Impl& impl() { return *impl_; }
    const Impl& impl() const { return *impl_; }

private:
    State();
    std::unique_ptr<Impl> impl_;
};

// One sequence's share of a batched evaluation (Evaluator::eval_batch).
struct EvalRequest {
    State* state = nullptr;
    std::span<const int32_t> tokens;
    std::vector<float>* all_logits = nullptr;  // as for eval(): every new position's logits, if given
};

// Advances states through the model. Owns a thread pool and scratch buffers: use one per thread of
// control (it is not safe to call eval() on one Evaluator concurrently).
class Evaluator {
public:
    explicit Evaluator(std::shared_ptr<const Model> model, int n_threads = 0);  // 0 = hardware threads
    ~Evaluator();
    Evaluator(const Evaluator&) = delete;
    Evaluator& operator=(const Evaluator&) = delete;

    int n_threads() const;
    const Model& model() const;  // the model it evaluates (for its tokenizer, n_vocab, ...)
    // Appends `tokens` to `state` at positions n_tokens()..n_tokens()+N-1 and computes the new logits.
    // If `all_logits` is given it receives N × n_vocab logits (every new position), row-major.
    // Throws Error(out_of_range) past the state's context, Error(invalid_argument) for a bad token id;
    // the state is unchanged when it throws.
    void eval(State& state, std::span<const int32_t> tokens, std::vector<float>* all_logits = nullptr);

    // Evaluates several sequences together, as eval() on each would, bitwise: each request's State gets
    // exactly the KV and logits that eval(*r.state, r.tokens, r.all_logits) would give it. The rows of
    // all requests are packed into micro-batches of at most 128 rows (a long request continues in the
    // next one); each weight matrix is read once per micro-batch for all its rows (continuous batching
    // in a server: one decode step for many sequences costs about one step's weight traffic).
    // Requests with no tokens are no-ops (their all_logits is left alone, as by eval()). The States
    // must be distinct (forks sharing KV blocks are fine), of this evaluator's model, and each non-null
    // all_logits its own vector. Every request is checked before any work: Error(invalid_argument) for
    // a null or repeated State, a State of another model, a bad token id or a shared all_logits vector,
    // Error(out_of_range) past a State's context; the message names the request. On any error (also one
    // thrown by the progress callback) no State is changed. The progress callback gets (rows done, rows
    // of all requests) after each micro-batch. eval() is the one-request case of this.
    void eval_batch(std::span<const EvalRequest> requests);

    // Called after each micro-batch of a long eval() with (tokens done, tokens in this call); for
    // progress displays. Empty = none.
    using Progress = std::function<void(int64_t done, int64_t total)>;
    void set_progress(Progress progress);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace kvstash
