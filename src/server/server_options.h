// The settings of `kvstash serve` (tools/kvstash/cmd_serve.cpp fills them from the command line).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kvstash/adapter.h"
#include "kvstash/grammar.h"
#include "kvstash/kv_type.h"
#include "kvstash/model.h"
#include "server/job_speculation.h"

namespace kvstash::server {

struct ServerOptions {
    std::string host = "127.0.0.1";
    int port = 8080;                 // 0: any free port (the chosen one is printed)
    int threads = 0;                 // evaluator threads (0 = hardware threads)
    int64_t n_ctx = 0;               // context per sequence (0 = the model's training context)
    std::string model_id;            // the model's name in the APIs (empty: its file name without .gguf)
    double keep_alive_s = 300;       // several models: idle seconds before one is unloaded (negative: never)
    KvType kv_type = KvType::f16;    // KV cache type of the sequences it computes (f16, f32 or q8_0)
    int parallel = 8;                // maximum sequences evaluated together
    int queue = 64;                  // maximum requests waiting for a sequence slot (then 503)
    int64_t step_tokens = 256;       // prompt tokens per scheduler step (keeps decode steps short)
    std::string api_key;             // non-empty: every route but /health needs "Authorization: Bearer <key>"
    uint64_t max_body = 4u << 20;    // bytes of a JSON request body (413 past it)
    uint64_t cache_ram_mib = 1024;   // prefix cache RAM budget
    std::string cache_dir;           // prefix cache disk tier (empty: none)
    uint64_t cache_disk_mib = 4096;  // bytes of block files kept in cache_dir, in MiB (LRU beyond)
    std::string state_dir;           // named states as files (empty: memory only)
    uint64_t max_state_bytes = uint64_t{1} << 30;  // bytes of an uploaded state file (413 past it)
    std::string chat_template;                     // empty: the model's own
    // Adapter sets loaded at start (--lora NAME=FILE[:SCALE]), chosen per request by "adapter": NAME.
    std::map<std::string, std::shared_ptr<const AdapterSet>> adapters;
    // The set in `adapters` a request runs under when it names none (a preset's adapters); empty: the model alone.
    std::string default_adapter;
    // Connections (docs/architecture/server.md, "Connections and limits"): one thread each, up to max_connections (then
    // new connections wait for one to close); read_timeout_s bounds each wait for more bytes of a request once it has
    // begun, idle_timeout_s the wait for the request of a new connection (one per connection).
    int max_connections = 1024;
    int read_timeout_s = 10;
    int idle_timeout_s = 5;
    int header_timeout_s = 10;              // the whole request head must arrive within it (408)
    uint64_t max_header_bytes = 32 * 1024;  // request line + headers (431 past it; one line: 8 KiB at most)
    int max_embedding_inputs = 2048;        // inputs of one /v1/embeddings request (400 past it; OpenAI's limit)
    int max_connections_per_ip = 0;         // connections one client address may hold (429 past it; 0: no limit)
    // Grammar / JSON Schema size limits (--max-grammar-elements, ...; 400 past them; the deadline is unused
    // here) and the seconds a request's preparation (grammar, schema, tools, prompt tokens) may take (503).
    GrammarLimits grammar_limits;
    double prepare_timeout_s = 30;
    // Speculative decoding (--spec): every request's default (its speculative.* fields change it), and the
    // draft model (--draft-model, or the model quantized at load for --spec self; null: none).
    JobSpeculation speculation;
    std::shared_ptr<const Model> draft_model;
    std::string log_format = "text";  // the per-request log line on stderr: text or json
    bool verbose = false;             // also log /health and /metrics, with client and body size

    // Shared by replicas through Redis (docs/deploy.md): the prefix cache's Redis tier (--cache-redis) and
    // the named states (--state-store, instead of state_dir), each a redis:// URL (empty: none).
    std::string cache_redis;
    std::string state_store;
    int redis_connect_timeout_ms = 100;  // both: a connect, then each command, never waits longer
    int redis_io_timeout_ms = 500;

    // Origins whose web pages may call the API from a browser (CORS; "*": any); empty: none (no CORS headers).
    std::vector<std::string> cors_origins;
};

}  // namespace kvstash::server
