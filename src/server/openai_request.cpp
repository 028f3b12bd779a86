#include "server/openai_request.h"

#include <cmath>
#include <random>

#include "kvstash/error.h"
#include "kvstash/tokenizer.h"
#include "server/api_error.h"

using nlohmann::json;

namespace kvstash::server {
namespace {

// The field, or null when absent or JSON null (OpenAI treats both as "not given").
const json* field(const json& body, const char* name) {
    auto it = body.find(name);
    if (it == body.end() || it->is_null()) return nullptr;
    return &*it;
}

ApiError wrong_type(const char* name, const char* expected) {
    return bad_request(std::string("'") + name + "' must be " + expected, name, "invalid_type");
}

int64_t get_int(const json& value, const char* name, int64_t min, int64_t max) {
    if (!value.is_number_integer()) throw wrong_type(name, "an integer");
    if (value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(max)) {
        throw bad_request("'" + std::string(name) + "' must be at most " + std::to_string(max), name, "invalid_value");
    }
    const int64_t v = value.get<int64_t>();
    if (v < min || v > max) {
        throw bad_request("'" + std::string(name) + "' must be between " + std::to_string(min) + " and " +
                              std::to_string(max) + ", got " + std::to_string(v),
                          name, "invalid_value");
    }
    return v;
}

double get_number(const json& value, const char* name, double min, double max) {
    if (!value.is_number()) throw wrong_type(name, "a number");
    const double v = value.get<double>();
    if (!(v >= min && v <= max)) {
        throw bad_request(
            "'" + std::string(name) + "' must be between " + std::to_string(min) + " and " + std::to_string(max), name,
            "invalid_value");
    }
    return v;
}

bool get_bool(const json& value, const char* name) {
    if (!value.is_boolean()) throw wrong_type(name, "true or false");
    return value.get<bool>();
}

std::string get_string(const json& value, const char* name) {
    if (!value.is_string()) throw wrong_type(name, "a string");
    return value.get<std::string>();
}

std::vector<ChatMessage> parse_messages(const json& value) {
    if (!value.is_array() || value.empty())
        throw wrong_type("messages", "a non-empty array of {role, content} objects");
    std::vector<ChatMessage> messages;
    for (const json& m : value) {
        if (!m.is_object()) throw wrong_type("messages", "an array of {role, content} objects");
        const json* role = field(m, "role");
        if (!role || !role->is_string()) throw wrong_type("messages", "an array of objects with a string 'role'");
        ChatMessage message{role->get<std::string>(), {}};
        if (message.role != "system" && message.role != "user" && message.role != "assistant") {
            throw bad_request("unsupported message role '" + message.role + "' (use system, user or assistant)",
                              "messages", "invalid_value");
        }
        const json* content = field(m, "content");
        if (content && content->is_string()) {
            message.content = content->get<std::string>();
        } else if (content && content->is_array()) {
            // Content parts: only text parts can be read by a text model.
            for (const json& part : *content) {
                if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
                    !part["text"].is_string()) {
                    throw bad_request("message content parts must be {\"type\": \"text\", \"text\": \"...\"}",
                                      "messages", "invalid_value");
                }
                message.content += part["text"].get<std::string>();
            }
        } else if (content) {
            throw wrong_type("messages", "an array of objects whose 'content' is a string or an array of text parts");
        }
        messages.push_back(std::move(message));
    }
    return messages;
}

std::vector<int32_t> chat_tokens(const json& messages_json, bool add_generation_prompt, ServerContext& ctx) {
    if (!ctx.chat_template) throw bad_request(ctx.chat_template_error, "messages", "no_chat_template");
    const std::vector<ChatMessage> messages = parse_messages(messages_json);
    try {
        const std::string text = ctx.chat_template->render(
            messages, add_generation_prompt ? AddGenerationPrompt::yes : AddGenerationPrompt::no);
        return ctx.model->tokenizer().encode(text, AddSpecial::no, ParseSpecial::yes);
    } catch (const Error& e) {
        throw bad_request(e.what(), "messages", "invalid_value");
    }
}

std::vector<std::string> parse_stop(const json& value) {
    std::vector<std::string> stops;
    if (value.is_string()) {
        stops.push_back(value.get<std::string>());
    } else if (value.is_array()) {
        for (const json& s : value) {
            if (!s.is_string()) throw wrong_type("stop", "a string or an array of strings");
            stops.push_back(s.get<std::string>());
        }
    } else {
        throw wrong_type("stop", "a string or an array of strings");
    }
    if (stops.size() > 16) throw bad_request("at most 16 stop strings", "stop", "invalid_value");
    for (const auto& s : stops) {
        if (s.empty()) throw bad_request("a stop string is empty", "stop", "invalid_value");
    }
    return stops;
}

SamplerParams parse_sampling(const json& body) {
    // OpenAI's defaults (temperature 1, top_p 1, no min-p), and llama.cpp's server's top-k 40: it cuts
    // only the far tail, and spares sorting the whole vocabulary for every token (kvstash::Sampler sorts
    // all candidates when neither top-k nor min-p narrows them first: ~50k ids for SmolLM2).
    SamplerParams p;
    p.temperature = 1.0f;
    p.top_k = 40;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    if (const json* v = field(body, "temperature"))
        p.temperature = static_cast<float>(get_number(*v, "temperature", 0.0, 100.0));
    if (const json* v = field(body, "top_p")) p.top_p = static_cast<float>(get_number(*v, "top_p", 0.0, 1.0));
    if (const json* v = field(body, "top_k")) p.top_k = static_cast<int32_t>(get_int(*v, "top_k", 0, 1 << 20));
    if (const json* v = field(body, "min_p")) p.min_p = static_cast<float>(get_number(*v, "min_p", 0.0, 1.0));
    if (const json* v = field(body, "presence_penalty"))
        p.presence_penalty = static_cast<float>(get_number(*v, "presence_penalty", -2.0, 2.0));
    if (const json* v = field(body, "frequency_penalty"))
        p.frequency_penalty = static_cast<float>(get_number(*v, "frequency_penalty", -2.0, 2.0));
    if (const json* v = field(body, "repeat_penalty"))
        p.repeat_penalty = static_cast<float>(get_number(*v, "repeat_penalty", 1e-6, 100.0));
    if (const json* v = field(body, "seed")) {
        p.seed = static_cast<uint64_t>(
            get_int(*v, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()));
    } else {
        p.seed = std::random_device{}() * 0x9E3779B97F4A7C15ull + std::random_device{}();
    }
    if (const json* v = field(body, "logit_bias")) {
        if (!v->is_object()) throw wrong_type("logit_bias", "an object mapping token ids to biases");
        for (const auto& [key, bias] : v->items()) {
            int64_t id = -1;
            try {
                size_t used = 0;
                id = std::stoll(key, &used);
                if (used != key.size()) id = -1;
            } catch (const std::exception&) {
                id = -1;
            }
            if (id < 0)
                throw bad_request("logit_bias key '" + key + "' is not a token id", "logit_bias", "invalid_value");
            p.logit_bias.emplace_back(static_cast<int32_t>(std::min<int64_t>(id, INT32_MAX)),
                                      static_cast<float>(get_number(bias, "logit_bias", -100.0, 100.0)));
        }
    }
    return p;
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
        throw bad_request(e.what(), "", "invalid_value");
    }
}

