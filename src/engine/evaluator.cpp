#include <algorithm>
#include <string>
#include <thread>
#include <utility>

#include "engine/device.h"
#include "kvstash/error.h"
#include "kvstash/evaluator.h"
#include "model/adapter_weights.h"
#include "model/batch_plan.h"
#include "model/forward.h"
#include "model/model_access.h"
#include "state/state_access.h"

namespace kvstash {

// Forward passes take micro-batches of at most this many rows (tokens of one or several sequences),
// bounding scratch memory. Batch invariance makes the split invisible in the results.
constexpr int64_t max_micro_batch = 128;

struct Evaluator::Impl {
    std::shared_ptr<const Model> model;
    std::unique_ptr<Backend> backend;  // the device the forward pass runs on, its threads and activations
    ForwardBookkeeping book;
    Progress progress;

    Impl(std::shared_ptr<const Model> m, int n_threads)
        : model(std::move(m)), backend(make_process_backend(n_threads)) {
        backend->bind_model(ModelAccess::impl(*model));
    }
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

int Evaluator::n_threads() const { return impl_->backend->n_threads(); }
const Model& Evaluator::model() const { return *impl_->model; }

void Evaluator::eval(State& state, std::span<const int32_t> tokens, std::vector<float>* all_logits) {
    // The one-request case of eval_batch: the same validation, micro-batching and forward pass.
    const EvalRequest request{&state, tokens, all_logits};
    eval_batch(std::span<const EvalRequest>(&request, 1));
}

void Evaluator::eval_hidden(State& state, std::span<const int32_t> tokens, std::vector<float>& hidden) {
    EvalRequest request{&state, tokens, nullptr};
    request.all_hidden = &hidden;
    eval_batch(std::span<const EvalRequest>(&request, 1));
}

namespace {

// One request with tokens while a batch is evaluated: where it started, and its results until commit.
struct PendingRequest {
    State* state = nullptr;
    std::span<const int32_t> tokens;  // the new tokens
    std::vector<float>* all_logits = nullptr;
    std::vector<float>* all_hidden = nullptr;
    std::vector<float> hidden;  // run.size() × n_embd while evaluating (replayed rows included)
    int64_t first = 0;          // the state's evaluated tokens before the call
    // What the forward pass runs: tokens waiting to be evaluated again (after a truncate of a recurrent
    // model) then the new ones; `run` views `run_buffer` when there are such tokens, else `tokens`.
    std::vector<int32_t> run_buffer;
    std::span<const int32_t> run;
    int64_t n_replay = 0;
    std::vector<float> last;  // (n_vocab) logits of its last token
    KvCache* kv = nullptr;    // the state's KV, once grown
    RecurrentState* recurrent = nullptr;
    std::vector<RecurrentCheckpoint> checkpoints;  // taken on the way (recurrent models)
    bool grown = false;                            // KV grown: roll back to `first` on error
};

// "request 3: " in a batch of several, nothing for a single request (eval()).
std::string request_prefix(size_t index, size_t n_requests) {
    return n_requests == 1 ? std::string() : "eval_batch request " + std::to_string(index) + ": ";
}

// Every check before any work, so that a bad request changes no State.
void validate_requests(std::span<const EvalRequest> requests, const Model* model, int64_t n_vocab) {
    std::vector<std::pair<const void*, size_t>> states;
    std::vector<std::pair<const void*, size_t>> outputs;
    for (size_t i = 0; i < requests.size(); ++i) {
        const EvalRequest& r = requests[i];
        const std::string where = request_prefix(i, requests.size());
        if (r.state == nullptr) throw Error(ErrorCode::invalid_argument, where + "no state given");
        if (StateAccess::model(*r.state) != model) {
            throw Error(ErrorCode::invalid_argument,
                        where + "this state belongs to another model than the evaluator's");
        }
        for (int32_t id : r.tokens) {
            if (id < 0 || id >= n_vocab) {
                throw Error(ErrorCode::invalid_argument, where + "token id " + std::to_string(id) +
                                                             " is outside the vocabulary (0.." +
                                                             std::to_string(n_vocab - 1) + ")");
            }
        }
        const auto n = static_cast<int64_t>(r.tokens.size());
        const int64_t first = r.state->n_tokens();
        if (first + n > r.state->n_ctx()) {
            throw Error(ErrorCode::out_of_range, where + "evaluating " + std::to_string(n) + " tokens after " +
                                                     std::to_string(first) + " exceeds the context of " +
                                                     std::to_string(r.state->n_ctx()) +
                                                     " tokens; use a larger context or a shorter input");
        }
        states.emplace_back(r.state, i);
        if (r.all_logits) outputs.emplace_back(r.all_logits, i);
    }
    const auto find_repeat = [](std::vector<std::pair<const void*, size_t>>& items) -> std::pair<size_t, size_t> {
        std::sort(items.begin(), items.end());
        for (size_t k = 1; k < items.size(); ++k) {
            if (items[k].first == items[k - 1].first) return {items[k - 1].second, items[k].second};
        }
        return {0, 0};
    };
    if (const auto [a, b] = find_repeat(states); a != b) {
        throw Error(ErrorCode::invalid_argument,
                    "eval_batch: requests " + std::to_string(a) + " and " + std::to_string(b) +
                        " name the same State; give each sequence at most one request per batch");
    }
    if (const auto [a, b] = find_repeat(outputs); a != b) {
        throw Error(ErrorCode::invalid_argument, "eval_batch: requests " + std::to_string(a) + " and " +
                                                     std::to_string(b) +
                                                     " share one all_logits vector; give each its own");
    }
}

}  // namespace

void Evaluator::eval_batch(std::span<const EvalRequest> requests) {
    const ModelImpl& m = ModelAccess::impl(*impl_->model);
    const int64_t n_vocab = m.config.n_vocab;
    validate_requests(requests, impl_->model.get(), n_vocab);

    std::vector<PendingRequest> pending;
    std::vector<int64_t> sizes;
    int64_t total = 0;
    for (const EvalRequest& r : requests) {
        if (r.tokens.empty()) continue;  // a no-op, as eval() of no tokens
        PendingRequest p;
        p.state = r.state;
        p.tokens = r.tokens;
        p.all_logits = r.all_logits;
        p.all_hidden = r.all_hidden;
        p.first = StateAccess::n_evaluated(*r.state);
        const std::span<const int32_t> replay = StateAccess::pending(*r.state);
        p.n_replay = static_cast<int64_t>(replay.size());
        if (replay.empty()) {
            p.run = r.tokens;
        } else {
            p.run_buffer.assign(replay.begin(), replay.end());
            p.run_buffer.insert(p.run_buffer.end(), r.tokens.begin(), r.tokens.end());
            p.run = p.run_buffer;
        }
        pending.push_back(std::move(p));
        sizes.push_back(static_cast<int64_t>(pending.back().run.size()));
        total += sizes.back();
    }
    if (pending.empty()) return;

    const RecurrentShape recurrent_shape = m.config.recurrent_shape();
    std::vector<ForwardSegment> segments;
    std::vector<std::vector<RecurrentSnapshot>> snapshots;  // per segment of the current micro-batch
    try {
        for (PendingRequest& p : pending) {
            const auto n = static_cast<int64_t>(p.run.size());
            p.last.resize(static_cast<size_t>(n_vocab));
            if (p.all_logits) p.all_logits->resize(p.tokens.size() * static_cast<size_t>(n_vocab));
            if (p.all_hidden) p.hidden.resize(p.run.size() * static_cast<size_t>(m.config.n_embd));
            p.kv = &StateAccess::grow(*p.state, n);  // the commit below cannot throw
            p.grown = true;
            if (recurrent_shape.n_layer == 0) continue;
            p.recurrent = &StateAccess::recurrent(*p.state);
            // Checkpoints at every multiple of the interval passed (allocated now: the snapshots point at them).
            const int64_t interval = StateAccess::options(*p.state).checkpoint_interval;
            std::vector<int64_t> positions;
            if (interval > 0) {
                for (int64_t pos = (p.first / interval + 1) * interval; pos <= p.first + n; pos += interval) {
                    positions.push_back(pos);
                }
            }
            for (int64_t pos : StateAccess::wanted_checkpoints(*p.state)) {
                if (pos > p.first && pos <= p.first + n) positions.push_back(pos);
            }
            std::sort(positions.begin(), positions.end());
            positions.erase(std::unique(positions.begin(), positions.end()), positions.end());
            for (int64_t pos : positions)
                p.checkpoints.push_back(RecurrentCheckpoint{pos, RecurrentState(recurrent_shape)});
        }
        int64_t done = 0;
        for (const MicroBatch& batch : plan_micro_batches(sizes, max_micro_batch)) {
            segments.clear();
            snapshots.resize(batch.size());
            for (size_t k = 0; k < batch.size(); ++k) {
                const PlannedSegment& planned = batch[k];
                PendingRequest& p = pending[planned.request];
                ForwardSegment seg;
                seg.kv = p.kv;
                seg.recurrent = p.recurrent;
                if (const auto& adapters = p.state->adapters()) seg.adapters = &AdapterAccess::impl(*adapters);
                seg.first_pos = p.first + planned.offset;
                seg.tokens = p.run.subspan(static_cast<size_t>(planned.offset), static_cast<size_t>(planned.count));
                const bool is_final = planned.offset + planned.count == static_cast<int64_t>(p.run.size());
                if (p.all_logits) {  // every row of the new tokens
                    seg.logits_from = std::clamp<int64_t>(p.n_replay - planned.offset, 0, planned.count);
                    seg.logits = p.all_logits->data() + (planned.offset + seg.logits_from - p.n_replay) * n_vocab;
                } else {  // only the request's very last token
                    seg.logits_from = is_final ? planned.count - 1 : planned.count;
                    seg.logits = p.last.data();
                }
                if (p.all_hidden) seg.hidden = p.hidden.data() + planned.offset * m.config.n_embd;
                snapshots[k].clear();
                for (RecurrentCheckpoint& c : p.checkpoints) {
                    const int64_t row = c.pos - seg.first_pos;
                    if (row > 0 && row <= planned.count) snapshots[k].push_back(RecurrentSnapshot{row, &c.state});
                }
                seg.snapshots = snapshots[k];
                segments.push_back(seg);
                done += planned.count;
            }
            model_forward(m, segments, *impl_->backend, impl_->book);
            if (impl_->progress) impl_->progress(done, total);
        }
    } catch (...) {
        for (PendingRequest& p : pending) {
            if (p.grown) StateAccess::roll_back(*p.state, p.first);
        }
        throw;
    }
    for (PendingRequest& p : pending) {
        const auto n = static_cast<int64_t>(p.tokens.size());
        if (p.all_logits) std::copy_n(p.all_logits->data() + (n - 1) * n_vocab, n_vocab, p.last.data());
        if (p.all_hidden) p.all_hidden->assign(p.hidden.end() - n * m.config.n_embd, p.hidden.end());
        StateAccess::commit(*p.state, p.tokens, std::move(p.last), std::move(p.checkpoints));
    }
}

}  // namespace kvstash
