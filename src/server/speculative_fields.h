// The speculative decoding fields of a completion request, as llama-server spells them:
// "speculative.n_max" (0..64; 0 turns speculation off for this request), "speculative.n_min" (0..64),
// "speculative.p_min" (0..1, the draft model's confidence to keep drafting), and kvstash's
// "speculative.type" ("none", "lookup" or "draft"). The answer is bitwise the same with or without.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "kvstash/model.h"
#include "server/job_speculation.h"

namespace kvstash::server {

struct SpeculativeFields {
    std::optional<std::string> type;
    std::optional<int64_t> n_max;
    std::optional<int64_t> n_min;
    std::optional<double> p_min;
};

// 400 naming the field for a wrong type or a value out of range.
SpeculativeFields parse_speculative_fields(const nlohmann::json& body);

// The server's default changed by the fields: a type picks the drafter ("draft" needs the server's draft
// model: 400 otherwise); n_max 0 turns speculation off, n_max > 0 without a type on a server without a
// default turns prompt lookup on; 400 when n_min exceeds n_max.
JobSpeculation resolve_speculation(const SpeculativeFields& fields, const JobSpeculation& server_default,
                                   bool has_draft_model);

}  // namespace kvstash::server
