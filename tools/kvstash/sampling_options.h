// The sampling and stopping flags shared by `generate` and `chat`.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "kvstash/generate.h"
#include "kvstash/grammar.h"
#include "kvstash/sampler.h"

namespace kvstash::cli {

struct SamplingFlags {
    SamplerParams params;
    std::vector<std::string> logit_bias;  // "ID=BIAS" (BIAS may be -inf)
    std::vector<std::string> stop;
    int64_t max_tokens = 256;
    CLI::Option* seed_option = nullptr;  // --seed; not given: a random seed per run
    std::string grammar_path;            // --grammar: GBNF file
    std::string json_schema_path;        // --json-schema: JSON Schema file
};

void add_sampling_flags(CLI::App& app, SamplingFlags& flags);
// Parses --logit-bias; throws kvstash::Error(invalid_argument) for a malformed entry. Without --seed the
// seed is drawn from std::random_device (every run differs, like the server); with it, runs repeat.
SamplerParams sampler_params(const SamplingFlags& flags);
// "seed: N" or "seed: N (random; pass --seed N to repeat this run)", for --timings.
std::string seed_line(const SamplingFlags& flags, const SamplerParams& params);
GenerateOptions generate_options(const SamplingFlags& flags);
// The grammar of --grammar / --json-schema (nullptr for neither). Throws Error(io) for an unreadable
// file, Error(bad_format) for a grammar or schema with errors, Error(unsupported) for schema keywords
// kvstash does not support (each naming the file).
std::shared_ptr<const Grammar> grammar_from_flags(const SamplingFlags& flags);
// A fresh constraint for one generation (nullptr when `grammar` is); `vocabulary` built once per run.
std::shared_ptr<GrammarConstraint> make_constraint(const std::shared_ptr<const Grammar>& grammar,
                                                   const std::shared_ptr<const GrammarVocabulary>& vocabulary);

}  // namespace kvstash::cli
