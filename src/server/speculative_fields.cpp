#include "server/speculative_fields.h"

#include "server/api_error.h"
#include "server/request_fields.h"

namespace kvstash::server {

SpeculativeFields parse_speculative_fields(const nlohmann::json& body) {
    SpeculativeFields out;
    if (const auto* v = field(body, "speculative.type")) {
        out.type = get_string(*v, "speculative.type");
        if (*out.type != "none" && *out.type != "lookup" && *out.type != "draft") {
            throw bad_request("'speculative.type' must be \"none\", \"lookup\" or \"draft\"", "speculative.type",
                              "invalid_value");
        }
    }
    if (const auto* v = field(body, "speculative.n_max")) out.n_max = get_int(*v, "speculative.n_max", 0, 64);
    if (const auto* v = field(body, "speculative.n_min")) out.n_min = get_int(*v, "speculative.n_min", 0, 64);
    if (const auto* v = field(body, "speculative.p_min")) out.p_min = get_number(*v, "speculative.p_min", 0.0, 1.0);
    return out;
}

JobSpeculation resolve_speculation(const SpeculativeFields& fields, const JobSpeculation& server_default,
                                   bool has_draft_model) {
    JobSpeculation out = server_default;
    if (fields.type) {
        if (*fields.type == "none") out.mode = JobSpeculation::Mode::none;
        if (*fields.type == "lookup") out.mode = JobSpeculation::Mode::lookup;
        if (*fields.type == "draft") {
            if (!has_draft_model) {
                throw bad_request(
                    "'speculative.type' \"draft\" needs a server started with --spec draft --draft-model "
                    "FILE; use \"lookup\"",
                    "speculative.type", "invalid_value");
            }
            out.mode = JobSpeculation::Mode::draft;
        }
    }
    if (fields.n_max) {
        if (*fields.n_max == 0) {
            out.mode = JobSpeculation::Mode::none;
        } else {
            out.options.max_draft = static_cast<int32_t>(*fields.n_max);
            if (!fields.type && out.mode == JobSpeculation::Mode::none) out.mode = JobSpeculation::Mode::lookup;
        }
    }
    if (fields.n_min) out.options.min_draft = static_cast<int32_t>(*fields.n_min);
    if (fields.p_min) out.p_min = static_cast<float>(*fields.p_min);
    if (out.mode != JobSpeculation::Mode::none && out.options.min_draft > out.options.max_draft) {
        throw bad_request("'speculative.n_min' (" + std::to_string(out.options.min_draft) +
                              ") must not exceed 'speculative.n_max' (" + std::to_string(out.options.max_draft) + ")",
                          "speculative.n_min", "invalid_value");
    }
    return out;
}

}  // namespace kvstash::server
