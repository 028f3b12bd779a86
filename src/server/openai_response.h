// Writing OpenAI-style responses from scheduler events: the whole object for a non-streaming request,
// or one SSE chunk ("data: {...}\n\n") per event for a streaming one. Completions and chat completions
// differ only in shape (text vs message / delta, and their logprobs layouts).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvstash/chat.h"
#include "kvstash/tokenizer.h"
#include "server/channel.h"

namespace kvstash::server {

class CompletionFormatter {
public:
    // tool_format other than none (a chat request with tools): each reply's tool calls are read
    // (text/tool_call_parse.h) into message.tool_calls with finish_reason "tool_calls"; streaming holds back
    // the text of a call (and what may begin one) and sends the calls as delta.tool_calls when the reply ends.
    CompletionFormatter(bool chat, std::string model_id, const Tokenizer& tokenizer, int n_choices, bool logprobs,
                        ToolCallFormat tool_format = ToolCallFormat::none);

    // Streaming: the SSE text for one piece / finish event (empty when there is nothing to send).
    std::string sse_chunk(const ChannelEvent& event);
    // Streaming: the last chunk with the usage (stream_options.include_usage).
    std::string sse_usage(const Usage& usage) const;

    // Non-streaming: collects a piece / finish event; response() builds the whole object.
    void add(const ChannelEvent& event);
    nlohmann::json response(const Usage& usage) const;

    static nlohmann::json usage_json(const Usage& usage);

private:
    struct Choice {
        std::string text;
        std::string finish_reason;
        std::vector<TokenLogprob> logprobs;
        std::vector<size_t> text_offsets;  // completions: where each logprob token's piece starts in text
        bool started = false;              // streaming chat: the first chunk (with the role) was sent
        size_t sent = 0;                   // streaming with tools: bytes of text sent as content
    };
    std::string tool_chunks(Choice& choice, const ChannelEvent& finish);  // streaming with tools: the reply's end
    nlohmann::json chunk_json(const nlohmann::json& choice_json) const;
    nlohmann::json logprobs_json(const std::vector<TokenLogprob>& tokens, const std::vector<size_t>& offsets) const;
    nlohmann::json envelope() const;  // id, object, created, model

    bool chat_;
    std::string model_id_;
    const Tokenizer& tokenizer_;
    bool logprobs_;
    std::string id_;
    int64_t created_;
    std::vector<Choice> choices_;
    ToolCallFormat tool_format_;
};

}  // namespace kvstash::server
