// Ollama's API beside OpenAI's: POST /api/chat, /api/generate (NDJSON streams, or one object with
// "stream": false), GET /api/tags, /api/ps, /api/version, POST /api/show, /api/embed (and the older
// /api/embeddings: vectors not normalised, as Ollama's). Requests become the
// OpenAI routes' jobs (server/ollama_request.h -> build_completion_job -> the one scheduler); errors are
// Ollama's {"error": "..."} with the HTTP status the OpenAI routes would give.
//
// Models: a request names its model; find_model() checks the name against this context's model ("ID" or
// "ID:latest", ID = the file name without .gguf); another name is 404 "model ... not found". With one model it
// is loaded for the server's whole life and keep_alive has no effect; with several (docs/models.md) the
// dispatcher of server/model_routes.cpp has already picked this context by the name, applies keep_alive, and
// answers /api/tags and /api/ps from the registry.
#include <chrono>
#include <filesystem>
#include <system_error>

#include "kvstash/adapter.h"
#include "server/ollama_request.h"
#include "server/ollama_response.h"
#include "server/request_fields.h"
#include "server/request_job.h"
#include "server/request_log.h"
#include "server/routes.h"

using nlohmann::json;

namespace kvstash::server {
namespace {

void send_ollama_error(httplib::Response& res, int status, const std::string& message) {
    if (status == 503) res.set_header("Retry-After", "1");
    send_json(res, {{"error", message}}, status);
}

void ollama_guarded(httplib::Response& res, const std::function<void()>& body) {
    try {
        body();
    } catch (const ApiError& e) {
        send_ollama_error(res, e.status(), e.what());
    } catch (const Error& e) {
        const ApiError api = api_error(e);
        send_ollama_error(res, api.status(), api.what());
    } catch (const json::exception& e) {
        send_ollama_error(res, 400, std::string("bad JSON value: ") + e.what());
    }
}

// Ollama's names carry a tag: "ID:latest", unless the ID has one ("owner/name:Q8_0" for `serve -m hf:...`).
std::string tagged_name(const ServerContext& ctx) {
    const size_t slash = ctx.model_id.rfind('/');
    const bool tagged = ctx.model_id.find(':', slash == std::string::npos ? 0 : slash) != std::string::npos;
    return tagged ? ctx.model_id : ctx.model_id + ":latest";
}

// The served model a request names, or 404. (The place a registry of several models would look a name up.)
ServerContext& find_model(ServerContext& ctx, const std::string& name) {
    if (name == ctx.model_id || name == tagged_name(ctx)) return ctx;
    throw ApiError(
        404, "model '" + name + "' not found; this server serves '" + tagged_name(ctx) + "' (GET /api/tags lists it)");
}

uint64_t model_bytes(const ServerContext& ctx) {
    std::error_code ec;
    const std::filesystem::path path = ctx.model->path();
    if (std::filesystem::is_regular_file(path, ec)) return std::filesystem::file_size(path, ec);
    uint64_t total = 0;
    for (const auto& entry : std::filesystem::directory_iterator(path, ec)) {
        std::error_code size_ec;
        if (entry.is_regular_file(size_ec)) total += entry.file_size(size_ec);
    }
    return total;
}

json details(const ServerContext& ctx) {
    const std::string arch = ctx.model->info().architecture;
    const bool gguf = ctx.model->path().ends_with(".gguf");
    return {{"format", gguf ? "gguf" : "safetensors"}, {"family", arch}, {"families", json::array({arch})}};
}

json model_entry(const ServerContext& ctx) {
    return {{"name", tagged_name(ctx)},
            {"model", tagged_name(ctx)},
            {"modified_at", ollama_timestamp()},
            {"size", model_bytes(ctx)},
            {"digest", ""},
            {"details", details(ctx)}};
}

void require_room(const OllamaRequest& request, GenerationJob& job, int64_t server_ctx) {
    int64_t limit = server_ctx;
    if (request.num_ctx) {
        if (*request.num_ctx > server_ctx) {
            throw bad_request("options.num_ctx " + std::to_string(*request.num_ctx) + " is more than the " +
                                  std::to_string(server_ctx) +
                                  " tokens of context this server has (kvstash serve --ctx)",
                              "num_ctx", "context_length_exceeded");
        }
        limit = *request.num_ctx;
    }
    const auto total = static_cast<int64_t>(job.prompt.size());
    if (total >= limit) {
        throw bad_request("the prompt has " + std::to_string(total) + " tokens; num_ctx is " + std::to_string(limit),
                          "num_ctx", "context_length_exceeded");
    }
    // num_predict: at most what the context has room for (then done_reason "length"), as Ollama stops there.
    job.max_tokens = request.num_predict ? std::min(*request.num_predict, limit - total) : limit - total;
}

void stream_ndjson(httplib::Response& res, std::shared_ptr<RequestChannel> channel,
                   std::shared_ptr<OllamaFormatter> formatter) {
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "application/x-ndjson",
        [channel, formatter](size_t, httplib::DataSink& sink) {
            auto write = [&sink, &channel](const std::string& text) {
                if (text.empty() || sink.write(text.data(), text.size())) return true;
                channel->cancel();  // the client went away
                return false;
            };
            std::vector<ChannelEvent> events;
            while (!channel->wait(events, std::chrono::milliseconds(100))) {
                if (!sink.is_writable()) {
                    channel->cancel();
                    return false;
                }
            }
            for (const ChannelEvent& event : events) {
                if (event.kind == ChannelEvent::Kind::piece) request_log_first_token();
                if (event.kind == ChannelEvent::Kind::done) {
                    request_log_tokens(event.usage.prompt_tokens, event.usage.cached_tokens,
                                       event.usage.completion_tokens);
                    if (!write(formatter->final_line(event.usage))) return false;
                    sink.done();
                    return true;
                }
                if (event.kind == ChannelEvent::Kind::error) {
                    write(dump_json(json{{"error", event.message}}) + "\n");
                    sink.done();
                    return true;
                }
                if (!write(formatter->piece_line(event))) return false;
            }
            return true;
        },
        [channel](bool success) {
            if (!success) channel->cancel();
        });
}

json wait_for_answer(RequestChannel& channel, OllamaFormatter& formatter) {
    std::vector<ChannelEvent> events;
    while (true) {
        events.clear();
        if (!channel.wait(events, std::chrono::milliseconds(1000))) continue;
        for (ChannelEvent& event : events) {
            if (event.kind == ChannelEvent::Kind::piece) request_log_first_token();
            if (event.kind == ChannelEvent::Kind::error) throw ApiError(event.status, event.message);
            if (event.kind == ChannelEvent::Kind::done) {
                request_log_tokens(event.usage.prompt_tokens, event.usage.cached_tokens, event.usage.completion_tokens);
                return formatter.response(event.usage);
            }
            formatter.add(event);
        }
    }
}

void handle_generation(const httplib::Request& req, httplib::Response& res, ServerContext& server,
                       OllamaEndpoint endpoint) {
    require_body_size(req, server);
    const OllamaRequest request =
        parse_ollama_request(parse_json_body(req.body), endpoint, request_limits(server), &req.body);
    ServerContext& ctx = find_model(server, request.model);
    if (request.load_only) {
        json out = {{"model", request.model}, {"created_at", ollama_timestamp()}};
        if (endpoint == OllamaEndpoint::chat) {
            out["message"] = {{"role", "assistant"}, {"content", ""}};
        } else {
            out["response"] = "";
        }
        out["done"] = true;
        out["done_reason"] = "load";
        send_json(res, out);
        return;
    }
    std::unique_ptr<GenerationJob> job = build_completion_job(request.completion, ctx);
    require_room(request, *job, ctx.scheduler->n_ctx());
    auto channel = job->channel;
    auto formatter = std::make_shared<OllamaFormatter>(endpoint, request.model, job->tool_call_format);
    if (!ctx.scheduler->submit(std::move(job))) {
        throw ApiError(503,
                       "the server is busy (" + std::to_string(ctx.options.queue) + " requests waiting); retry later");
    }
    if (request.stream) {
        stream_ndjson(res, channel, formatter);
        return;
    }
    send_json(res, wait_for_answer(*channel, *formatter));
}

// POST /api/embed {"model", "input": "text" | ["text", ...], "truncate", "options", "keep_alive"}.
json embed(const json& body, ServerContext& server, const EmbeddingFunction& embedding) {
    for (const auto& [key, value] : body.items()) {
        if (key != "model" && key != "input" && key != "truncate" && key != "options" && key != "keep_alive") {
            throw bad_request("unknown field '" + key + "' for /api/embed" +
                                  (key == "dimensions" ? ": kvstash returns the model's full embedding width" : ""),
                              key);
        }
    }
    check_keep_alive(body);
    if (const auto* options = field(body, "options"); options && !options->empty()) {
        throw bad_request("'options' have no meaning for embeddings here; remove them", "options");
    }
    const json* model = field(body, "model");
    if (!model || !model->is_string()) throw bad_request("'model' is required (see GET /api/tags)", "model");
    ServerContext& ctx = find_model(server, model->get<std::string>());
    (void)ctx;  // the embedding function is bound to the one model
    const json* input = field(body, "input");
    if (!input) throw bad_request("'input' is required: a string or an array of strings", "input");
    // truncate (Ollama's default true) would cut an input to the context: kvstash refuses a too-long input
    // with 400 instead, whatever it says.
    const auto started = std::chrono::steady_clock::now();
    const json answer = embedding({{"input", *input}, {"encoding_format", "float"}});
    json embeddings = json::array();
    for (const json& item : answer["data"]) embeddings.push_back(item["embedding"]);
    return {{"model", *model},
            {"embeddings", embeddings},
            {"total_duration",
             std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - started).count()},
            {"load_duration", 0},
            {"prompt_eval_count", answer["usage"]["prompt_tokens"]}};
}

