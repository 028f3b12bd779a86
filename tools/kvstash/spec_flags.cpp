#include "kvstash/spec_flags.h"

#include <cstdio>
#include <filesystem>

#include "kvstash/common.h"
#include "kvstash/error.h"

namespace kvstash::cli {

void add_spec_flags(CLI::App& app, SpecFlags& f) {
    app.add_option("--spec", f.mode,
                   "speculative decoding (output bitwise identical to plain decoding): lookup (guess from the "
                   "prompt's own tokens), draft (a --draft-model with the same vocabulary), self (this model "
                   "quantized to q4_K at load; Hugging Face directories)")
        ->check(CLI::IsMember({"lookup", "draft", "self"}));
    app.add_option("--draft-model", f.draft_model, "the draft model for --spec draft (same vocabulary)");
    app.add_option("--spec-max", f.speculation.max_draft, "most draft tokens verified per step")
        ->check(CLI::Range(1, 64))
        ->capture_default_str();
    app.add_option("--spec-min", f.speculation.min_draft, "fewest draft tokens worth verifying")
        ->check(CLI::Range(0, 64))
        ->capture_default_str();
    app.add_option("--draft-p-min", f.p_min, "--spec draft/self: stop a draft when the draft model is less sure")
        ->check(CLI::Range(0.0f, 1.0f))
        ->capture_default_str();
}

std::shared_ptr<const Model> load_draft_model(const SpecFlags& f, const std::string& target_path, int n_threads) {
    if (!f.draft_model.empty() && f.mode != "draft") {
        throw Error(ErrorCode::invalid_argument, "--draft-model needs --spec draft");
    }
    if (f.speculation.min_draft > f.speculation.max_draft) {
        throw Error(ErrorCode::invalid_argument, "--spec-min must not exceed --spec-max");
    }
    if (f.mode == "draft") {
        if (f.draft_model.empty()) throw Error(ErrorCode::invalid_argument, "--spec draft needs --draft-model FILE");
        return load_model(f.draft_model, n_threads);
    }
    if (f.mode != "self") return nullptr;
    if (!std::filesystem::is_directory(target_path)) {
        throw Error(ErrorCode::invalid_argument,
                    "--spec self quantizes the model at load, which kvstash does for Hugging Face directories "
                    "only; for a GGUF give a smaller GGUF of the same family: --spec draft --draft-model FILE");
    }
    return Model::load(target_path, ModelLoadOptions{.quantize = LoadQuantization::q4_K, .n_threads = n_threads});
}

void apply_spec_flags(const SpecFlags& f, const std::string& target_path, const Model& target, int n_threads,
                      GenerateOptions& options) {
    std::shared_ptr<const Model> draft = load_draft_model(f, target_path, n_threads);
    if (f.mode.empty()) return;
    options.speculation = f.speculation;
    if (draft) {
        options.drafter = make_model_drafter(std::move(draft), target, {.n_threads = n_threads, .p_min = f.p_min});
    } else {
        options.drafter = make_lookup_drafter();
    }
}

std::string spec_timings(const GenerateOptions& options, const GenerateResult& result) {
    if (!options.drafter) return "";
    char line[160];
    std::snprintf(
        line, sizeof line, "; speculation (%s): drafted %lld, accepted %lld (%.0f%%) in %lld rounds",
        options.drafter->name(), static_cast<long long>(result.drafted), static_cast<long long>(result.accepted),
        result.drafted > 0 ? 100.0 * static_cast<double>(result.accepted) / static_cast<double>(result.drafted) : 0.0,
        static_cast<long long>(result.verify_rounds));
    return line;
}

}  // namespace kvstash::cli
