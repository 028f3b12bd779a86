#include "server/request_job.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "kvstash/error.h"
#include "kvstash/tokenizer.h"
#include "server/api_error.h"

namespace kvstash::server {
namespace {

std::vector<int32_t> chat_tokens(const std::vector<ChatMessage>& messages, AddGenerationPrompt add_generation_prompt,
                                 ServerContext& ctx, const std::vector<std::string>& tools = {}) {
    if (!ctx.chat_template) throw bad_request(ctx.chat_template_error, "messages", "no_chat_template");
    try {
        // Only the template's markup becomes control tokens; what the client wrote stays text.
        const ChatPrompt prompt = ctx.chat_template->render_prompt(messages, tools, add_generation_prompt);
        return ctx.model->tokenizer().encode(prompt.text, AddSpecial::no, ParseSpecial::yes, prompt.content);
    } catch (const Error& e) {
        throw request_error(e, "messages", "invalid_value");
    }
}

void check_token_ids(const SamplerParams& p, const Model& model) {
    for (const auto& [id, bias] : p.logit_bias) {
        if (id >= model.n_vocab()) {
            throw bad_request("logit_bias token id " + std::to_string(id) + " is outside the vocabulary (" +
                                  std::to_string(model.n_vocab()) + " tokens)",
                              "logit_bias", "invalid_value");
        }
    }
    try {
        Sampler check(p);
    } catch (const Error& e) {
        throw request_error(e, "", "invalid_value");
    }
}

// 404 for an unknown name (the parser has checked that it is a valid one).
State fork_named_state(const std::string& name, ServerContext& ctx) {
    std::optional<State> state;
    try {
        state = ctx.states->fork(name);
    } catch (const Error& e) {
        throw ApiError(500, "state '" + name + "' could not be loaded: " + e.what(), "state", "state_load_failed");
    }
    if (!state) throw ApiError(404, "no state named '" + name + "' (see GET /v1/states)", "state", "state_not_found");
    return std::move(*state);
}

// The conversation's tokens after those the state holds; 400 unless the state holds its start.
void drop_state_tokens(const State& base, std::vector<int32_t>& prompt) {
    // The state must hold the start of this conversation (e.g. made from its system message).
    const auto held = base.tokens();
    if (held.size() > prompt.size() || !std::equal(held.begin(), held.end(), prompt.begin())) {
        throw bad_request(
            "the state's tokens are not the start of this conversation; create the state from the "
            "conversation's first messages",
            "state", "state_mismatch");
    }
    prompt.erase(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(held.size()));
}

// The prompt and max_tokens against the context: 400 context_length_exceeded when they do not fit.
void fit_context(const CompletionRequest& request, GenerationJob& job, int64_t n_ctx) {
    const bool chat = request.chat;
    const int64_t held = job.base ? job.base->n_tokens() : 0;
    const int64_t total = held + static_cast<int64_t>(job.prompt.size());
    if (total == 0) throw bad_request("the prompt is empty", chat ? "messages" : "prompt", "empty_prompt");
    if (job.prompt.empty() && job.base->last_logits().empty()) {
        throw bad_request("the state holds no logits to continue from; give a prompt to append", "prompt",
                          "invalid_value");
    }
    if (total >= n_ctx) {
        throw bad_request("the prompt has " + std::to_string(total) + " tokens but the context holds " +
                              std::to_string(n_ctx) + "; shorten it (or start the server with a larger --ctx)",
                          chat ? "messages" : "prompt", "context_length_exceeded");
    }
    if (request.max_tokens) {
        job.max_tokens = *request.max_tokens;
        if (total + job.max_tokens > n_ctx) {
            throw bad_request("this model's context holds " + std::to_string(n_ctx) + " tokens; the prompt has " +
                                  std::to_string(total) + " and max_tokens asks for " + std::to_string(job.max_tokens) +
                                  "; reduce max_tokens to at most " + std::to_string(n_ctx - total),
                              "max_tokens", "context_length_exceeded");
        }
    } else {
        // OpenAI's defaults: 16 for completions, the rest of the context for chat.
        job.max_tokens = chat ? n_ctx - total : std::min<int64_t>(16, n_ctx - total);
    }
}

// tools / tool_choice -> the job's grammar: forced (required, named), lazy (auto) or none. 400 naming
// `tools` when the model's template defines none.
void set_tool_grammar(const CompletionRequest& request, GenerationJob& job, ServerContext& ctx) {
    const ToolRequest& tools = request.tools;
    const bool has_tool_messages = std::any_of(request.messages.begin(), request.messages.end(),
                                               [](const auto& m) { return m.role == "tool" || !m.tool_calls.empty(); });
    if (tools.definitions.empty() && !has_tool_messages) return;
    if (!ctx.chat_template) throw bad_request(ctx.chat_template_error, "tools", "no_chat_template");
    const ToolCallFormat format = ctx.chat_template->tool_call_format();
    if (format == ToolCallFormat::none) {
        throw bad_request("the model's chat template '" + ctx.chat_template->name() +
                              "' defines no tools; tool calling needs a model with Qwen 2.5's or Llama 3.1/3.2's "
                              "template",
                          tools.definitions.empty() ? "messages" : "tools", "unsupported");
    }
    if (tools.choice == ToolChoice::none) return;
    std::vector<ToolSchema> callable;
    for (const ToolSchema& s : tools.schemas) {
        if (tools.choice != ToolChoice::named || s.name == tools.name) callable.push_back(s);
    }
    try {
        job.grammar = Grammar::for_tool_calls(
            format, callable, tools.parallel ? ToolCallCount::one_or_more : ToolCallCount::one, request.grammar_limits);
    } catch (const Error& e) {
        throw request_error(e, "tools", "invalid_value");
    }
    if (tools.choice == ToolChoice::automatic) job.grammar_trigger = tool_call_trigger(format);
    job.grammar_vocabulary = ctx.grammar_vocabulary();
    job.tool_call_format = format;
}

}  // namespace

// The adapter set a request names (none named: the server's default, a preset's adapters); 400 naming it when
// the server has none of that name.
std::shared_ptr<const AdapterSet> find_adapter(const std::optional<std::string>& requested, const ServerContext& ctx) {
    const std::optional<std::string> name =
        requested ? requested
                  : (ctx.options.default_adapter.empty() ? std::nullopt : std::optional(ctx.options.default_adapter));
    if (!name) return nullptr;
    const auto it = ctx.options.adapters.find(*name);
    if (it != ctx.options.adapters.end()) return it->second;
    std::string known;
    for (const auto& [n, set] : ctx.options.adapters) known += (known.empty() ? "" : ", ") + n;
    throw bad_request("unknown adapter '" + *name + "'; this server has " +
                          (known.empty() ? std::string("none (start it with --lora NAME=FILE)") : known),
                      "adapter", "adapter_not_found");
}

std::shared_ptr<const AdapterSet> default_adapters(const ServerContext& ctx) { return find_adapter(std::nullopt, ctx); }

RequestLimits request_limits(const ServerContext& ctx) {
    RequestLimits limits{ctx.options.parallel, ctx.options.grammar_limits};
    limits.grammar.deadline =
        std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                               std::chrono::duration<double>(ctx.options.prepare_timeout_s));
    return limits;
}

