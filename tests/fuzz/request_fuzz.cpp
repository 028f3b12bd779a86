// libFuzzer target for the HTTP request parser (server/openai_request.h): any body must either parse or
// raise ApiError (400) or json::exception (which the routes answer with 400 "bad JSON value"). Anything
// else (a crash, undefined behaviour, another exception type) is a finding, and so is an accepted
// request that breaks what the job builder relies on: n within 1..max_n, logprobs within 0..20, at most
// 16 non-empty stop strings, a chat request with messages of known roles, a text request with a prompt
// or a state, max_tokens >= 1, a state name that is safe as a file name. Each body is read as a text
// completion, a chat completion and a prefill, and as Ollama's /api/chat and /api/generate
// (server/ollama_request.h: the same guarantees for what they hand to the job builder, num_predict >= 1 and
// num_ctx >= 1 when given). Run: tests/fuzz/run_request_fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <string>

#include "server/api_error.h"
#include "server/ollama_request.h"
#include "server/openai_request.h"
#include "server/state_name.h"

namespace {

namespace srv = kvstash::server;

constexpr int kMaxN = 8;

void require(bool ok) {
    if (!ok) __builtin_trap();
}

void check_messages(const std::vector<kvstash::ChatMessage>& messages) {
    require(!messages.empty());
    for (const auto& m : messages)
        require(m.role == "system" || m.role == "user" || m.role == "assistant" || m.role == "tool");
}

void check_completion(const srv::CompletionRequest& r, bool chat) {
    require(r.chat == chat);
    require(r.n >= 1 && r.n <= kMaxN);
    require(r.top_logprobs >= -1 && r.top_logprobs <= 20);
    require(r.logprobs == (r.top_logprobs >= 0));
    require(r.stop.size() <= 16);
    for (const auto& s : r.stop) require(!s.empty());
    if (r.max_tokens) require(*r.max_tokens >= 1 && *r.max_tokens <= INT32_MAX);
    if (r.state) require(srv::valid_state_name(*r.state));
    if (chat) {
        check_messages(r.messages);
    } else {
        require(r.prompt || r.prompt_tokens || r.prompts.size() > 1 || r.state);
    }
    require(r.sampling.temperature >= 0.0f && r.sampling.top_p >= 0.0f && r.sampling.top_p <= 1.0f);
    for (const auto& [id, bias] : r.sampling.logit_bias) require(id >= 0 && bias >= -100.0f && bias <= 100.0f);
}

template <typename Fn>
void expect_parsed_or_rejected(Fn fn) {
    try {
        fn();
    } catch (const srv::ApiError& e) {
        require(e.status() == 400);
    } catch (const nlohmann::json::exception&) {}
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string body(reinterpret_cast<const char*>(data), size);
    nlohmann::json json;
    try {
        json = srv::parse_json_body(body);
    } catch (const srv::ApiError& e) {
        require(e.status() == 400 && e.code() == "invalid_json");
        return 0;
    }
    for (srv::Endpoint endpoint : {srv::Endpoint::text, srv::Endpoint::chat}) {
        expect_parsed_or_rejected([&] {
            check_completion(srv::parse_completion_request(json, endpoint, srv::RequestLimits{kMaxN, {}}),
                             endpoint == srv::Endpoint::chat);
        });
    }
    for (srv::OllamaEndpoint endpoint : {srv::OllamaEndpoint::chat, srv::OllamaEndpoint::generate}) {
        expect_parsed_or_rejected([&] {
            const srv::OllamaRequest r =
                srv::parse_ollama_request(json, endpoint, srv::RequestLimits{kMaxN, {}}, &body);
            require(!r.model.empty());
            if (r.num_predict) require(*r.num_predict >= 1);
            if (r.num_ctx) require(*r.num_ctx >= 1);
            if (!r.load_only) check_completion(r.completion, r.completion.chat);
        });
    }
    expect_parsed_or_rejected([&] {
        const srv::PrefillRequest p = srv::parse_prefill_request(json);
        require(srv::valid_state_name(p.name));
        if (!p.prompt) check_messages(p.messages);
    });
    return 0;
}
