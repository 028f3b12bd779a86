// POST /v1/completions, POST /v1/chat/completions (streaming and not), GET /v1/models, GET /health,
// GET /metrics.
#include <chrono>

#include "kvstash/error.h"
#include "server/completion_run.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/request_job.h"
#include "server/request_log.h"
#include "server/routes.h"

using nlohmann::json;

namespace kvstash::server {

void send_json(httplib::Response& res, const json& body, int status) {
    res.status = status;
    res.set_content(dump_json(body), "application/json");
}

void send_error(httplib::Response& res, const ApiError& error) {
    if (error.status() == 503) res.set_header("Retry-After", "1");
    send_json(res, error_json(error.status(), error.what(), error.param(), error.code()), error.status());
}

void guarded(httplib::Response& res, const std::function<void()>& body) {
    try {
        body();
    } catch (const ApiError& e) {
        send_error(res, e);
    } catch (const Error& e) {
        send_error(res, api_error(e));
    } catch (const json::exception& e) {
        send_error(res, bad_request(std::string("bad JSON value: ") + e.what()));
    }
}

void require_body_size(const httplib::Request& req, const ServerContext& ctx) {
    if (req.body.size() > ctx.options.max_body) {
        throw ApiError(413,
                       "the request body has " + std::to_string(req.body.size()) + " bytes; the limit is " +
                           std::to_string(ctx.options.max_body) + " (--max-body)",
                       "", "request_too_large");
    }
}

namespace {

ApiError queue_full(const ServerContext& ctx) {
    return ApiError(503, "the server is busy (" + std::to_string(ctx.options.queue) + " requests waiting); retry later",
                    "", "queue_full");
}

void log_usage(const Usage& usage) {
    request_log_tokens(usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens);
}

// Blocks until a prefill job is done. Throws ApiError on an error event.
Usage wait_for_prefill(RequestChannel& channel, std::shared_ptr<State>* state) {
    std::vector<ChannelEvent> events;
    while (true) {
        events.clear();
        if (!channel.wait(events, std::chrono::milliseconds(1000))) continue;
        for (ChannelEvent& event : events) {
            switch (event.kind) {
                case ChannelEvent::Kind::piece:
                case ChannelEvent::Kind::finish: break;
                case ChannelEvent::Kind::done:
                    log_usage(event.usage);
                    if (state) *state = std::move(event.state);
                    return event.usage;
                case ChannelEvent::Kind::error: throw ApiError(event.status, event.message);
            }
        }
    }
}

void stream_response(httplib::Response& res, std::shared_ptr<CompletionRun> run,
                     std::shared_ptr<CompletionFormatter> formatter, bool include_usage) {
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [run, formatter, include_usage](size_t, httplib::DataSink& sink) {
            auto write = [&sink, &run](const std::string& text) {
                if (text.empty() || sink.write(text.data(), text.size())) return true;
                run->cancel();  // the client went away: the scheduler frees the sequences at its next step
                return false;
            };
            std::vector<ChannelEvent> events;
            while (!run->wait(events, std::chrono::milliseconds(100))) {
                if (!sink.is_writable()) {
                    run->cancel();
                    return false;
                }
            }
            for (const ChannelEvent& event : events) {
                if (event.kind == ChannelEvent::Kind::piece) request_log_first_token();
                if (event.kind == ChannelEvent::Kind::done) {
                    if (include_usage && !write(formatter->sse_usage(event.usage))) return false;
                    if (!write("data: [DONE]\n\n")) return false;
                    sink.done();
                    return true;
                }
                if (event.kind == ChannelEvent::Kind::error) {
                    write("data: " + dump_json(error_json(event.status, event.message)) + "\n\n");
                    sink.done();
                    return true;
                }
                if (!write(formatter->sse_chunk(event))) return false;
            }
            return true;
        },
        [run](bool success) {
            if (!success) run->cancel();
        });
}

void handle_completion(const httplib::Request& req, httplib::Response& res, ServerContext& ctx, Endpoint endpoint) {
    require_body_size(req, ctx);
    const CompletionRequest request =
        parse_completion_request(parse_json_body(req.body), endpoint, request_limits(ctx), &req.body);
    auto run = std::make_shared<CompletionRun>(ctx, request);
    auto formatter = std::make_shared<CompletionFormatter>(request.chat, ctx.model_id, ctx.model->tokenizer(),
                                                           run->n_choices(), request.logprobs, run->tool_call_format());
    if (request.stream) {
        stream_response(res, run, formatter, request.include_usage);
        return;
    }
    const Usage usage = wait_for_run(*run, [&](const ChannelEvent& event) { formatter->add(event); });
    send_json(res, formatter->response(usage));
}

}  // namespace

// Used by the state routes too: runs a prefill job to its end and returns the state.
std::shared_ptr<State> run_prefill(ServerContext& ctx, std::unique_ptr<GenerationJob> job, Usage& usage) {
    auto channel = job->channel;
    if (!ctx.scheduler->submit(std::move(job))) throw queue_full(ctx);
    std::shared_ptr<State> state;
    usage = wait_for_prefill(*channel, &state);
    if (!state) throw ApiError(500, "the prefill finished without a state");
    return state;
}

void register_openai_routes(RouteTable& http, ServerContext& ctx) {
    http.Post("/v1/completions", [&ctx](const httplib::Request& req, httplib::Response& res) {
        guarded(res, [&] { handle_completion(req, res, ctx, Endpoint::text); });
    });
    http.Post("/v1/chat/completions", [&ctx](const httplib::Request& req, httplib::Response& res) {
        guarded(res, [&] { handle_completion(req, res, ctx, Endpoint::chat); });
    });
    http.Get("/v1/models", [&ctx](const httplib::Request&, httplib::Response& res) {
        json model = {
            {"id", ctx.model_id},
            {"object", "model"},
            {"created", 0},
            {"owned_by", "kvstash"},
            {"meta",
             {{"n_ctx", ctx.scheduler->n_ctx()}, {"n_vocab", ctx.model->n_vocab()}, {"path", ctx.model->path()}}}};
        send_json(res, {{"object", "list"}, {"data", json::array({model})}});
    });
    http.Get("/health", [](const httplib::Request&, httplib::Response& res) { send_json(res, {{"status", "ok"}}); });
    http.Get("/metrics", [&ctx](const httplib::Request&, httplib::Response& res) {
        res.set_content(ctx.metrics.render(ctx.scheduler->cache_stats(), ctx.states->totals()),
                        "text/plain; version=0.0.4");
    });
}

}  // namespace kvstash::server
