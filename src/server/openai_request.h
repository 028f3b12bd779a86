// Reading OpenAI-style request bodies into plain structs: every field is type- and range-checked (400
// with the field as `param`). Pure: no model, tokenizer or scheduler is needed (the fuzz target
// tests/fuzz/request_fuzz.cpp drives these); server/request_job.h turns a request into a job.
// Unknown fields are ignored, as OpenAI's clients send fields a server may not know; a few known ones
// kvstash does not implement (suffix, best_of > 1, functions, echo with logprobs) are refused instead.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvstash/chat.h"
#include "kvstash/grammar.h"
#include "kvstash/sampler.h"
#include "server/speculative_fields.h"

namespace kvstash::server {

// What the parser needs to know of the server's settings.
struct RequestLimits {
    int max_n = 1;          // most choices per request (--parallel)
    GrammarLimits grammar;  // compiling a grammar / JSON Schema; its deadline ends the request's preparation
};

// tool_choice: "none" (tools are shown to the model, calls are not read), "auto" (the default with tools:
// the model may call; a call, once begun, is constrained), "required" (a call to one of the tools is
// forced), or {"type": "function", "function": {"name": N}} (a call to N is forced).
enum class ToolChoice { none, automatic, required, named };

// `tools` (OpenAI's function tools), `tool_choice`, `parallel_tool_calls`.
struct ToolRequest {
    std::vector<std::string> definitions;  // each tool object's JSON text (rendered into the prompt); empty: none
    std::vector<ToolSchema> schemas;       // name and parameters schema of each
    ToolChoice choice = ToolChoice::automatic;
    std::string name;      // choice == named
    bool parallel = true;  // more than one call in a reply (Qwen 2.5; Llama 3.1 makes one)
};

// One prompt of an array `prompt` (OpenAI's completions): text, or token ids.
struct PromptInput {
    std::string text;
    std::optional<std::vector<int32_t>> tokens;  // set: the prompt is these ids, as given (no BOS added)
};

// Which completion endpoint a request came to: POST /v1/completions (text) or /v1/chat/completions (chat).
enum class Endpoint { text, chat };

// POST /v1/completions (chat = false) and /v1/chat/completions (chat = true).
struct CompletionRequest {
    bool chat = false;
    bool stream = false;
    bool include_usage = false;  // stream_options.include_usage: a last chunk with the usage
    bool logprobs = false;
    int top_logprobs = -1;  // < 0: no logprobs; else the number of alternatives per token
    int n = 1;
    std::vector<std::string> stop;
    SamplerParams sampling;              // OpenAI's defaults where not given; seed: see `seed`
    std::optional<uint64_t> seed;        // none: the job builder draws a random one
    std::optional<std::string> state;    // a valid state name to continue from
    std::optional<std::string> adapter;  // an adapter set's name (`serve --lora NAME=...`)
    std::vector<ChatMessage> messages;   // chat: non-empty
    // text: the prompt as text, or as token ids (exactly one of the two, or neither when continuing a state
    // or when `prompts` holds several).
    std::optional<std::string> prompt;
    std::optional<std::vector<int32_t>> prompt_tokens;
    // text: an array `prompt` of several prompts; each gets n choices, choice i of prompt p has index p * n + i.
    std::vector<PromptInput> prompts;
    bool echo = false;                  // text: each choice's text starts with its prompt (not with logprobs)
    std::optional<int64_t> max_tokens;  // max_tokens or max_completion_tokens; none: OpenAI's default
    // response_format {"type": "json_object"} / {"type": "json_schema", "json_schema": {"schema": ...}},
    // or `grammar` (GBNF text); null: unconstrained ("type": "text" too).
    std::shared_ptr<const Grammar> grammar;
    ToolRequest tools;              // chat only
    GrammarLimits grammar_limits;   // RequestLimits::grammar: the tools' grammar and the prompt's tokenization
    SpeculativeFields speculative;  // speculative.* (server/speculative_fields.h)
};

// POST /v1/states: {"name", "prompt" | "messages", "add_generation_prompt", "replace"}.
struct PrefillRequest {
    std::string name;
    bool replace = false;               // false: 409 when `name` exists; true: replace it
    std::optional<std::string> prompt;  // none: `messages` (non-empty)
    std::vector<ChatMessage> messages;
    bool add_generation_prompt = false;
    std::optional<std::string> adapter;  // an adapter set's name (`serve --lora NAME=...`)
};

// A JSON object, or 400 "the request body is not valid JSON: ...".
nlohmann::json parse_json_body(const std::string& body);

// Throw ApiError (400) for a bad field. A few fields read with json::value() may throw json::exception
// for a value of the wrong type; the routes answer that with 400 "bad JSON value" too.
// `raw_body`, when given, is the body's text: tools and a response_format's JSON Schema are read from it
// in their keys' order (nlohmann::json sorts keys), so that tools reach the prompt as the client wrote
// them, as transformers renders them, and a schema's properties are generated in the schema's order.
CompletionRequest parse_completion_request(const nlohmann::json& body, Endpoint endpoint, const RequestLimits& limits,
                                           const std::string* raw_body = nullptr);
PrefillRequest parse_prefill_request(const nlohmann::json& body);

// 400 unless `name` is a valid state name (server/state_name.h).
void require_state_name(const std::string& name, const char* param);

}  // namespace kvstash::server
