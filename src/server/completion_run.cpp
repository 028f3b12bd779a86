#include "server/completion_run.h"

#include "kvstash/tokenizer.h"
#include "server/api_error.h"
#include "server/request_job.h"
#include "server/request_log.h"

namespace kvstash::server {
namespace {

// One request per prompt of an array `prompt` (the request itself otherwise).
std::vector<CompletionRequest> one_per_prompt(const CompletionRequest& request) {
    if (request.prompts.empty()) return {request};
    std::vector<CompletionRequest> parts;
    for (const PromptInput& input : request.prompts) {
        CompletionRequest part = request;
        part.prompts.clear();
        if (input.tokens) {
            part.prompt_tokens = input.tokens;
        } else {
            part.prompt = input.text;
        }
        parts.push_back(std::move(part));
    }
    return parts;
}

}  // namespace

CompletionRun::CompletionRun(ServerContext& ctx, const CompletionRequest& request) : n_(request.n) {
    std::vector<std::unique_ptr<GenerationJob>> jobs;
    for (const CompletionRequest& part : one_per_prompt(request)) {
        jobs.push_back(build_completion_job(part, ctx));
        if (request.echo) {
            echo_.push_back(part.prompt ? *part.prompt : ctx.model->tokenizer().decode(*part.prompt_tokens));
        }
    }
    first_prompt_ = jobs.front()->prompt;
    tool_call_format_ = jobs.front()->tool_call_format;
    for (auto& job : jobs) {
        auto channel = job->channel;
        if (!ctx.scheduler->submit(std::move(job))) {
            cancel();
            channels_.clear();
            throw ApiError(
                503, "the server is busy (" + std::to_string(ctx.options.queue) + " requests waiting); retry later", "",
                "queue_full");
        }
        channels_.push_back(std::move(channel));
    }
}

CompletionRun::~CompletionRun() {
    if (!finished_) cancel();
}

void CompletionRun::cancel() {
    for (auto& channel : channels_) channel->cancel();
}

void CompletionRun::push_echo(std::vector<ChannelEvent>& out) {
    echoed_ = true;
    if (echo_.empty()) return;
    for (int c = 0; c < n_; ++c) {
        ChannelEvent piece;
        piece.choice = static_cast<int>(current_) * n_ + c;
        piece.text = echo_[current_];
        out.push_back(std::move(piece));
    }
}

bool CompletionRun::wait(std::vector<ChannelEvent>& out, std::chrono::milliseconds timeout) {
    if (finished_) return false;
    const size_t before = out.size();
    if (!echoed_) push_echo(out);
    std::vector<ChannelEvent> events;
    channels_[current_]->wait(events, out.size() > before ? std::chrono::milliseconds(0) : timeout);
    for (ChannelEvent& event : events) {
        switch (event.kind) {
            case ChannelEvent::Kind::piece:
            case ChannelEvent::Kind::finish:
                event.choice += static_cast<int>(current_) * n_;
                out.push_back(std::move(event));
                break;
            case ChannelEvent::Kind::done:
                total_.prompt_tokens += event.usage.prompt_tokens;
                total_.cached_tokens += event.usage.cached_tokens;
                total_.completion_tokens += event.usage.completion_tokens;
                if (++current_ < channels_.size()) {
                    echoed_ = false;
                    push_echo(out);
                    break;
                }
                event.usage = total_;
                request_log_tokens(total_.prompt_tokens, total_.cached_tokens, total_.completion_tokens);
                out.push_back(std::move(event));
                finished_ = true;
                return true;
            case ChannelEvent::Kind::error:
                out.push_back(std::move(event));
                finished_ = true;
                cancel();
                return true;
        }
    }
    return out.size() > before;
}

Usage wait_for_run(CompletionRun& run, const std::function<void(const ChannelEvent&)>& on_event) {
    std::vector<ChannelEvent> events;
    while (true) {
        events.clear();
        if (!run.wait(events, std::chrono::milliseconds(1000))) continue;
        for (const ChannelEvent& event : events) {
            switch (event.kind) {
                case ChannelEvent::Kind::piece:
                    request_log_first_token();
                    on_event(event);
                    break;
                case ChannelEvent::Kind::finish: on_event(event); break;
                case ChannelEvent::Kind::done: return event.usage;
                case ChannelEvent::Kind::error: throw ApiError(event.status, event.message);
            }
        }
    }
}

}  // namespace kvstash::server
