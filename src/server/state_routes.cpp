// Named states: POST /v1/states (prefill and keep), GET /v1/states, GET/DELETE /v1/states/{name}, and
// GET/PUT /v1/states/{name}/file (download / upload of state files). Uploads go to a temporary file
// with a size limit and are then loaded with the state-file loader's full validation (checksums,
// version, model fingerprint) before anything is kept.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>

#include "base/atomic_file.h"
#include "kvstash/error.h"
#include "kvstash/state_file.h"
#include "server/openai_request.h"
#include "server/request_job.h"
#include "server/routes.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace kvstash::server {
namespace {

json info_json(const NamedStateInfo& info, const ServerContext& ctx) {
    return {{"object", "state"},           {"name", info.name},
            {"tokens", info.n_tokens},     {"n_ctx", info.n_ctx},
            {"bytes", info.kv_bytes},      {"file_bytes", info.file_bytes},
            {"in_memory", info.in_memory}, {"has_logits", info.has_logits},
            {"created", info.created},     {"model", ctx.model_id}};
}

std::string name_from(const httplib::Request& req) {
    const std::string name = req.matches[1];
    require_state_name(name, "name");
    return name;
}

ApiError unknown_state(const std::string& name) {
    return ApiError(404, "no state named '" + name + "' (see GET /v1/states)", "name", "state_not_found");
}

ApiError state_exists(const std::string& name) {
    return ApiError(409,
                    "a state named '" + name +
                        "' already exists: send \"replace\": true to replace it, or DELETE /v1/states/" + name +
                        " first",
                    "name", "state_exists");
}

// A scratch file for a download, in the state directory or the system's temp directory, named as
// base/atomic_file names temporary files (unique across threads and processes, hidden).
std::string download_path(const ServerContext& ctx) {
    const fs::path dir = ctx.options.state_dir.empty() ? fs::temp_directory_path() : fs::path(ctx.options.state_dir);
    return atomic_file::temp_path_for((dir / "kvstash-download.kvs").string());
}

void handle_download(const httplib::Request& req, httplib::Response& res, ServerContext& ctx) {
    const std::string name = name_from(req);
    std::optional<State> state = ctx.states->fork(name);
    if (!state) throw unknown_state(name);
    const std::string path = download_path(ctx);
    save_state(*state, path);
    std::error_code ec;
    const uint64_t size = fs::file_size(path, ec);
    if (ec) throw Error(ErrorCode::io, "cannot read back the state file written for the download: " + ec.message());
    auto file = std::make_shared<std::ifstream>(path, std::ios::binary);
    if (!*file) throw Error(ErrorCode::io, "cannot read back the state file written for the download");
    res.set_header("Content-Disposition", "attachment; filename=\"" + name + ".kvs\"");
    res.set_content_provider(
        size, "application/octet-stream",
        [file](size_t offset, size_t length, httplib::DataSink& sink) {
            std::vector<char> buffer(std::min<size_t>(length, 1 << 20));
            file->seekg(static_cast<std::streamoff>(offset));
            file->read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
            const auto got = static_cast<size_t>(file->gcount());
            return got > 0 && sink.write(buffer.data(), got);
        },
        [path](bool) {
            std::error_code ec;
            fs::remove(path, ec);
        });
}

void handle_upload(const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader,
                   ServerContext& ctx) {
    const std::string name = name_from(req);
    // Writes the body to the store's temporary file and validates it there; throwing leaves nothing behind.
    const auto write_and_load = [&](int fd, const std::string& path) {
        uint64_t received = 0;
        bool too_large = false;
        std::exception_ptr write_error;  // not thrown through httplib's reader
        reader([&](const char* data, size_t length) {
            received += length;
            if (received > ctx.options.max_state_bytes) {
                too_large = true;
                return false;
            }
            try {
                atomic_file::write_all(fd, data, length, path);
            } catch (...) {
                write_error = std::current_exception();
                return false;
            }
            return true;
        });
        if (write_error) std::rethrow_exception(write_error);
        if (too_large) {
            res.set_header("Connection", "close");
            throw ApiError(413,
                           "the state file is larger than " + std::to_string(ctx.options.max_state_bytes) +
                               " bytes (--max-state-bytes)",
                           "", "request_too_large");
        }
        if (received == 0)
            throw bad_request("the upload is empty: send the state file as the request body", "", "empty_body");
        try {
            return load_state(*ctx.model, path, LoadOptions{.adapters = default_adapters(ctx)});
        } catch (const Error& e) {
            // A malformed upload is the client's to fix (400), bad_format included; the server's own
            // failures (io, internal) keep http_status's 500 through the route guard.
            if (e.code() == ErrorCode::io || e.code() == ErrorCode::internal || e.code() == ErrorCode::output) throw;
            // The loader names the file: say "the upload" instead of a server-side temporary path.
            std::string message = e.what();
            for (size_t at; (at = message.find("'" + path + "'")) != std::string::npos;)
                message.replace(at, path.size() + 2, "(the upload)");
            for (size_t at; (at = message.find(path)) != std::string::npos;)
                message.replace(at, path.size(), "(the upload)");
            throw bad_request("not a usable state file for this model: " + message, "", "invalid_state_file");
        }
    };
    // The name's lock for the whole upload: a DELETE or another upload of the name waits for it (never
    // a half-replaced file or a 500), other names do not.
    const auto name_lock = ctx.states->lock_name(name);
    const NamedStateInfo info = ctx.states->put_file(name, write_and_load);
    send_json(res, info_json(info, ctx), 201);
}

}  // namespace

