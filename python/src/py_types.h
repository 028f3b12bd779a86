// The objects the Python module binds: a Model with its evaluator pool and optional prefix cache, and a
// State with the bookkeeping that keeps its zero-copy logits arrays valid. Python-facing only.
#pragma once

#include <nanobind/nanobind.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvstash/adapter.h"
#include "kvstash/evaluator.h"
#include "kvstash/generate.h"
#include "kvstash/model.h"
#include "kvstash/prefix_cache.h"
#include "kvstash/sampler.h"
#include "kvstash/state.h"

namespace kvstash::python {

namespace nb = nanobind;

// Model + evaluators + prefix cache. The model and the cache are thread-safe; an Evaluator is not, so
// each call leases one from a pool (created on demand: as many as calls ever ran at once).
class PyModel {
public:
    PyModel(const std::string& path, int threads, std::optional<uint64_t> cache_ram,
            std::optional<std::string> cache_dir, uint64_t cache_disk);
    ~PyModel();

    // An evaluator for the duration of one call; returned to the pool on destruction.
    class Lease {
    public:
        Lease(PyModel& owner, std::unique_ptr<Evaluator> evaluator) : owner_(owner), evaluator_(std::move(evaluator)) {}
        Lease(const Lease&) = delete;
        ~Lease() { owner_.give_back(std::move(evaluator_)); }
        Evaluator& operator*() const { return *evaluator_; }

    private:
        PyModel& owner_;
        std::unique_ptr<Evaluator> evaluator_;
    };
    Lease lease();

    const Model& model() const { return *model_; }
    const std::shared_ptr<const Model>& shared() const { return model_; }
    int threads() const { return threads_; }
    PrefixCache* cache() const { return cache_.get(); }

private:
    void give_back(std::unique_ptr<Evaluator> evaluator);

    std::shared_ptr<const Model> model_;  // declared first: outlives the cache and the evaluators
    int threads_ = 0;
    std::unique_ptr<PrefixCache> cache_;
    std::mutex mutex_;
    std::vector<std::unique_ptr<Evaluator>> idle_;
};

// Keeps the C++ State whose logits buffer NumPy arrays point into alive after the Python State moved on.
struct LogitsOwner {
    nb::object model_ref;             // the Python Model: outlives `detached`
    std::unique_ptr<State> detached;  // null while the arrays view the live State's buffer
};

// A State as Python sees it. `model_ref` keeps the Python Model (and so the C++ model) alive.
class PyState {
public:
    PyState(nb::object model_ref, PyModel& model, State state);
    ~PyState();

    // Read-only access (no logits array is invalidated).
    const State& get() const { return *state_; }
    // Access for a call that changes the State: first moves the current State (and its logits buffer)
    // to the owner of any live logits array, continuing on an O(1) fork, so those arrays stay valid.
    State& mutate();
    // The logits of the last position as a read-only float32 array viewing the State's own buffer.
    nb::object logits_array();

    PyModel& model() const { return *model_; }
    const nb::object& model_ref() const { return model_ref_; }

    // One thread at a time: a second thread using the State during a call (GIL released) gets an error.
    class Busy {
    public:
        explicit Busy(PyState& state);
        Busy(const Busy&) = delete;
        ~Busy() { state_.busy_.store(false); }

    private:
        PyState& state_;
    };

private:
    nb::object model_ref_;
    PyModel* model_;
    std::unique_ptr<State> state_;
    std::shared_ptr<LogitsOwner> exported_;  // shared with every live logits array's capsule
    std::atomic<bool> busy_{false};
};

// kvstash.Adapters: an AdapterSet loaded for the Model `model_ref` (adapter_bindings.cpp).
struct PyAdapters {
    nb::object model_ref;
    std::shared_ptr<const AdapterSet> set;
};
// The set of an `adapters=` argument (None: null), checked to belong to `model`.
std::shared_ptr<const AdapterSet> adapter_set_arg(const PyModel& model, const nb::handle& adapters);
// AdapterSet::describe(), "no adapters" for null.
nb::str adapters_description(const std::shared_ptr<const AdapterSet>& set);
void bind_adapters(nb::module_& m);

// Sampling settings as the Python calls take them.
struct SamplingArgs {
    float temperature = 0.8f;
    float top_p = 0.95f;
    int32_t top_k = 40;
    float min_p = 0.05f;
    float repeat_penalty = 1.0f;
    int32_t repeat_last_n = 64;
    float presence_penalty = 0.0f;
    float frequency_penalty = 0.0f;
    std::optional<uint64_t> seed;  // none: continue the State's saved random sequence (else seed 0)
    std::vector<std::pair<int32_t, float>> logit_bias;
};
// A Sampler from `args`, continuing `previous`'s random sequence when no seed is given.
Sampler make_sampler(const SamplingArgs& args, const SamplerState* previous);
// speculative=None | "lookup" | "draft" (with draft_model, a Model of `m`'s vocabulary), up to spec_max guesses
// a round: sets GenerateOptions::drafter and ::speculation (kvstash/speculative.h); Error(invalid_argument)
// for another name or a draft_model without "draft".
void set_speculation(const PyModel& m, const std::optional<std::string>& speculative, const PyModel* draft_model,
                     int32_t spec_max, GenerateOptions& options);

// Calls a Python callable (token, text) -> bool|None from the generation loop (GIL released outside);
// an exception it raises stops generation and is re-raised by rethrow_if_failed() once the loop returned.
class PyTokenCallback {
public:
    explicit PyTokenCallback(nb::object callable) : callable_(std::move(callable)) {}
    TokenCallback as_callback();
    void rethrow_if_failed();

private:
    nb::object callable_;
    std::exception_ptr failure_;
};

// Token ids from a Python str (tokenized) or sequence of ints; None gives none.
std::vector<int32_t> prompt_tokens(const Model& model, const nb::handle& prompt, bool at_start);

// Raises kvstash.errors.ModelMismatch when the state file at `path` belongs to another model, and
// kvstash.errors.AdapterMismatch when it is this model's but was saved under other adapters than
// `adapters` (null: none).
void check_state_file_model(const PyModel& model, const std::string& path, const AdapterSet* adapters);

// `bytes` as a Python str, invalid UTF-8 (a character cut by max_tokens, a tiny random model's bytes) replaced
// by U+FFFD as streaming does: text from model output never raises UnicodeDecodeError.
nb::str text_from_bytes(std::string_view bytes);

// GenerateResult as returned to Python (kvstash.Completion), with the prompt's size.
struct Completion {
    std::string text;
    std::vector<int32_t> tokens;
    std::string stop_reason;
    double seconds = 0.0;
    int64_t prompt_tokens = 0;
    int64_t drafted = 0;   // speculative decoding: guesses verified ...
    int64_t accepted = 0;  // ... and kept
};
void bind_completion(nb::module_& m);

using ModelClass = nb::class_<PyModel>;
using StateClass = nb::class_<PyState>;
ModelClass bind_model(nb::module_& m);
StateClass bind_state(nb::module_& m);
void bind_generate(nb::module_& m, ModelClass& model_class);
void bind_session(nb::module_& m);
void bind_kv(ModelClass& model_class, StateClass& state_class);
void bind_batch(ModelClass& model_class);

}  // namespace kvstash::python