std::unique_ptr<GenerationJob> build_completion_job(const CompletionRequest& request, ServerContext& ctx) {
    auto job = std::make_unique<GenerationJob>();
    job->n = request.n;
    job->stop = request.stop;
    job->sampling = request.sampling;
    job->sampling.seed =
        request.seed ? *request.seed : std::random_device{}() * 0x9E3779B97F4A7C15ull + std::random_device{}();
    check_token_ids(job->sampling, *ctx.model);
    job->top_logprobs = request.top_logprobs;
    job->grammar = request.grammar;
    if (job->grammar) job->grammar_vocabulary = ctx.grammar_vocabulary();

    // The prompt, after a named state when there is one.
    job->adapters = find_adapter(request.adapter, ctx);
    if (request.state) job->base = fork_named_state(*request.state, ctx);
    if (job->base && job->base->adapters() != job->adapters) {
        // A named state's KV was computed under its own adapters: continuing it under others would mix weights.
        throw bad_request("state '" + *request.state + "' was computed under " +
                              (job->base->adapters() ? job->base->adapters()->describe() : std::string("no adapters")) +
                              ", not under " +
                              (job->adapters ? job->adapters->describe() : std::string("no adapters")) +
                              "; name the same adapter as when it was made",
                          "adapter", "state_adapter_mismatch");
    }
    if (request.chat) {
        set_tool_grammar(request, *job, ctx);
        job->prompt = chat_tokens(request.messages, AddGenerationPrompt::yes, ctx, request.tools.definitions);
        if (job->base) drop_state_tokens(*job->base, job->prompt);
    } else if (request.prompt_tokens) {
        // Token ids are taken as given (no BOS is added), as OpenAI and llama-server take them.
        for (const int32_t id : *request.prompt_tokens) {
            if (id >= ctx.model->n_vocab()) {
                throw bad_request("prompt token id " + std::to_string(id) + " is outside the vocabulary (" +
                                      std::to_string(ctx.model->n_vocab()) + " tokens)",
                                  "prompt", "invalid_value");
            }
        }
        job->prompt = *request.prompt_tokens;
    } else {
        if (!request.prompts.empty())
            throw ApiError(500, "a request with several prompts reached build_completion_job (one job per prompt)");
        // A continued state already has its BOS.
        job->prompt = ctx.model->tokenizer().encode(request.prompt.value_or(""),
                                                    job->base ? AddSpecial::no : AddSpecial::yes, ParseSpecial::yes);
    }
    // Tokenizing cannot stop midway; a prompt that took past the deadline is refused before it is queued.
    if (std::chrono::steady_clock::now() > request.grammar_limits.deadline) throw preparation_expired();
    fit_context(request, *job, job->base ? job->base->n_ctx() : ctx.scheduler->n_ctx());
    job->speculation =
        resolve_speculation(request.speculative, ctx.options.speculation, ctx.options.draft_model != nullptr);
    return job;
}

std::unique_ptr<GenerationJob> build_prefill_job(const PrefillRequest& request, ServerContext& ctx) {
    auto job = std::make_unique<GenerationJob>();
    job->kind = GenerationJob::Kind::prefill;
    job->adapters = find_adapter(request.adapter, ctx);
    if (request.prompt) {
        job->prompt = ctx.model->tokenizer().encode(*request.prompt, AddSpecial::yes, ParseSpecial::yes);
    } else {
        job->prompt = chat_tokens(
            request.messages, request.add_generation_prompt ? AddGenerationPrompt::yes : AddGenerationPrompt::no, ctx);
    }
    if (job->prompt.empty()) throw bad_request("the prompt is empty", "prompt", "empty_prompt");
    if (static_cast<int64_t>(job->prompt.size()) >= ctx.scheduler->n_ctx()) {
        throw bad_request("the prompt has " + std::to_string(job->prompt.size()) + " tokens but the context holds " +
                              std::to_string(ctx.scheduler->n_ctx()),
                          request.prompt ? "prompt" : "messages", "context_length_exceeded");
    }
    return job;
}

}  // namespace kvstash::server