// 404 for an unknown name, 400 for an invalid one.
State fork_named_state(const json& value, ServerContext& ctx) {
    const std::string name = get_string(value, "state");
    require_state_name(name, "state");
    std::optional<State> state;
    try {
        state = ctx.states->fork(name);
    } catch (const Error& e) {
        throw ApiError(500, "state '" + name + "' could not be loaded: " + e.what(), "state", "state_load_failed");
    }
    if (!state) throw ApiError(404, "no state named '" + name + "' (see GET /v1/states)", "state", "state_not_found");
    return std::move(*state);
}

void reject_unsupported(const json& body) {
    if (const json* v = field(body, "echo"); v && v->is_boolean() && v->get<bool>()) {
        throw bad_request("'echo' is not supported", "echo", "unsupported");
    }
    if (field(body, "suffix")) throw bad_request("'suffix' is not supported", "suffix", "unsupported");
    if (const json* v = field(body, "best_of"); v && !(v->is_number_integer() && v->get<int64_t>() == 1)) {
        throw bad_request("'best_of' is not supported (use n)", "best_of", "unsupported");
    }
    if (const json* v = field(body, "tools"); v && !v->empty())
        throw bad_request("'tools' are not supported", "tools", "unsupported");
    if (const json* v = field(body, "model"); v && !v->is_string()) throw wrong_type("model", "a string");
}

}  // namespace