// POST /api/embeddings {"model", "prompt"} -> {"embedding": [...]}: Ollama's older route, whose vectors are not
// normalised (embd_normalize -1), unlike /api/embed's.
json legacy_embedding(const json& body, ServerContext& server, const EmbeddingFunction& embedding) {
    for (const auto& [key, value] : body.items()) {
        if (key != "model" && key != "prompt" && key != "options" && key != "keep_alive") {
            throw bad_request("unknown field '" + key + "' for /api/embeddings", key);
        }
    }
    check_keep_alive(body);
    if (const auto* options = field(body, "options"); options && !options->empty()) {
        throw bad_request("'options' have no meaning for embeddings here; remove them", "options");
    }
    const json* model = field(body, "model");
    if (!model || !model->is_string()) throw bad_request("'model' is required (see GET /api/tags)", "model");
    find_model(server, model->get<std::string>());
    const json* prompt = field(body, "prompt");
    if (!prompt || !prompt->is_string()) throw bad_request("'prompt' is required: a string", "prompt");
    const json answer = embedding({{"input", *prompt}, {"encoding_format", "float"}, {"embd_normalize", -1}});
    return {{"embedding", answer["data"][0]["embedding"]}};
}

json show(const json& body, ServerContext& server) {
    const json* model = field(body, "model");
    if (!model) model = field(body, "name");  // older clients
    if (!model || !model->is_string()) throw bad_request("'model' is required (see GET /api/tags)", "model");
    ServerContext& ctx = find_model(server, model->get<std::string>());
    const ModelInfo& info = ctx.model->info();
    const std::string& arch = info.architecture;
    json capabilities = json::array({"completion", "embedding"});
    if (ctx.chat_template && ctx.chat_template->tool_call_format() != ToolCallFormat::none) {
        capabilities.push_back("tools");
    }
    // A preset's adapters as a Modelfile's ADAPTER lines (its other fields are applied by the dispatcher).
    std::string modelfile = "FROM " + ctx.model->path() + "\n";
    if (const auto adapters = default_adapters(ctx)) {
        for (const AdapterFile& file : adapters->files()) modelfile += "ADAPTER " + file.path + "\n";
    }
    return {{"modelfile", modelfile},
            {"parameters", ""},
            {"template", ctx.chat_template ? ctx.chat_template->name() : ""},
            {"details", details(ctx)},
            {"model_info",
             {{"general.architecture", arch},
              {"general.name", info.name},
              {arch + ".context_length", info.n_ctx_train},
              {arch + ".embedding_length", info.n_embd},
              {arch + ".block_count", info.n_layer},
              {arch + ".attention.head_count", info.n_head},
              {arch + ".attention.head_count_kv", info.n_head_kv},
              {"tokenizer.ggml.vocab_size", info.n_vocab}}},
            {"capabilities", capabilities},
            {"modified_at", ollama_timestamp()}};
}

}  // namespace

