// kvstash serve: an OpenAI-compatible HTTP server with continuous batching, the prefix cache and named
// states (src/server/). Runs until SIGINT / SIGTERM.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <thread>

#include "kvstash/adapter_flags.h"
#include "kvstash/cache_flags.h"
#include "kvstash/chat.h"
#include "kvstash/commands.h"
#include "kvstash/common.h"
#include "kvstash/error.h"
#include "kvstash/model.h"
#include "kvstash/shared_flags.h"
#include "kvstash/spec_flags.h"
#include "kvstash/state.h"
#include "server/http.h"
#include "server/preset.h"

namespace kvstash::cli {
namespace {

struct ServeFlags {
    std::string model_path;
    server::ServerOptions options;
    std::string kv_type = "f16";
    std::vector<std::string> lora;            // NAME=FILE[:SCALE]
    std::vector<std::string> control_vector;  // NAME=FILE[:SCALE]
    SpecFlags spec;
    std::string models_dir;            // --models DIR: every GGUF and model directory in it
    std::string keep_alive;            // --keep-alive (empty: 5m)
    std::string models_memory;         // --models-memory SIZE (empty or 0: no limit)
    std::vector<std::string> presets;  // --preset FILE (and NAME.preset.json in --models DIR)
};

// "300", "5m", "1h", "90s", "-1" (never) -> seconds.
double parse_keep_alive(const std::string& text) {
    size_t used = 0;
    double value = 0;
    try {
        value = std::stod(text, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    const std::string unit = text.substr(used);
    const double scale = unit.empty() || unit == "s" ? 1 : unit == "m" ? 60 : unit == "h" ? 3600 : 0;
    if (used == 0 || scale == 0) {
        throw Error(ErrorCode::invalid_argument,
                    "--keep-alive '" + text + "': give seconds, or a duration like 90s, 5m, 1h (-1: never unload)");
    }
    return value < 0 ? -1 : value * scale;
}

// "0", "512M", "8G", "1.5GiB", "1000000" -> bytes.
uint64_t parse_size(const std::string& text) {
    size_t used = 0;
    double value = -1;
    try {
        value = std::stod(text, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    std::string unit = text.substr(used);
    if (unit.ends_with("iB")) unit.erase(unit.size() - 2);
    if (unit.ends_with("B") && unit.size() > 1) unit.pop_back();
    const double scale = unit.empty() || unit == "B" ? 1.0
                         : unit == "K"               ? 1024.0
                         : unit == "M"               ? 1048576.0
                         : unit == "G"               ? 1073741824.0
                         : unit == "T"               ? 1099511627776.0
                                                     : 0.0;
    if (used == 0 || value < 0 || scale == 0) {
        throw Error(ErrorCode::invalid_argument, "--models-memory '" + text + "': give a size like 512M, 8G or bytes");
    }
    return static_cast<uint64_t>(value * scale);
}

// Each preset file a source named by the preset, on the served model its "model" names (or a model file).
void add_presets(std::vector<server::ModelSource>& sources, const std::vector<std::string>& files) {
    const size_t n_models = sources.size();
    for (const std::string& file : files) {
        auto preset = std::make_shared<const server::Preset>(server::load_preset_file(file));
        std::string path;
        std::string names;
        for (size_t i = 0; i < n_models; ++i) {
            if (sources[i].name == preset->model) path = sources[i].path;
            names += (names.empty() ? "'" : ", '") + sources[i].name + "'";
        }
        std::error_code ec;
        if (path.empty() && (preset->model.starts_with("hf:") || std::filesystem::exists(preset->model, ec)))
            path = preset->model;
        if (path.empty()) {
            throw Error(ErrorCode::bad_format, "preset '" + file + "': field 'model' names '" + preset->model +
                                                   "', which is neither a served model (" +
                                                   (names.empty() ? "none" : names) + ") nor a model file");
        }
        sources.push_back({preset->name, path, preset});
    }
}

// The models of --models DIR and of every -m, named by file (without .gguf) or directory name; hub models
// by what was asked for ("owner/name:Q8_0").
std::vector<server::ModelSource> model_sources(const ServeFlags& f, const std::vector<std::string>& paths) {
    namespace fs = std::filesystem;
    std::vector<server::ModelSource> sources;
    std::vector<std::string> preset_files = f.presets;
    for (const std::string& path : paths) {
        sources.push_back(
            {path.starts_with("hf:") ? path.substr(3) : fs::path(path).filename().replace_extension().string(), path});
        if (fs::is_directory(path)) sources.back().name = fs::path(path).lexically_normal().filename().string();
        if (sources.back().name.empty()) sources.back().name = fs::path(path).parent_path().filename().string();
    }
    if (!f.models_dir.empty()) {
        std::error_code ec;
        if (!fs::is_directory(f.models_dir, ec)) {
            throw Error(ErrorCode::io, "--models '" + f.models_dir + "' is not a directory");
        }
        std::vector<fs::path> entries;
        for (const auto& entry : fs::directory_iterator(f.models_dir, ec)) entries.push_back(entry.path());
        std::sort(entries.begin(), entries.end());
        for (const fs::path& entry : entries) {
            if (entry.extension() == ".gguf" && fs::is_regular_file(entry, ec)) {
                sources.push_back({entry.stem().string(), entry.string()});
            } else if (fs::is_directory(entry, ec) && fs::exists(entry / "config.json", ec)) {
                sources.push_back({entry.filename().string(), entry.string()});
            }
        }
        for (const fs::path& entry : entries) {
            if (entry.filename().string().ends_with(".preset.json")) preset_files.push_back(entry.string());
        }
        if (sources.empty()) {
            throw Error(ErrorCode::io, "--models '" + f.models_dir +
                                           "' holds no model: put GGUF files or Hugging Face model directories "
                                           "(with config.json) in it");
        }
    }
    add_presets(sources, preset_files);
    return sources;
}

std::vector<std::string> split_lines(const std::string& joined) {
    std::vector<std::string> out;
    size_t at = 0;
    for (size_t end; (end = joined.find('\n', at)) != std::string::npos; at = end + 1)
        out.push_back(joined.substr(at, end - at));
    out.push_back(joined.substr(at));
    return out;
}

// The named adapter sets of --lora / --control-vector NAME=FILE[:SCALE]: the files given one NAME form
// one set (LoRAs first, then control vectors, each in the order given).
std::map<std::string, std::shared_ptr<const AdapterSet>> load_named_adapters(const Model& model, const ServeFlags& f) {
    std::map<std::string, std::vector<AdapterFile>> files;
    const auto add = [&](const std::string& spec, AdapterKind kind, const char* flag) {
        const size_t eq = spec.find('=');
        if (eq == std::string::npos || eq == 0) {
            throw Error(ErrorCode::invalid_argument,
                        std::string(flag) + " '" + spec + "': the server's form is NAME=FILE[:SCALE]");
        }
        files[spec.substr(0, eq)].push_back(parse_adapter_spec(spec.substr(eq + 1), kind));
    };
    for (const std::string& s : f.lora) add(s, AdapterKind::lora, "--lora");
    for (const std::string& s : f.control_vector) add(s, AdapterKind::control_vector, "--control-vector");
    std::map<std::string, std::shared_ptr<const AdapterSet>> sets;
    for (const auto& [name, list] : files) sets.emplace(name, AdapterSet::load(model, list));
    return sets;
}

std::unique_ptr<server::HttpServer> make_multi_model_server(const ServeFlags& f, const std::vector<std::string>& paths,
                                                            const server::ServerOptions& options);
int serve(std::unique_ptr<server::HttpServer> server, const sigset_t& signals, const std::string& host,
          const std::string& what);

int run_serve(const ServeFlags& f) {
    const std::vector<std::string> paths = split_lines(f.model_path);  // -m repeated: joined by CLI11 with \n
    const bool several = paths.size() > 1 || !f.models_dir.empty() || !f.presets.empty();
    // Signals are taken by a waiting thread (sigwait), not a handler, so stopping is ordinary code.
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // before any thread starts: they all inherit it
    std::signal(SIGPIPE, SIG_IGN);

    server::ServerOptions options = f.options;
    options.kv_type = parse_cache_kv_type(f.kv_type);
    if (!several && (!f.keep_alive.empty() || !f.models_memory.empty())) {
        throw Error(ErrorCode::invalid_argument,
                    "--keep-alive and --models-memory apply to a server of several models (--models DIR or -m "
                    "repeated); one model stays loaded for the server's lifetime");
    }
    options.keep_alive_s = parse_keep_alive(f.keep_alive.empty() ? "5m" : f.keep_alive);
    apply_device_flags();  // --device cuda without a GPU: refused at start, not at the first request's lazy load
    if (several) return serve(make_multi_model_server(f, paths, options), signals, f.options.host, "models");
    auto model = load_model(f.model_path, f.options.threads);
    // A hub model is named as it was asked for ("owner/name:Q8_0"), not by its snapshot's file or commit.
    if (f.model_path.starts_with("hf:")) options.model_id = f.model_path.substr(3);
    // A cache type the model cannot hold (q8_0 with a head size not a multiple of 32) is refused now, not
    // by every request.
    const State probe(*model, StateOptions{.kv_type = options.kv_type, .n_ctx = 1});
    options.adapters = load_named_adapters(*model, f);
    for (const auto& [name, set] : options.adapters)
        std::fprintf(stderr, "kvstash serve: adapter '%s': %s\n", name.c_str(), set->describe().c_str());
    options.draft_model = load_draft_model(f.spec, f.model_path, f.options.threads);
    if (options.draft_model && options.draft_model->info().n_vocab != model->info().n_vocab) {
        throw Error(ErrorCode::invalid_argument,
                    "the draft model's vocabulary differs from the model's; a draft model "
                    "must share it (pick one of the same family)");
    }
    if (!f.spec.mode.empty()) {
        options.speculation.mode =
            options.draft_model ? server::JobSpeculation::Mode::draft : server::JobSpeculation::Mode::lookup;
        options.speculation.options = f.spec.speculation;
        options.speculation.p_min = f.spec.p_min;
    }
    return serve(std::make_unique<server::HttpServer>(model, options), signals, f.options.host,
                 "model " + f.model_path);
}

std::unique_ptr<server::HttpServer> make_multi_model_server(const ServeFlags& f, const std::vector<std::string>& paths,
                                                            const server::ServerOptions& options) {
    if (!f.lora.empty() || !f.control_vector.empty() || !f.spec.mode.empty()) {
        throw Error(ErrorCode::invalid_argument,
                    "--lora, --control-vector and --spec apply to a server of one model; serve such a model alone");
    }
    server::RegistryOptions registry;
    registry.keep_alive_s = options.keep_alive_s;
    registry.memory_budget_bytes = f.models_memory.empty() ? 0 : parse_size(f.models_memory);
    std::vector<std::string> given = paths;
    if (!f.models_dir.empty() && f.model_path == default_model_path()) given.clear();  // --models alone
    std::erase(given, std::string());
    auto sources = model_sources(f, given);
    for (const auto& s : sources)
        std::fprintf(stderr, "kvstash serve: model '%s': %s\n", s.name.c_str(), s.path.c_str());
    const KvType kv_type = options.kv_type;
    const int threads = options.threads;
    return std::make_unique<server::HttpServer>(
        std::move(sources), registry,
        [kv_type, threads](const server::ModelSource& source) {
            auto model = load_model(source.path, threads);
            const State probe(*model, StateOptions{.kv_type = kv_type, .n_ctx = 1});  // as with one model
            return model;
        },
        options);
}

int serve(std::unique_ptr<server::HttpServer> server, const sigset_t& signals, const std::string& host,
          const std::string& what) {
    server::HttpServer& http = *server;
    int port = 0;
    try {
        port = http.bind();
    } catch (const Error& e) {
        // Not a bad input file (3) nor bad usage (2): the address is taken or not ours. Its own code, 6.
        std::fprintf(stderr, "kvstash: error: %s\n", e.what());
        return 6;
    }
    std::printf("kvstash serve: listening on http://%s:%d (%s)\n", host.c_str(), port, what.c_str());
    std::fflush(stdout);
    std::thread waiter([&http, signals] {
        int signal = 0;
        sigwait(&signals, &signal);
        std::fprintf(stderr, "kvstash serve: stopping (signal %d)\n", signal);
        http.stop();
    });
    http.run();
    // run() also returns if listening fails; wake the waiter so it can be joined.
    kill(getpid(), SIGTERM);
    waiter.join();
    return 0;
}

}  // namespace

void register_serve(CLI::App& root, Action& action) {
    auto f = std::make_shared<ServeFlags>();
    server::ServerOptions& o = f->options;
    auto* cmd =
        root.add_subcommand("serve",
                            "Serve the model over HTTP: an OpenAI-compatible API with continuous batching, "
                            "automatic prefix reuse and named states, and a chat web page at / (docs/webui.md)");
    add_model_option(*cmd, f->model_path);
    // Repeatable here: each -m is one more model (CLI11 joins them with \n; run_serve splits them).
    cmd->get_option("--model")->multi_option_policy(CLI::MultiOptionPolicy::Join);
    cmd->add_option("--models", f->models_dir,
                    "serve every GGUF file and Hugging Face model directory in DIR, each named by its file (without "
                    ".gguf) or directory name; requests choose by \"model\" (docs/models.md)");
    cmd->add_option("--preset", f->presets,
                    "serve a preset (JSON: model, system, template, options) under its file's name; repeatable; "
                    "NAME.preset.json files in --models DIR are presets too (docs/models.md)");
    cmd->add_option("--keep-alive", f->keep_alive,
                    "with several models: how long a model stays loaded after its last request (90s, 5m, 1h; -1: "
                    "never unloaded; default 5m); Ollama's keep_alive sets it per request");
    cmd->add_option("--models-memory", f->models_memory,
                    "with several models: most bytes of model files loaded at once (512M, 8G; 0: no limit); the "
                    "least recently used idle model is unloaded to make room");
    cmd->add_option("--host", o.host, "address to listen on")->capture_default_str();
    cmd->add_option("--port", o.port, "port (0 = any free port, printed at start)")
        ->check(CLI::Range(0, 65535))
        ->capture_default_str();
    add_threads_option(*cmd, o.threads);
    add_device_options(*cmd);
    add_spec_flags(*cmd, f->spec);
    add_ctx_option(*cmd, o.n_ctx, "context size per sequence in tokens (0 = the model's)")->capture_default_str();
    add_kv_type_option(*cmd, "--kv-type", f->kv_type, {KvType::f16, KvType::f32, KvType::q8_0},
                       "KV cache type of the sequences it computes (q8_0: about half of f16's bytes, docs/kv-cache.md; "
                       "a named state keeps its own)")
        ->capture_default_str();
    cmd->add_option("--parallel", o.parallel, "maximum sequences evaluated together (a request with n choices takes n)")
        ->check(CLI::Range(1, 1024))
        ->capture_default_str();
    cmd->add_option("--queue", o.queue, "maximum requests waiting for a slot; more are answered 503 with Retry-After")
        ->check(CLI::Range(1, 65536))
        ->capture_default_str();
    cmd->add_option("--step-tokens", o.step_tokens,
                    "prompt tokens evaluated per batch step (longer prompts are chunked)")
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
        ->capture_default_str();
    cmd->add_option("--api-key", o.api_key,
                    "require 'Authorization: Bearer KEY' on every route but /health (or set $KVSTASH_API_KEY, "
                    "which other users cannot read in the process list)")
        ->envname("KVSTASH_API_KEY");
    cmd->add_option("--cors-origin", o.cors_origins,
                    "let web pages from this origin call the API from a browser (e.g. http://localhost:3000; "
                    "'*' for any; repeat for several): CORS headers and preflight OPTIONS answers");
    cmd->add_option("--max-body", o.max_body,
                    "largest JSON request body in bytes (413 past it, checked before reading; bodies need a "
                    "Content-Length: chunked ones are refused with 411)")
        ->check(CLI::Range(uint64_t{1024}, uint64_t{1} << 34))
        ->capture_default_str();
    // Not cache_flags.h: the server always has a prefix cache (RAM only without --cache-dir), so here
    // --cache-ram stands alone, where generate/chat have no cache without --cache-dir and require it.
    cmd->add_option("--cache-ram", o.cache_ram_mib,
                    "MiB of KV blocks the prefix cache keeps in memory when unused (with or without --cache-dir)")
        ->check(CLI::Range(uint64_t{0}, uint64_t{1} << 24))
        ->capture_default_str();
    auto* cache_dir =
        cmd->add_option("--cache-dir", o.cache_dir,
                        "prefix cache disk tier: every full block is also written here once (write-through) and read "
                        "back when RAM no longer holds it, also by other kvstash processes");
    cmd->add_option("--cache-disk", o.cache_disk_mib,
                    "MiB of block files kept in --cache-dir (least recently used deleted first); on a file system "
                    "shared with --state-dir, leave room for the states")
        ->check(CLI::Range(uint64_t{0}, uint64_t{1} << 24))
        ->capture_default_str()
        ->needs(cache_dir);
    add_redis_cache_flags(*cmd, o.cache_redis, o.redis_connect_timeout_ms, o.redis_io_timeout_ms);
    auto* state_store =
        cmd->add_option("--state-store", o.state_store,
                        "keep named states in Redis, shared by every replica pointing at it: "
                        "redis://[user:password@]host:port[/db] (instead of --state-dir; see docs/deploy.md)");
    cmd->add_option("--state-dir", o.state_dir,
                    "keep named states as state files in this directory (found again at start)")
        ->excludes(state_store);
    cmd->add_option("--max-state-bytes", o.max_state_bytes, "largest uploaded state file in bytes (413 past it)")
        ->check(CLI::Range(uint64_t{1024}, uint64_t{1} << 40))
        ->capture_default_str();
    cmd->add_option("--max-connections", o.max_connections,
                    "open connections served at once (one thread each); more wait until one closes")
        ->check(CLI::Range(16, 65536))
        ->capture_default_str();
    cmd->add_option("--read-timeout", o.read_timeout_s,
                    "seconds a request may pause between bytes once begun (headers or body) before it is dropped")
        ->check(CLI::Range(1, 3600))
        ->capture_default_str();
    cmd->add_option("--idle-timeout", o.idle_timeout_s,
                    "seconds a new connection may wait before sending its request (one request per connection)")
        ->check(CLI::Range(1, 3600))
        ->capture_default_str();
    cmd->add_option("--header-timeout", o.header_timeout_s,
                    "seconds from a connection's start until its whole request head (request line and headers) has "
                    "arrived (408 past it)")
        ->check(CLI::Range(1, 3600))
        ->capture_default_str();
    cmd->add_option("--max-header-bytes", o.max_header_bytes,
                    "bytes of a request's head, request line and headers together (431 past it; one line at most "
                    "8 KiB)")
        ->check(CLI::Range(uint64_t{1024}, uint64_t{1} << 20))
        ->capture_default_str();
    cmd->add_option("--max-embedding-inputs", o.max_embedding_inputs,
                    "inputs one /v1/embeddings request may hold (400 past it)")
        ->check(CLI::Range(1, 1 << 20))
        ->capture_default_str();
    cmd->add_option("--prepare-timeout", o.prepare_timeout_s,
                    "seconds a request's preparation (compiling its grammar, JSON Schema or tools, tokenizing its "
                    "prompt) may take before it is answered 503")
        ->check(CLI::Range(0.000001, 3600.0))
        ->capture_default_str();
    cmd->add_option("--max-grammar-elements", o.grammar_limits.max_elements,
                    "elements a grammar may expand to once repetitions are written out (8 bytes each; 400 past it)")
        ->check(CLI::Range(uint64_t{1024}, uint64_t{1} << 28))
        ->capture_default_str();
    cmd->add_option("--max-grammar-depth", o.grammar_limits.max_group_depth,
                    "levels of ( ) groups a GBNF grammar may nest (400 past it)")
        ->check(CLI::Range(8, 1024))
        ->capture_default_str();
    cmd->add_option("--max-schema-nodes", o.grammar_limits.max_schema_nodes,
                    "subschemas (properties, items, anyOf entries) one JSON Schema may have (400 past it)")
        ->check(CLI::Range(int64_t{16}, int64_t{1} << 20))
        ->capture_default_str();
    cmd->add_option("--max-schema-depth", o.grammar_limits.max_schema_depth,
                    "levels a JSON Schema's subschemas may nest, $ref chains included (400 past it)")
        ->check(CLI::Range(8, 1024))
        ->capture_default_str();
    cmd->add_option("--max-connections-per-ip", o.max_connections_per_ip,
                    "connections one client address may hold open (429 past it; 0: no limit, as behind a proxy)")
        ->check(CLI::Range(0, 65536))
        ->capture_default_str();
    add_chat_template_option(*cmd, o.chat_template);
    cmd->add_option("--lora", f->lora,
                    "NAME=FILE[:SCALE]: a LoRA (llama.cpp GGUF, or a PEFT adapter directory) loaded at start, used by "
                    "requests with "
                    "\"adapter\": \"NAME\"; repeatable (files with one NAME form one set)");
    cmd->add_option("--control-vector", f->control_vector,
                    "NAME=FILE[:SCALE]: a control vector (llama.cpp GGUF) in the adapter set NAME; repeatable");
    cmd->add_option("--log-format", o.log_format,
                    "the line logged on stderr per request (method, route, status, tokens, TTFT, duration): text "
                    "or json (one object per line)")
        ->check(CLI::IsMember({"text", "json"}))
        ->capture_default_str();
    cmd->add_flag("--verbose", o.verbose,
                  "also log GET /health and /metrics, and add the path, client address and body size to each line");
    cmd->callback([&action, f] { action = [f] { return run_serve(*f); }; });
}

}  // namespace kvstash::cli
