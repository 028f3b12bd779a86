#include "server/openai_request.h"

#include <cctype>

#include "base/json_depth.h"
#include "grammar/json_schema_gbnf.h"
#include "kvstash/error.h"
#include "server/api_error.h"
#include "server/request_fields.h"
#include "server/state_name.h"

using nlohmann::json;

namespace kvstash::server {
namespace {

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

std::vector<std::pair<int32_t, float>> parse_logit_bias(const json& value) {
    if (!value.is_object()) throw wrong_type("logit_bias", "an object mapping token ids to biases");
    std::vector<std::pair<int32_t, float>> biases;
    for (const auto& [key, bias] : value.items()) {
        int64_t id = -1;
        try {
            size_t used = 0;
            id = std::stoll(key, &used);
            if (used != key.size()) id = -1;
        } catch (const std::exception&) {
            id = -1;
        }
        if (id < 0) throw bad_request("logit_bias key '" + key + "' is not a token id", "logit_bias", "invalid_value");
        biases.emplace_back(static_cast<int32_t>(std::min<int64_t>(id, INT32_MAX)),
                            static_cast<float>(get_number(bias, "logit_bias", -100.0, 100.0)));
    }
    return biases;
}

SamplerParams parse_sampling(const json& body, std::optional<uint64_t>& seed) {
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
        seed = static_cast<uint64_t>(
            get_int(*v, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()));
    }
    if (const json* v = field(body, "logit_bias")) p.logit_bias = parse_logit_bias(*v);
    return p;
}

void reject_unsupported(const json& body) {
    if (field(body, "suffix")) throw bad_request("'suffix' is not supported", "suffix", "unsupported");
    if (const json* v = field(body, "best_of"); v && !(v->is_number_integer() && v->get<int64_t>() == 1)) {
        throw bad_request("'best_of' is not supported (use n)", "best_of", "unsupported");
    }
    // The older spelling of tools.
    for (const char* name : {"functions", "function_call"}) {
        if (const json* v = field(body, name); v && !v->empty()) {
            throw bad_request(std::string("'") + name + "' is not supported (use tools and tool_choice)", name,
                              "unsupported");
        }
    }
    if (const json* v = field(body, "model"); v && !v->is_string()) throw wrong_type("model", "a string");
}

// body[key] with its object keys in the order the client wrote them (nlohmann::json sorts keys): read
// again from the body's text when it is given, else the sorted copy.
nlohmann::ordered_json in_written_order(const std::string* raw_body, const char* key, const json& value) {
    if (raw_body) {
        try {
            return nlohmann::ordered_json::parse(*raw_body).at(key);
        } catch (const nlohmann::json::exception&) {}
    }
    return nlohmann::ordered_json::parse(value.dump());
}

// response_format and grammar -> a Grammar (400 naming the field for a bad one; unsupported JSON Schema
// keywords are named in the message, code "unsupported"). A schema keeps its properties' order (read
// from `raw_body`): the output's keys come in that order, as docs/constrained-output.md promises.
std::shared_ptr<const Grammar> parse_grammar(const json& body, const std::string* raw_body,
                                             const GrammarLimits& limits) {
    const json* format = field(body, "response_format");
    const json* gbnf = field(body, "grammar");
    std::shared_ptr<const Grammar> grammar;
    const char* param = "response_format";
    try {
        if (format) {
            if (!format->is_object()) throw wrong_type("response_format", "an object");
            const json* type = field(*format, "type");
            if (!type || !type->is_string()) throw wrong_type("response_format.type", "a string");
            const std::string t = type->get<std::string>();
            if (t == "json_object") {
                grammar = Grammar::json_object();
            } else if (t == "json_schema") {
                const json* spec = field(*format, "json_schema");
                if (!spec || !spec->is_object()) throw wrong_type("response_format.json_schema", "an object");
                const json* schema = field(*spec, "schema");
                if (!schema)
                    throw bad_request("'response_format.json_schema.schema' is required", "response_format",
                                      "missing_field");
                param = "response_format.json_schema.schema";
                const nlohmann::ordered_json ordered = in_written_order(raw_body, "response_format", *format);
                grammar = Grammar::from_json_schema(ordered.at("json_schema").at("schema").dump(), limits);
            } else if (t != "text") {
                throw bad_request("response_format type '" + t + "' is not supported (text, json_object, json_schema)",
                                  "response_format", "unsupported");
            }
        }
        if (gbnf) {
            if (grammar)
                throw bad_request("give 'grammar' or a JSON response_format, not both", "grammar", "invalid_value");
            param = "grammar";
            grammar = Grammar::from_gbnf(get_string(*gbnf, "grammar"), limits);
        }
    } catch (const PreparationExpired&) {
        throw preparation_expired();
    } catch (const Error& e) {
        throw bad_request(e.what(), param, e.code() == ErrorCode::unsupported ? "unsupported" : "invalid_value");
    }
    return grammar;
}

// logprobs: a bool with top_logprobs for chat, the number of alternatives for text completions.
void parse_logprobs(const json& body, CompletionRequest& out) {
    if (out.chat) {
        if (const json* v = field(body, "logprobs")) out.logprobs = get_bool(*v, "logprobs");
        if (const json* v = field(body, "top_logprobs")) {
            if (!out.logprobs)
                throw bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs", "invalid_value");
            out.top_logprobs = static_cast<int>(get_int(*v, "top_logprobs", 0, 20));
        } else if (out.logprobs) {
            out.top_logprobs = 0;
        }
    } else if (const json* v = field(body, "logprobs")) {
        out.top_logprobs = static_cast<int>(get_int(*v, "logprobs", 0, 20));
        out.logprobs = true;
    }
}

// Token ids (OpenAI's prompt as an array of integers); 400 for anything else. The ids are checked
// against the vocabulary when the job is built.
std::vector<int32_t> parse_prompt_tokens(const json& value) {
    std::vector<int32_t> tokens;
    for (const json& id : value) tokens.push_back(static_cast<int32_t>(get_int(id, "prompt", 0, INT32_MAX)));
    return tokens;
}

// `prompt`: a string, token ids, or an array of strings / of token-id arrays (OpenAI's completions). A
// single prompt goes to prompt / prompt_tokens, several to `prompts`.
void parse_prompt(const json& prompt, CompletionRequest& out) {
    constexpr const char* expected = "a string, an array of strings, an array of token ids or an array of those";
    if (prompt.is_string()) {
        out.prompt = prompt.get<std::string>();
        return;
    }
    if (!prompt.is_array() || prompt.empty()) throw wrong_type("prompt", expected);
    if (prompt[0].is_number()) {
        out.prompt_tokens = parse_prompt_tokens(prompt);
        return;
    }
    std::vector<PromptInput> inputs;
    for (const json& item : prompt) {
        if (item.is_string()) {
            inputs.push_back({item.get<std::string>(), std::nullopt});
        } else if (item.is_array() && !item.empty() && item[0].is_number()) {
            inputs.push_back({{}, parse_prompt_tokens(item)});
        } else {
            throw wrong_type("prompt", expected);
        }
    }
    if (inputs.size() == 1) {
        out.prompt = std::move(inputs[0].text);
        out.prompt_tokens = std::move(inputs[0].tokens);
        if (out.prompt_tokens) out.prompt.reset();
        return;
    }
    out.prompts = std::move(inputs);
}

bool valid_tool_name(const std::string& name) {
    if (name.empty() || name.size() > 64) return false;
    for (const char c : name) {
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
    }
    return true;
}

// tools: [{"type": "function", "function": {"name", "description"?, "parameters"?, "strict"?}}], read from
// `tools` (an ordered_json: keys as the client wrote them).
void parse_tools(const nlohmann::ordered_json& tools, ToolRequest& out, const GrammarLimits& limits) {
    if (!tools.is_array()) throw wrong_type("tools", "an array of {\"type\": \"function\", \"function\": {...}}");
    for (size_t i = 0; i < tools.size(); ++i) {
        const std::string at = "tools[" + std::to_string(i) + "]";
        const auto& tool = tools[i];
        if (!tool.is_object()) throw bad_request(at + " must be an object", "tools", "invalid_type");
        if (!tool.contains("type") || tool["type"] != "function") {
            throw bad_request(at + ": only tools of type \"function\" are supported", "tools", "unsupported");
        }
        if (!tool.contains("function") || !tool["function"].is_object()) {
            throw bad_request(at + ".function must be an object", "tools", "invalid_type");
        }
        const auto& function = tool["function"];
        if (!function.contains("name") || !function["name"].is_string() ||
            !valid_tool_name(function["name"].get<std::string>())) {
            throw bad_request(at + ".function.name must be 1 to 64 of a-z A-Z 0-9 _ -", "tools", "invalid_value");
        }
        const std::string name = function["name"].get<std::string>();
        for (const ToolSchema& other : out.schemas) {
            if (other.name == name) throw bad_request("two tools are named '" + name + "'", "tools", "invalid_value");
        }
        if (function.contains("description") && !function["description"].is_string() &&
            !function["description"].is_null()) {
            throw bad_request(at + ".function.description must be a string", "tools", "invalid_type");
        }
        std::string parameters = R"({"type": "object", "properties": {}})";
        if (function.contains("parameters") && !function["parameters"].is_null()) {
            if (!function["parameters"].is_object()) {
                throw bad_request(at + ".function.parameters must be a JSON Schema object", "tools", "invalid_type");
            }
            parameters = function["parameters"].dump();
            try {
                (void)grammar::json_schema_to_gbnf(parameters, limits);
            } catch (const PreparationExpired&) {
                throw preparation_expired();
            } catch (const Error& e) {
                throw bad_request(at + ".function.parameters: " + e.what(), "tools",
                                  e.code() == ErrorCode::unsupported ? "unsupported" : "invalid_value");
            }
        }
        out.definitions.push_back(tool.dump());
        out.schemas.push_back({name, std::move(parameters)});
    }
}

void parse_tool_choice(const json& body, ToolRequest& out) {
    if (const json* v = field(body, "parallel_tool_calls")) out.parallel = get_bool(*v, "parallel_tool_calls");
    const json* choice = field(body, "tool_choice");
    if (!choice) {
        out.choice = out.definitions.empty() ? ToolChoice::none : ToolChoice::automatic;
        return;
    }
    if (choice->is_string()) {
        const std::string c = choice->get<std::string>();
        if (c == "none") {
            out.choice = ToolChoice::none;
        } else if (c == "auto") {
            out.choice = out.definitions.empty() ? ToolChoice::none : ToolChoice::automatic;
        } else if (c == "required") {
            out.choice = ToolChoice::required;
        } else {
            throw bad_request("tool_choice '" + c + "' is not one of none, auto, required", "tool_choice",
                              "invalid_value");
        }
    } else if (choice->is_object()) {
        const json* type = field(*choice, "type");
        const json* function = field(*choice, "function");
        if (!type || *type != "function" || !function || !function->is_object() || !field(*function, "name") ||
            !(*function)["name"].is_string()) {
            throw bad_request(
                "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": "
                "{\"name\": ...}}",
                "tool_choice", "invalid_value");
        }
        out.choice = ToolChoice::named;
        out.name = (*function)["name"].get<std::string>();
    } else {
        throw wrong_type("tool_choice", "a string or an object");
    }
    if (out.choice == ToolChoice::required || out.choice == ToolChoice::named) {
        if (out.definitions.empty()) {
            throw bad_request("tool_choice asks for a tool call but no 'tools' are given", "tool_choice",
                              "invalid_value");
        }
    }
    if (out.choice == ToolChoice::named) {
        bool found = false;
        for (const ToolSchema& s : out.schemas) found |= s.name == out.name;
        if (!found) {
            throw bad_request("tool_choice names '" + out.name + "', which is not among the tools", "tool_choice",
                              "invalid_value");
        }
    }
}

}  // namespace

