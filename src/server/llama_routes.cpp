// llama-server's own routes that its clients call, with its field names (tools/server/README.md of
// llama.cpp): POST /completion (streamed and not), GET /props, GET /slots, POST /apply-template. A
// /completion request is read as a /v1/completions one (n_predict -> max_tokens, n_probs -> logprobs,
// json_schema -> response_format, logit_bias as [[id, bias], ...] too) and runs the same way.
#include <algorithm>
#include <chrono>
#include <optional>

#include "kvstash/tokenizer.h"
#include "server/completion_run.h"
#include "server/openai_request.h"
#include "server/request_fields.h"
#include "server/request_job.h"
#include "server/request_log.h"
#include "server/routes.h"

using nlohmann::json;
using nlohmann::ordered_json;

namespace kvstash::server {
namespace {

using Clock = std::chrono::steady_clock;

// llama-server's logit_bias: {"id": bias} or [[id, bias], ...], a bias of false meaning "never".
ordered_json openai_logit_bias(const ordered_json& value) {
    if (!value.is_array()) return value;
    ordered_json out = ordered_json::object();
    for (const auto& pair : value) {
        if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_integer())
            throw wrong_type("logit_bias", "an object or an array of [token id, bias] pairs");
        out[std::to_string(pair[0].get<int64_t>())] = pair[1].is_boolean() ? ordered_json(-100) : pair[1];
    }
    return out;
}

// The /completion body as a /v1/completions one (keys in the client's order: a JSON Schema keeps it).
ordered_json openai_body(const ordered_json& body) {
    ordered_json out = ordered_json::object();
    for (const char* same : {"prompt", "temperature", "top_k", "top_p", "min_p", "seed", "stop", "repeat_penalty",
                             "presence_penalty", "frequency_penalty", "grammar", "stream"}) {
        if (body.contains(same)) out[same] = body[same];
    }
    if (body.contains("n_predict") && body["n_predict"].is_number_integer() && body["n_predict"].get<int64_t>() > 0)
        out["max_tokens"] = body["n_predict"];
    if (body.contains("n_probs") && body["n_probs"].is_number_integer() && body["n_probs"].get<int64_t>() > 0)
        out["logprobs"] = body["n_probs"];
    if (body.contains("logit_bias")) out["logit_bias"] = openai_logit_bias(body["logit_bias"]);
    if (body.contains("json_schema") && !body["json_schema"].is_null())
        out["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"schema", body["json_schema"]}}}};
    return out;
}

double ms_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

// What /completion reports of one request as it runs.
struct CompletionTally {
    std::string content;
    std::vector<int32_t> tokens;
    json probabilities = json::array();  // completion_probabilities (n_probs)
    std::string finish_reason;
    Clock::time_point start = Clock::now();
    std::optional<Clock::time_point> first_token;
};

json timings_json(const CompletionTally& t, const Usage& usage) {
    const auto end = Clock::now();
    const auto first = t.first_token.value_or(end);
    const int64_t prompt_n = usage.prompt_tokens - usage.cached_tokens;
    const double prompt_ms = ms_between(t.start, first), predicted_ms = ms_between(first, end);
    const int64_t predicted_n = usage.completion_tokens;
    auto per_second = [](int64_t n, double ms) { return ms > 0 ? 1e3 * static_cast<double>(n) / ms : 0.0; };
    auto per_token = [](int64_t n, double ms) { return n > 0 ? ms / static_cast<double>(n) : 0.0; };
    return {{"prompt_n", prompt_n},
            {"prompt_ms", prompt_ms},
            {"prompt_per_token_ms", per_token(prompt_n, prompt_ms)},
            {"prompt_per_second", per_second(prompt_n, prompt_ms)},
            {"predicted_n", predicted_n},
            {"predicted_ms", predicted_ms},
            {"predicted_per_token_ms", per_token(predicted_n, predicted_ms)},
            {"predicted_per_second", per_second(predicted_n, predicted_ms)}};
}

json generation_settings(const CompletionRequest& request, const ServerContext& ctx) {
    return {{"n_ctx", ctx.scheduler->n_ctx()},
            {"n_predict", request.max_tokens.value_or(-1)},
            {"model", ctx.model_id},
            {"temperature", request.sampling.temperature},
            {"top_k", request.sampling.top_k},
            {"top_p", request.sampling.top_p},
            {"min_p", request.sampling.min_p},
            {"repeat_penalty", request.sampling.repeat_penalty},
            {"presence_penalty", request.sampling.presence_penalty},
            {"frequency_penalty", request.sampling.frequency_penalty},
            {"seed", request.seed ? json(*request.seed) : json(-1)},
            {"stop", request.stop},
            {"n_probs", request.logprobs ? std::max(request.top_logprobs, 0) : 0},
            {"stream", request.stream}};
}

json probability_json(const Tokenizer& tokenizer, const TokenLogprob& lp) {
    json top = json::array();
    for (const auto& [id, logprob] : lp.top)
        top.push_back({{"id", id}, {"token", tokenizer.token_piece(id)}, {"logprob", logprob}});
    return {
        {"id", lp.token}, {"token", tokenizer.token_piece(lp.token)}, {"logprob", lp.logprob}, {"top_logprobs", top}};
}

void tally(CompletionTally& t, const ChannelEvent& event, const Tokenizer& tokenizer, bool probabilities) {
    if (event.kind == ChannelEvent::Kind::finish) {
        t.finish_reason = event.finish_reason;
        return;
    }
    if (!t.first_token) t.first_token = Clock::now();
    t.content += event.text;
    if (event.logprob) {
        t.tokens.push_back(event.logprob->token);
        if (probabilities) t.probabilities.push_back(probability_json(tokenizer, *event.logprob));
    }
}

// The whole object llama-server sends at the end (and as the last event of a stream, with content "").
struct CompletionFlags {
    bool return_tokens = false;  // "tokens": the generated ids
    bool probabilities = false;  // n_probs > 0: completion_probabilities
};

json final_json(const CompletionTally& t, const Usage& usage, const CompletionRequest& request,
                const CompletionRun& run, ServerContext& ctx, CompletionFlags flags, bool streamed) {
    json out = {{"index", 0},
                {"content", streamed ? std::string() : t.content},
                {"tokens", flags.return_tokens && !streamed ? json(t.tokens) : json::array()},
                {"id_slot", 0},
                {"stop", true},
                {"model", ctx.model_id},
                {"tokens_predicted", usage.completion_tokens},
                {"tokens_evaluated", usage.prompt_tokens},
                {"generation_settings", generation_settings(request, ctx)},
                {"prompt", ctx.model->tokenizer().decode(run.first_prompt())},
                {"has_new_line", t.content.find('\n') != std::string::npos},
                {"truncated", false},
                {"stop_type", t.finish_reason == "length" ? "limit" : "eos"},
                {"stopping_word", ""},
                {"tokens_cached", usage.cached_tokens},
                {"timings", timings_json(t, usage)}};
    if (flags.probabilities && !streamed) out["completion_probabilities"] = t.probabilities;
    return out;
}

void handle_completion(const httplib::Request& req, httplib::Response& res, ServerContext& ctx) {
    require_body_size(req, ctx);
    (void)parse_json_body(req.body);  // 400 for a body that is not a JSON object
    const ordered_json body = ordered_json::parse(req.body);
    const std::string translated = openai_body(body).dump();
    CompletionRequest request =
        parse_completion_request(parse_json_body(translated), Endpoint::text, request_limits(ctx), &translated);
    if (!request.prompts.empty()) throw bad_request("'prompt' must be one prompt", "prompt", "invalid_type");
    CompletionFlags flags;
    flags.return_tokens = body.contains("return_tokens") && body["return_tokens"] == true;
    flags.probabilities = request.logprobs;
    if (flags.return_tokens && !request.logprobs) {
        request.logprobs = true;  // the pieces then carry their token ids; no probabilities are sent
        request.top_logprobs = 0;
    }
    // llama-server's n_predict -1 (the default): until the end of generation or of the context.
    CompletionRequest run_request = request;
    if (!run_request.max_tokens) {
        const int64_t prompt =
            run_request.prompt_tokens
                ? static_cast<int64_t>(run_request.prompt_tokens->size())
                : static_cast<int64_t>(ctx.model->tokenizer()
                                           .encode(run_request.prompt.value_or(""), AddSpecial::yes, ParseSpecial::yes)
                                           .size());
        run_request.max_tokens = std::max<int64_t>(1, ctx.scheduler->n_ctx() - prompt);
    }
    auto run = std::make_shared<CompletionRun>(ctx, run_request);
    auto t = std::make_shared<CompletionTally>();
    const Tokenizer& tokenizer = ctx.model->tokenizer();
    if (!request.stream) {
        const Usage usage =
            wait_for_run(*run, [&](const ChannelEvent& e) { tally(*t, e, tokenizer, flags.probabilities); });
        send_json(res, final_json(*t, usage, request, *run, ctx, flags, false));
        return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [run, t, request, flags, &ctx](size_t, httplib::DataSink& sink) {
            auto write = [&](const json& event) {
                const std::string text = "data: " + dump_json(event) + "\n\n";
                if (sink.write(text.data(), text.size())) return true;
                run->cancel();
                return false;
            };
            std::vector<ChannelEvent> events;
            while (!run->wait(events, std::chrono::milliseconds(100))) {
                if (!sink.is_writable()) {
                    run->cancel();
                    return false;
                }
            }
            const Tokenizer& tokenizer = ctx.model->tokenizer();
            for (const ChannelEvent& event : events) {
                if (event.kind == ChannelEvent::Kind::error) {
                    write(error_json(event.status, event.message));
                    sink.done();
                    return true;
                }
                if (event.kind == ChannelEvent::Kind::done) {
                    if (!write(final_json(*t, event.usage, request, *run, ctx, flags, true))) return false;
                    sink.done();
                    return true;
                }
                tally(*t, event, tokenizer, flags.probabilities);
                if (event.kind != ChannelEvent::Kind::piece) continue;
                request_log_first_token();
                json chunk = {{"index", 0}, {"content", event.text}, {"stop", false}, {"id_slot", 0}};
                chunk["tokens"] =
                    flags.return_tokens && event.logprob ? json::array({event.logprob->token}) : json::array();
                if (flags.probabilities && event.logprob)
                    chunk["completion_probabilities"] = json::array({probability_json(tokenizer, *event.logprob)});
                if (!write(chunk)) return false;
            }
            return true;
        },
        [run](bool success) {
            if (!success) run->cancel();
        });
}

json props_json(const ServerContext& ctx) {
    const Tokenizer& tokenizer = ctx.model->tokenizer();
    json settings = {
        {"n_ctx", ctx.scheduler->n_ctx()},
        {"model", ctx.model_id},
        {"params", {{"temperature", 1.0}, {"top_k", 40}, {"top_p", 1.0}, {"min_p", 0.0}, {"n_predict", -1}}}};
    return {{"default_generation_settings", settings},
            {"total_slots", ctx.scheduler->parallel()},
            {"model_path", ctx.model->path()},
            {"model_alias", ctx.model_id},
            {"chat_template", ctx.chat_template ? ctx.chat_template->name() : std::string()},
            {"bos_token", tokenizer.bos() >= 0 ? tokenizer.token_piece(tokenizer.bos()) : std::string()},
            {"eos_token", tokenizer.eos() >= 0 ? tokenizer.token_piece(tokenizer.eos()) : std::string()},
            {"modalities", {{"vision", false}, {"audio", false}}},
            {"build_info", "kvstash"}};
}

// One entry per sequence slot (--parallel). kvstash does not pin requests to slots: the first
// `active_sequences` are shown as processing.
json slots_json(const ServerContext& ctx) {
    json slots = json::array();
    const int64_t active = ctx.metrics.active_sequences.load();
    for (int i = 0; i < ctx.scheduler->parallel(); ++i) {
        slots.push_back({{"id", i},
                         {"n_ctx", ctx.scheduler->n_ctx()},
                         {"is_processing", i < active},
                         {"speculative", false},
                         {"params", {{"n_predict", -1}}}});
    }
    return slots;
}

}  // namespace

void register_llama_routes(RouteTable& http, ServerContext& ctx) {
    http.Post("/completion", [&ctx](const httplib::Request& req, httplib::Response& res) {
        guarded(res, [&] { handle_completion(req, res, ctx); });
    });
    http.Get("/props", [&ctx](const httplib::Request&, httplib::Response& res) { send_json(res, props_json(ctx)); });
    http.Get("/slots", [&ctx](const httplib::Request&, httplib::Response& res) { send_json(res, slots_json(ctx)); });
    http.Post("/apply-template", [&ctx](const httplib::Request& req, httplib::Response& res) {
        guarded(res, [&] {
            require_body_size(req, ctx);
            const json body = parse_json_body(req.body);
            const json* messages = field(body, "messages");
            if (!messages) throw bad_request("'messages' is required", "messages", "missing_field");
            if (!ctx.chat_template) throw bad_request(ctx.chat_template_error, "messages", "no_chat_template");
            const std::vector<ChatMessage> parsed = get_messages(*messages);
            send_json(res, {{"prompt", ctx.chat_template->render(parsed, AddGenerationPrompt::yes)}});
        });
    });
}

}  // namespace kvstash::server
