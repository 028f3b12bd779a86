// Speculative decoding of a job's choices (kvstash/speculative.h; the answer is bitwise the same): the
// server's --spec default (ServerOptions), changed per request by the speculative.* fields
// (server/speculative_fields.h).
#pragma once

#include "kvstash/generate.h"

namespace kvstash::server {

struct JobSpeculation {
    enum class Mode { none, lookup, draft };
    Mode mode = Mode::none;
    SpeculationOptions options;  // speculative.n_max / n_min
    float p_min = 0.0f;          // speculative.p_min (draft model)
};

}  // namespace kvstash::server
