// The evaluator: advances States through a Model (batched, batch-invariant).
//
//   kvstash::Evaluator eval(model, /*n_threads=*/2);
//   eval.eval(state, tokens);                   // appends tokens, computes the last position's logits
//   eval.eval_batch(requests);                  // several sequences in one pass, each as if alone
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "kvstash/error.h"
#include "kvstash/model.h"
#include "kvstash/state.h"

namespace kvstash {

// One sequence's share of a batched evaluation (Evaluator::eval_batch).
struct EvalRequest {
    State* state = nullptr;
    std::span<const int32_t> tokens;
    std::vector<float>* all_logits = nullptr;  // as for eval(): every new position's logits, if given
    std::vector<float>* all_hidden = nullptr;  // as for eval_hidden(): every new position's hidden state
};

// Advances states through the model. Owns a backend (the CPU, its worker threads and activation buffers): use one per
// thread of control (it is not safe to call eval() on one Evaluator concurrently).
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

    // eval(), and `hidden` receives N × n_embd final-norm hidden states (every new position, row-major):
    // the vectors the output matrix multiplies into logits, which llama.cpp pools into embeddings.
    // Bitwise independent of batching, as the logits are.
    void eval_hidden(State& state, std::span<const int32_t> tokens, std::vector<float>& hidden);

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