void register_ollama_routes(RouteTable& http, ServerContext& ctx) {
    http.Post("/api/chat", [&ctx](const httplib::Request& req, httplib::Response& res) {
        ollama_guarded(res, [&] { handle_generation(req, res, ctx, OllamaEndpoint::chat); });
    });
    http.Post("/api/generate", [&ctx](const httplib::Request& req, httplib::Response& res) {
        ollama_guarded(res, [&] { handle_generation(req, res, ctx, OllamaEndpoint::generate); });
    });
    http.Get("/api/tags", [&ctx](const httplib::Request&, httplib::Response& res) {
        send_json(res, {{"models", json::array({model_entry(ctx)})}});
    });
    http.Get("/api/ps", [&ctx](const httplib::Request&, httplib::Response& res) {
        json entry = model_entry(ctx);
        entry.erase("modified_at");
        entry["expires_at"] = "9999-12-31T23:59:59Z";  // loaded for the server's lifetime
        entry["size_vram"] = 0;
        entry["context_length"] = ctx.scheduler->n_ctx();
        send_json(res, {{"models", json::array({entry})}});
    });
    http.Get("/api/version", [](const httplib::Request&, httplib::Response& res) {
        send_json(res, {{"version", KVSTASH_VERSION}});
    });
    http.Post("/api/show", [&ctx](const httplib::Request& req, httplib::Response& res) {
        ollama_guarded(res, [&] {
            require_body_size(req, ctx);
            send_json(res, show(parse_json_body(req.body), ctx));
        });
    });
    EmbeddingFunction embedding = make_embedding_function(ctx);
    http.Post("/api/embed", [&ctx, embedding](const httplib::Request& req, httplib::Response& res) {
        ollama_guarded(res, [&] {
            require_body_size(req, ctx);
            send_json(res, embed(parse_json_body(req.body), ctx, embedding));
        });
    });
    http.Post("/api/embeddings", [&ctx, embedding](const httplib::Request& req, httplib::Response& res) {
        ollama_guarded(res, [&] {
            require_body_size(req, ctx);
            send_json(res, legacy_embedding(parse_json_body(req.body), ctx, embedding));
        });
    });
}

}  // namespace kvstash::server