void require_state_name(const std::string& name, const char* param) {
    if (!StateStore::valid_name(name)) {
        throw bad_request("invalid state name '" + name.substr(0, 80) +
                              "': use 1 to 64 of A-Z a-z 0-9 _ . - and do not start with '.'",
                          param, "invalid_state_name");
    }
}

json parse_json_body(const std::string& body) {
    json value;
    try {
        value = json::parse(body);
    } catch (const json::exception& e) {
        throw bad_request(std::string("the request body is not valid JSON: ") + e.what(), "", "invalid_json");
    }
    if (!value.is_object()) throw bad_request("the request body must be a JSON object", "", "invalid_json");
    return value;
}

CompletionRequest parse_completion_request(const json& body, bool chat, ServerContext& ctx) {
    reject_unsupported(body);
    CompletionRequest out;
    out.chat = chat;
    auto job = std::make_unique<GenerationJob>();
    if (const json* v = field(body, "stream")) out.stream = get_bool(*v, "stream");
    if (const json* v = field(body, "stream_options")) {
        if (!v->is_object()) throw wrong_type("stream_options", "an object");
        if (const json* u = field(*v, "include_usage"))
            out.include_usage = get_bool(*u, "stream_options.include_usage");
    }
    if (const json* v = field(body, "n")) job->n = static_cast<int>(get_int(*v, "n", 1, ctx.options.parallel));
    if (const json* v = field(body, "stop")) job->stop = parse_stop(*v);
    job->sampling = parse_sampling(body);
    check_token_ids(job->sampling, *ctx.model);
    if (chat) {
        if (const json* v = field(body, "logprobs")) out.logprobs = get_bool(*v, "logprobs");
        if (const json* v = field(body, "top_logprobs")) {
            if (!out.logprobs)
                throw bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs", "invalid_value");
            job->top_logprobs = static_cast<int>(get_int(*v, "top_logprobs", 0, 20));
        } else if (out.logprobs) {
            job->top_logprobs = 0;
        }
    } else if (const json* v = field(body, "logprobs")) {
        job->top_logprobs = static_cast<int>(get_int(*v, "logprobs", 0, 20));
        out.logprobs = true;
    }

    // The prompt, after a named state when there is one.
    if (const json* v = field(body, "state")) job->base = fork_named_state(*v, ctx);
    const Tokenizer& tokenizer = ctx.model->tokenizer();
    if (chat) {
        const json* messages = field(body, "messages");
        if (!messages) throw bad_request("'messages' is required", "messages", "missing_field");
        job->prompt = chat_tokens(*messages, /*add_generation_prompt=*/true, ctx);
        if (job->base) {
            // The state must hold the start of this conversation (e.g. made from its system message).
            const auto held = job->base->tokens();
            if (held.size() > job->prompt.size() || !std::equal(held.begin(), held.end(), job->prompt.begin())) {
                throw bad_request(
                    "the state's tokens are not the start of this conversation; create the state from the "
                    "conversation's first messages",
                    "state", "state_mismatch");
            }
            job->prompt.erase(job->prompt.begin(), job->prompt.begin() + static_cast<std::ptrdiff_t>(held.size()));
        }
    } else {
        const json* prompt = field(body, "prompt");
        std::string text;
        if (prompt && prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_string()) {
            text = (*prompt)[0].get<std::string>();
        } else if (prompt) {
            text = get_string(*prompt, "prompt");
        } else if (!job->base) {
            throw bad_request("'prompt' is required", "prompt", "missing_field");
        }
        // A continued state already has its BOS.
        job->prompt = tokenizer.encode(text, job->base ? AddSpecial::no : AddSpecial::yes, ParseSpecial::yes);
    }
    const int64_t held = job->base ? job->base->n_tokens() : 0;
    const int64_t n_ctx = job->base ? job->base->n_ctx() : ctx.scheduler->n_ctx();
    const int64_t total = held + static_cast<int64_t>(job->prompt.size());
    if (total == 0) throw bad_request("the prompt is empty", chat ? "messages" : "prompt", "empty_prompt");
    if (job->prompt.empty() && job->base->last_logits().empty()) {
        throw bad_request("the state holds no logits to continue from; give a prompt to append", "prompt",
                          "invalid_value");
    }
    if (total >= n_ctx) {
        throw bad_request("the prompt has " + std::to_string(total) + " tokens but the context holds " +
                              std::to_string(n_ctx) + "; shorten it (or start the server with a larger --ctx)",
                          chat ? "messages" : "prompt", "context_length_exceeded");
    }
    const json* max_tokens = field(body, "max_tokens");
    if (!max_tokens) max_tokens = field(body, "max_completion_tokens");
    if (max_tokens) {
        job->max_tokens = get_int(*max_tokens, "max_tokens", 1, std::numeric_limits<int32_t>::max());
        if (total + job->max_tokens > n_ctx) {
            throw bad_request("this model's context holds " + std::to_string(n_ctx) + " tokens; the prompt has " +
                                  std::to_string(total) + " and max_tokens asks for " +
                                  std::to_string(job->max_tokens) + "; reduce max_tokens to at most " +
                                  std::to_string(n_ctx - total),
                              "max_tokens", "context_length_exceeded");
        }
    } else {
        // OpenAI's defaults: 16 for completions, the rest of the context for chat.
        job->max_tokens = chat ? n_ctx - total : std::min<int64_t>(16, n_ctx - total);
    }
    out.job = std::move(job);
    return out;
}