void register_state_routes(RouteTable& http, ServerContext& ctx) {
    http.Post("/v1/states", [&ctx](const httplib::Request& req, httplib::Response& res) {
        guarded(res, [&] {
            require_body_size(req, ctx);
            const PrefillRequest request = parse_prefill_request(parse_json_body(req.body));
            // Checked before the prefill (no work for a request that will be refused) and again under the
            // name's lock (two creates that both passed the first check: one wins, the other gets 409).
            if (!request.replace && ctx.states->info(request.name)) throw state_exists(request.name);
            Usage usage;
            std::shared_ptr<State> state = run_prefill(ctx, build_prefill_job(request, ctx), usage);
            const auto name_lock = ctx.states->lock_name(request.name);
            const bool existed = ctx.states->info(request.name).has_value();
            if (existed && !request.replace) throw state_exists(request.name);
            json body = info_json(ctx.states->put(request.name, std::move(*state)), ctx);
            body["usage"] = {{"prompt_tokens", usage.prompt_tokens},
                             {"prompt_tokens_details", {{"cached_tokens", usage.cached_tokens}}}};
            send_json(res, body, existed ? 200 : 201);
        });
    });
    http.Get("/v1/states", [&ctx](const httplib::Request&, httplib::Response& res) {
        guarded(res, [&] {  // the Redis store answers 503 while Redis is down, as on every state route
            json data = json::array();
            for (const NamedStateInfo& info : ctx.states->list()) data.push_back(info_json(info, ctx));
            send_json(res, {{"object", "list"}, {"data", data}});
        });
    });
    http.Get(R"(/v1/states/([^/]+))", [&ctx](const httplib::Request& req, httplib::Response& res) {
        guarded(res, [&] {
            const std::string name = name_from(req);
            const auto info = ctx.states->info(name);
            if (!info) throw unknown_state(name);
            send_json(res, info_json(*info, ctx));
        });
    });
    http.Delete(R"(/v1/states/([^/]+))", [&ctx](const httplib::Request& req, httplib::Response& res) {
        guarded(res, [&] {
            const std::string name = name_from(req);
            const auto name_lock = ctx.states->lock_name(name);
            if (!ctx.states->erase(name)) throw unknown_state(name);
            send_json(res, {{"object", "state.deleted"}, {"name", name}, {"deleted", true}});
        });
    });
    http.Get(R"(/v1/states/([^/]+)/file)", [&ctx](const httplib::Request& req, httplib::Response& res) {
        guarded(res, [&] { handle_download(req, res, ctx); });
    });
    http.Put(R"(/v1/states/([^/]+)/file)",
             [&ctx](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
                 guarded(res, [&] { handle_upload(req, res, reader, ctx); });
             });
}

}  // namespace kvstash::server
