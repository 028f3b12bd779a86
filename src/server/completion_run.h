// The jobs of one completion request, submitted to the scheduler together: one per prompt of an array
// `prompt` (OpenAI's completions; one job otherwise). Their events are read in prompt order, with each
// choice's index moved to prompt * n + choice (OpenAI's numbering), the prompt's text first in every
// choice with `echo`, and one `done` with the usage of all of them after the last job's end. Shared by
// /v1/completions, /v1/chat/completions, /completion (llama-server) and /v1/responses.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/channel.h"
#include "server/openai_request.h"
#include "server/server_context.h"

namespace kvstash::server {

class CompletionRun {
public:
    // Builds every job (400 for a bad request) and submits them; 503 queue_full (the jobs already
    // submitted cancelled) when the scheduler's queue cannot take them all.
    CompletionRun(ServerContext& ctx, const CompletionRequest& request);
    ~CompletionRun();  // cancels what has not finished (the client went away)
    CompletionRun(const CompletionRun&) = delete;
    CompletionRun& operator=(const CompletionRun&) = delete;

    int n_choices() const { return n_ * static_cast<int>(channels_.size()); }
    ToolCallFormat tool_call_format() const { return tool_call_format_; }
    // The first prompt's tokens (what the single-prompt routes report as the prompt).
    const std::vector<int32_t>& first_prompt() const { return first_prompt_; }

    // Moves the events that are ready to `out` (waiting up to `timeout` for one): pieces and finishes
    // renumbered, then `done` once, or an `error` (after which nothing more comes). False when none came.
    bool wait(std::vector<ChannelEvent>& out, std::chrono::milliseconds timeout);
    bool finished() const { return finished_; }
    void cancel();

private:
    void push_echo(std::vector<ChannelEvent>& out);  // the current job's prompt text, once per choice

    std::vector<std::shared_ptr<RequestChannel>> channels_;
    std::vector<std::string> echo_;  // per job: the prompt text to repeat (empty: no echo)
    std::vector<int32_t> first_prompt_;
    ToolCallFormat tool_call_format_ = ToolCallFormat::none;
    int n_ = 1;
    size_t current_ = 0;   // the job whose events are read now
    bool echoed_ = false;  // the current job's echo went out
    bool finished_ = false;
    Usage total_;
};

// Waits for the whole run; every piece / finish goes to `on_event`. Returns the summed usage; throws
// ApiError on an error event.
Usage wait_for_run(CompletionRun& run, const std::function<void(const ChannelEvent&)>& on_event);

}  // namespace kvstash::server