PrefillRequest parse_prefill_request(const json& body, ServerContext& ctx) {
    PrefillRequest out;
    const json* name = field(body, "name");
    if (!name) throw bad_request("'name' is required", "name", "missing_field");
    out.name = get_string(*name, "name");
    require_state_name(out.name, "name");
    auto job = std::make_unique<GenerationJob>();
    job->kind = GenerationJob::Kind::prefill;
    const json* prompt = field(body, "prompt");
    const json* messages = field(body, "messages");
    if ((prompt != nullptr) == (messages != nullptr)) {
        throw bad_request("give exactly one of 'prompt' and 'messages'", prompt ? "messages" : "prompt",
                          "missing_field");
    }
    if (messages) {
        bool add_generation_prompt = false;
        if (const json* v = field(body, "add_generation_prompt"))
            add_generation_prompt = get_bool(*v, "add_generation_prompt");
        job->prompt = chat_tokens(*messages, add_generation_prompt, ctx);
    } else {
        job->prompt = ctx.model->tokenizer().encode(get_string(*prompt, "prompt"), AddSpecial::yes, ParseSpecial::yes);
    }
    if (job->prompt.empty()) throw bad_request("the prompt is empty", "prompt", "empty_prompt");
    if (static_cast<int64_t>(job->prompt.size()) >= ctx.scheduler->n_ctx()) {
        throw bad_request("the prompt has " + std::to_string(job->prompt.size()) + " tokens but the context holds " +
                              std::to_string(ctx.scheduler->n_ctx()),
                          messages ? "messages" : "prompt", "context_length_exceeded");
    }
    out.job = std::move(job);
    return out;
}

}  // namespace kvstash::server
