// --spec lookup|draft|self, --draft-model, --spec-max, --spec-min, --draft-p-min: speculative decoding for
// `generate` and `chat` (docs/speculative.md). The output is bitwise that of plain decoding.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "kvstash/generate.h"
#include "kvstash/model.h"
#include "kvstash/speculative.h"

namespace kvstash::cli {

struct SpecFlags {
    std::string mode;         // "", "lookup", "draft" or "self"
    std::string draft_model;  // --draft-model (mode draft)
    SpeculationOptions speculation;
    float p_min = 0.0f;
};

void add_spec_flags(CLI::App& app, SpecFlags& flags);

// Sets options.drafter / options.speculation from the flags (nothing without --spec). `target_path` is the
// target model's path (--spec self loads it again, quantized). Throws Error(invalid_argument) for a
// --draft-model without --spec draft or the reverse, and for --spec self on a GGUF (kvstash quantizes Hugging Face
// directories only).
void apply_spec_flags(const SpecFlags& flags, const std::string& target_path, const Model& target, int n_threads,
                      GenerateOptions& options);

// The draft model of --spec draft (--draft-model) or --spec self (the target quantized to q4_K at load); null
// for lookup and without --spec. Throws as apply_spec_flags.
std::shared_ptr<const Model> load_draft_model(const SpecFlags& flags, const std::string& target_path, int n_threads);

// "; speculation: drafted D, accepted A (P%) in R rounds" for a --timings line ("" without a drafter).
std::string spec_timings(const GenerateOptions& options, const GenerateResult& result);

}  // namespace kvstash::cli
