#include "server/openai_response.h"

#include <chrono>
#include <random>

#include "server/api_error.h"
#include "text/tool_call_parse.h"

using nlohmann::json;

namespace kvstash::server {
namespace {

std::string random_id(const char* prefix) {
    static constexpr char digits[] = "0123456789abcdefghijklmnopqrstuvwxyz";
    std::random_device device;
    std::mt19937_64 rng((static_cast<uint64_t>(device()) << 32) ^ device());
    std::string id = prefix;
    for (int i = 0; i < 24; ++i) id += digits[rng() % 36];
    return id;
}

json bytes_json(const std::string& s) {
    json out = json::array();
    for (unsigned char c : s) out.push_back(static_cast<int>(c));
    return out;
}

// OpenAI's tool_calls entries (with `index` for a stream's delta).
json tool_calls_json(const std::vector<ToolCall>& calls, bool with_index) {
    json out = json::array();
    for (size_t i = 0; i < calls.size(); ++i) {
        json call = {{"id", random_id("call_")},
                     {"type", "function"},
                     {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
        if (with_index) call["index"] = i;
        out.push_back(std::move(call));
    }
    return out;
}

}  // namespace

CompletionFormatter::CompletionFormatter(bool chat, std::string model_id, const Tokenizer& tokenizer, int n_choices,
                                         bool logprobs, ToolCallFormat tool_format)
    : chat_(chat),
      model_id_(std::move(model_id)),
      tokenizer_(tokenizer),
      logprobs_(logprobs),
      id_(random_id(chat ? "chatcmpl-" : "cmpl-")),
      created_(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                   .count()),
      choices_(static_cast<size_t>(n_choices)),
      tool_format_(chat ? tool_format : ToolCallFormat::none) {}

json CompletionFormatter::chunk_json(const json& choice_json) const {
    json chunk = envelope();
    chunk["object"] = chat_ ? "chat.completion.chunk" : "text_completion";
    chunk["choices"] = json::array({choice_json});
    return chunk;
}

std::string CompletionFormatter::tool_chunks(Choice& choice, const ChannelEvent& finish) {
    const ParsedToolCalls parsed = parse_tool_calls(tool_format_, choice.text);
    json c = {{"index", finish.choice}, {"finish_reason", nullptr}, {"logprobs", nullptr}};
    std::string out;
    std::string finish_reason = finish.finish_reason;
    if (!parsed.calls.empty()) {
        c["delta"] = {{"tool_calls", tool_calls_json(parsed.calls, true)}};
        if (finish_reason == "stop") finish_reason = "tool_calls";
    } else {
        c["delta"] = {{"content", choice.text.substr(std::min(choice.sent, choice.text.size()))}};
    }
    if (!choice.started) c["delta"]["role"] = "assistant";
    choice.started = true;
    choice.sent = choice.text.size();
    out = "data: " + dump_json(chunk_json(c)) + "\n\n";
    json f = {
        {"index", finish.choice}, {"finish_reason", finish_reason}, {"delta", json::object()}, {"logprobs", nullptr}};
    return out + "data: " + dump_json(chunk_json(f)) + "\n\n";
}

json CompletionFormatter::envelope() const {
    return {{"id", id_}, {"created", created_}, {"model", model_id_}, {"system_fingerprint", nullptr}};
}

json CompletionFormatter::usage_json(const Usage& usage) {
    return {{"prompt_tokens", usage.prompt_tokens},
            {"completion_tokens", usage.completion_tokens},
            {"total_tokens", usage.prompt_tokens + usage.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", usage.cached_tokens}}}};
}

json CompletionFormatter::logprobs_json(const std::vector<TokenLogprob>& tokens,
                                        const std::vector<size_t>& offsets) const {
    if (chat_) {
        json content = json::array();
        for (const TokenLogprob& t : tokens) {
            const std::string piece = tokenizer_.token_piece(t.token);
            json top = json::array();
            for (const auto& [id, lp] : t.top) {
                const std::string alt = tokenizer_.token_piece(id);
                top.push_back({{"token", alt}, {"logprob", lp}, {"bytes", bytes_json(alt)}});
            }
            content.push_back(
                {{"token", piece}, {"logprob", t.logprob}, {"bytes", bytes_json(piece)}, {"top_logprobs", top}});
        }
        return {{"content", content}};
    }
    json out = {{"tokens", json::array()},
                {"token_logprobs", json::array()},
                {"top_logprobs", json::array()},
                {"text_offset", json::array()}};
    for (size_t i = 0; i < tokens.size(); ++i) {
        out["tokens"].push_back(tokenizer_.token_piece(tokens[i].token));
        out["token_logprobs"].push_back(tokens[i].logprob);
        json top = json::object();
        for (const auto& [id, lp] : tokens[i].top) top[tokenizer_.token_piece(id)] = lp;
        out["top_logprobs"].push_back(top);
        out["text_offset"].push_back(i < offsets.size() ? offsets[i] : 0);
    }
    return out;
}

std::string CompletionFormatter::sse_chunk(const ChannelEvent& event) {
    Choice& choice = choices_.at(static_cast<size_t>(event.choice));
    json c = {{"index", event.choice}, {"finish_reason", nullptr}};
    const bool tools = tool_format_ != ToolCallFormat::none;
    if (tools && event.kind == ChannelEvent::Kind::finish) return tool_chunks(choice, event);
    if (event.kind == ChannelEvent::Kind::finish) {
        c["finish_reason"] = event.finish_reason;
        if (chat_)
            c["delta"] = json::object();
        else
            c["text"] = "";
    } else if (event.kind == ChannelEvent::Kind::piece) {
        std::vector<TokenLogprob> lps;
        std::vector<size_t> offsets{choice.text.size()};
        if (event.logprob) lps.push_back(*event.logprob);
        if (tools) {
            // Content only up to where a call may begin; the rest waits for the reply's end.
            choice.text += event.text;
            const size_t free = std::max(choice.sent, tool_call_free_prefix(tool_format_, choice.text));
            const std::string content = choice.text.substr(choice.sent, free - choice.sent);
            choice.sent = free;
            if (content.empty() && !event.logprob) return {};
            c["delta"] = {{"content", content}};
            if (!choice.started) c["delta"]["role"] = "assistant";
            choice.started = true;
        } else if (chat_) {
            c["delta"] = {{"content", event.text}};
            if (!choice.started) c["delta"]["role"] = "assistant";
            choice.started = true;
        } else {
            c["text"] = event.text;
        }
        if (!tools) choice.text += event.text;
        c["logprobs"] = logprobs_ && event.logprob ? logprobs_json(lps, offsets) : json(nullptr);
    } else {
        return {};
    }
    if (!c.contains("logprobs")) c["logprobs"] = nullptr;
    json chunk = envelope();
    chunk["object"] = chat_ ? "chat.completion.chunk" : "text_completion";
    chunk["choices"] = json::array({c});
    return "data: " + dump_json(chunk) + "\n\n";
}

std::string CompletionFormatter::sse_usage(const Usage& usage) const {
    json chunk = envelope();
    chunk["object"] = chat_ ? "chat.completion.chunk" : "text_completion";
    chunk["choices"] = json::array();
    chunk["usage"] = usage_json(usage);
    return "data: " + dump_json(chunk) + "\n\n";
}

void CompletionFormatter::add(const ChannelEvent& event) {
    Choice& choice = choices_.at(static_cast<size_t>(event.choice));
    if (event.kind == ChannelEvent::Kind::piece) {
        if (event.logprob) {
            choice.text_offsets.push_back(choice.text.size());
            choice.logprobs.push_back(*event.logprob);
        }
        choice.text += event.text;
    } else if (event.kind == ChannelEvent::Kind::finish) {
        choice.finish_reason = event.finish_reason;
    }
}

json CompletionFormatter::response(const Usage& usage) const {
    json out = envelope();
    out["object"] = chat_ ? "chat.completion" : "text_completion";
    out["choices"] = json::array();
    for (size_t i = 0; i < choices_.size(); ++i) {
        const Choice& choice = choices_[i];
        json c = {{"index", i}, {"finish_reason", choice.finish_reason}};
        const ParsedToolCalls parsed =
            tool_format_ != ToolCallFormat::none ? parse_tool_calls(tool_format_, choice.text) : ParsedToolCalls{};
        if (!parsed.calls.empty()) {
            c["message"] = {{"role", "assistant"},
                            {"content", parsed.content.empty() ? json(nullptr) : json(parsed.content)},
                            {"tool_calls", tool_calls_json(parsed.calls, false)}};
            if (choice.finish_reason == "stop") c["finish_reason"] = "tool_calls";
        } else if (chat_)
            c["message"] = {{"role", "assistant"}, {"content", choice.text}};
        else
            c["text"] = choice.text;
        c["logprobs"] = logprobs_ ? logprobs_json(choice.logprobs, choice.text_offsets) : json(nullptr);
        out["choices"].push_back(c);
    }
    out["usage"] = usage_json(usage);
    return out;
}

}  // namespace kvstash::server
