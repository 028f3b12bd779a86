// The sampling and stopping flags shared by `generate` and `chat`.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "kvstash/generate.h"
#include "kvstash/sampler.h"

namespace kvstash::cli {

struct SamplingFlags {
    SamplerParams params;
    std::vector<std::string> logit_bias;  // "ID=BIAS" (BIAS may be -inf)
    std::vector<std::string> stop;
    int64_t max_tokens = 256;
    CLI::Option* seed_option = nullptr;  // --seed; not given: a random seed per run
};

void add_sampling_flags(CLI::App& app, SamplingFlags& flags);
// Parses --logit-bias; throws kvstash::Error(invalid_argument) for a malformed entry. Without --seed the
// seed is drawn from std::random_device (every run differs, like the server); with it, runs repeat.
SamplerParams sampler_params(const SamplingFlags& flags);
// "seed: N" or "seed: N (random; pass --seed N to repeat this run)", for --timings.
std::string seed_line(const SamplingFlags& flags, const SamplerParams& params);
GenerateOptions generate_options(const SamplingFlags& flags);

}  // namespace kvstash::cli
