// Reading OpenAI-style request bodies: every field is type- and range-checked (400 with the field as
// `param`), the prompt is rendered and tokenized here, in the handler thread, and the result is a
// GenerationJob ready for the scheduler.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "server/job.h"
#include "server/server_context.h"

namespace kvstash::server {

struct CompletionRequest {
    bool chat = false;
    bool stream = false;
    bool include_usage = false;  // stream_options.include_usage: a last chunk with the usage
    bool logprobs = false;
    std::unique_ptr<GenerationJob> job;
};

// A JSON object, or 400 "the request body is not valid JSON: ...".
nlohmann::json parse_json_body(const std::string& body);

// POST /v1/completions (chat = false) and /v1/chat/completions (chat = true). A `state` field continues
// from a named state (404 when unknown).
CompletionRequest parse_completion_request(const nlohmann::json& body, bool chat, ServerContext& ctx);

// POST /v1/states: {"name", "prompt" | "messages"}; the job evaluates the prompt and hands the state back.
struct PrefillRequest {
    std::string name;
    std::unique_ptr<GenerationJob> job;
};
PrefillRequest parse_prefill_request(const nlohmann::json& body, ServerContext& ctx);

// 400 unless `name` is a valid state name (see StateStore::valid_name).
void require_state_name(const std::string& name, const char* param);

}  // namespace kvstash::server