void require_state_name(const std::string& name, const char* param) {
    if (!valid_state_name(name)) {
        throw bad_request("invalid state name '" + name.substr(0, 80) +
                              "': use 1 to 64 of A-Z a-z 0-9 _ . - and do not start with '.'",
                          param, "invalid_state_name");
    }
}

json parse_json_body(const std::string& body) {
    if (json_depth::nesting_depth(body, json_depth::kMaxJsonDepth) > json_depth::kMaxJsonDepth) {
        throw bad_request("the request body nests arrays/objects deeper than " +
                              std::to_string(json_depth::kMaxJsonDepth) + " levels (the limit on JSON nesting)",
                          "", "invalid_json");
    }
    json value;
    try {
        value = json::parse(body);
    } catch (const json::exception& e) {
        throw bad_request(std::string("the request body is not valid JSON: ") + e.what(), "", "invalid_json");
    }
    if (!value.is_object()) throw bad_request("the request body must be a JSON object", "", "invalid_json");
    return value;
}

CompletionRequest parse_completion_request(const json& body, Endpoint endpoint, const RequestLimits& limits,
                                           const std::string* raw_body) {
    const bool chat = endpoint == Endpoint::chat;
    reject_unsupported(body);
    CompletionRequest out;
    out.chat = chat;
    if (const json* v = field(body, "stream")) out.stream = get_bool(*v, "stream");
    if (const json* v = field(body, "stream_options")) {
        if (!v->is_object()) throw wrong_type("stream_options", "an object");
        if (const json* u = field(*v, "include_usage"))
            out.include_usage = get_bool(*u, "stream_options.include_usage");
    }
    if (const json* v = field(body, "n")) out.n = static_cast<int>(get_int(*v, "n", 1, limits.max_n));
    if (const json* v = field(body, "stop")) out.stop = parse_stop(*v);
    out.sampling = parse_sampling(body, out.seed);
    parse_logprobs(body, out);
    out.grammar_limits = limits.grammar;
    out.grammar = parse_grammar(body, raw_body, limits.grammar);
    if (const json* tools = field(body, "tools"); tools && (chat || !tools->empty())) {
        if (!chat) {
            throw bad_request("'tools' need the chat endpoint (/v1/chat/completions)", "tools", "unsupported");
        }
        parse_tools(in_written_order(raw_body, "tools", *tools), out.tools, limits.grammar);
    }
    parse_tool_choice(body, out.tools);
    if (out.grammar && out.tools.choice != ToolChoice::none) {
        throw bad_request("give 'tools' or a grammar / JSON response_format, not both (or tool_choice \"none\")",
                          "tools", "invalid_value");
    }
    if (const json* v = field(body, "adapter")) out.adapter = get_string(*v, "adapter");
    if (const json* v = field(body, "state")) {
        out.state = get_string(*v, "state");
        require_state_name(*out.state, "state");
    }
    if (chat) {
        const json* messages = field(body, "messages");
        if (!messages) throw bad_request("'messages' is required", "messages", "missing_field");
        out.messages = get_messages(*messages);
    } else {
        if (const json* prompt = field(body, "prompt")) {
            parse_prompt(*prompt, out);
        } else if (!out.state) {
            throw bad_request("'prompt' is required", "prompt", "missing_field");
        }
        if (const json* v = field(body, "echo")) out.echo = get_bool(*v, "echo");
        if (out.echo && out.logprobs)
            throw bad_request("'echo' with 'logprobs' is not supported", "echo", "unsupported");
        if (out.echo && out.state) throw bad_request("'echo' with 'state' is not supported", "echo", "unsupported");
    }
    const json* max_tokens = field(body, "max_tokens");
    if (!max_tokens) max_tokens = field(body, "max_completion_tokens");
    if (max_tokens) out.max_tokens = get_int(*max_tokens, "max_tokens", 1, std::numeric_limits<int32_t>::max());
    out.speculative = parse_speculative_fields(body);
    return out;
}

PrefillRequest parse_prefill_request(const json& body) {
    PrefillRequest out;
    const json* name = field(body, "name");
    if (!name) throw bad_request("'name' is required", "name", "missing_field");
    out.name = get_string(*name, "name");
    require_state_name(out.name, "name");
    if (const json* v = field(body, "replace")) out.replace = get_bool(*v, "replace");
    if (const json* v = field(body, "adapter")) out.adapter = get_string(*v, "adapter");
    const json* prompt = field(body, "prompt");
    const json* messages = field(body, "messages");
    if ((prompt != nullptr) == (messages != nullptr)) {
        throw bad_request("give exactly one of 'prompt' and 'messages'", prompt ? "messages" : "prompt",
                          "missing_field");
    }
    if (messages) {
        if (const json* v = field(body, "add_generation_prompt"))
            out.add_generation_prompt = get_bool(*v, "add_generation_prompt");
        out.messages = get_messages(*messages);
    } else {
        out.prompt = get_string(*prompt, "prompt");
    }
    return out;
}

}  // namespace kvstash::server
