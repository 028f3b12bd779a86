#include <algorithm>
#include <thread>

#include "kernels/thread_pool.h"
#include "kvstash/error.h"
#include "kvstash/model.h"
#include "model/llama.h"
#include "model/model_impl.h"
#include "state/state_impl.h"

namespace kvstash {

// Prompts are evaluated in micro-batches of at most this many tokens, bounding scratch memory.
// Batch invariance makes the split invisible in the results.
constexpr int64_t max_micro_batch = 128;

struct Evaluator::Impl {
    std::shared_ptr<const Model> model;
    ThreadPool pool;
    LlamaScratch scratch;
    Progress progress;

    Impl(std::shared_ptr<const Model> m, int n_threads) : model(std::move(m)), pool(n_threads) {}
};

namespace {
int default_threads() {
    const unsigned n = std::thread::hardware_concurrency();
    return n == 0 ? 1 : static_cast<int>(n);
}
}  // namespace

Evaluator::Evaluator(std::shared_ptr<const Model> model, int n_threads) {
    if (!model) throw Error(ErrorCode::invalid_argument, "Evaluator needs a model");
    if (n_threads < 0) throw Error(ErrorCode::invalid_argument, "thread count must not be negative");
    impl_ = std::make_unique<Impl>(std::move(model), n_threads == 0 ? default_threads() : n_threads);
}

Evaluator::~Evaluator() = default;

void Evaluator::set_progress(Progress progress) { impl_->progress = std::move(progress); }

int Evaluator::n_threads() const { return impl_->pool.n_threads(); }
const Model& Evaluator::model() const { return *impl_->model; }

void Evaluator::eval(State& state, std::span<const int32_t> tokens, std::vector<float>* all_logits) {
    State::Impl& st = state.impl();
    const Model::Impl& m = impl_->model->impl();
    if (st.model != impl_->model.get()) {
        throw Error(ErrorCode::invalid_argument, "this state belongs to another model than the evaluator's");
    }
    const auto n = static_cast<int64_t>(tokens.size());
    if (n == 0) return;
    const int64_t n_vocab = m.config.n_vocab;
    for (int32_t id : tokens) {
        if (id < 0 || id >= n_vocab) {
            throw Error(ErrorCode::invalid_argument, "token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                                                         std::to_string(n_vocab - 1) + ")");
        }
    }
    const int64_t first = state.n_tokens();
    if (first + n > st.n_ctx) {
        throw Error(ErrorCode::out_of_range, "evaluating " + std::to_string(n) + " tokens after " + std::to_string(first) +
                                                 " exceeds the context of " + std::to_string(st.n_ctx) +
                                                 " tokens; use a larger context or a shorter input");
    }
    if (all_logits) all_logits->resize(static_cast<size_t>(n * n_vocab));
    std::vector<float> last(static_cast<size_t>(n_vocab));
    try {
        st.kv.grow(first + n);
        for (int64_t done = 0; done < n; done += max_micro_batch) {
            const int64_t count = std::min(max_micro_batch, n - done);
            const bool is_final = done + count == n;
            // Logits rows wanted from this micro-batch: all of them, or only the very last token's.
            const int64_t from = all_logits ? 0 : (is_final ? count - 1 : count);
            float* out = all_logits ? all_logits->data() + done * n_vocab : last.data();
            llama_forward(m, st.kv, first + done, tokens.subspan(static_cast<size_t>(done), static_cast<size_t>(count)),
                          impl_->scratch, impl_->pool, from, out);
            if (impl_->progress) impl_->progress(done + count, n);
        }
    } catch (...) {
        st.kv.truncate(first);
        throw;
    }
    if (all_logits) std::copy_n(all_logits->data() + (n - 1) * n_vocab, n_vocab, last.data());
    st.tokens.insert(st.tokens.end(), tokens.begin(), tokens.end());
    st.last_logits = std::move(last);
}

// Placeholder until the batched forward lands: sequential evals (bitwise what the batched path must give).
void Evaluator::eval_batch(std::span<const EvalRequest> requests) {
    for (const EvalRequest& r : requests) {
        if (r.state == nullptr) throw Error(ErrorCode::invalid_argument, "eval_batch: a request without a state");
        eval(*r.state, r.tokens, r.all_logits);
    }
}

}  // namespace kvstash
