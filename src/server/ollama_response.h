// Writing Ollama's answers from scheduler events: for /api/chat {"model", "created_at", "message": {"role":
// "assistant", "content", "tool_calls"?}, "done", ...}, for /api/generate the same with "response"; streamed
// as one JSON object per line (NDJSON) and a last one with "done": true, the done_reason ("stop", "length")
// and the counts and durations (nanoseconds) Ollama reports. With tools, a reply's calls are read as the
// OpenAI routes read them (text/tool_call_parse.h) and sent as message.tool_calls with arguments as objects;
// streaming holds back what may begin a call until the reply ends.
#pragma once

#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

#include "kvstash/chat.h"
#include "server/channel.h"
#include "server/ollama_request.h"

namespace kvstash::server {

// Now, as Ollama writes times: "2026-11-28T07:18:53.123456789Z".
std::string ollama_timestamp();

class OllamaFormatter {
public:
    OllamaFormatter(OllamaEndpoint endpoint, std::string model, ToolCallFormat tool_format);

    // Streaming: the line for a piece (empty when nothing is sent yet), and the last line.
    std::string piece_line(const ChannelEvent& piece);
    std::string final_line(const Usage& usage);

    // Not streaming: collect pieces / the finish, then the whole answer.
    void add(const ChannelEvent& event);
    nlohmann::json response(const Usage& usage);

private:
    nlohmann::json envelope() const;
    nlohmann::json content_json(const std::string& text) const;  // "message": {...} or "response": text
    void add_stats(nlohmann::json& out, const Usage& usage) const;

    OllamaEndpoint endpoint_;
    std::string model_;
    ToolCallFormat tool_format_;
    std::string text_;  // the whole reply so far
    size_t sent_ = 0;   // streaming: bytes of text_ sent
    std::string finish_reason_ = "stop";
    std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
    std::chrono::steady_clock::time_point first_piece_{};
};

}  // namespace kvstash::server
