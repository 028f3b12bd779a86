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
};

void add_sampling_flags(CLI::App& app, SamplingFlags& flags);
// Parses --logit-bias; throws kvstash::Error(invalid_argument) for a malformed entry.
SamplerParams sampler_params(const SamplingFlags& flags);
GenerateOptions generate_options(const SamplingFlags& flags);

}  // namespace kvstash::cli
