// kvstash prefill: read a text once and save the model's state after it, to continue later with
// `kvstash generate --state` (in this process or any other, bit-exactly).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "kvstash/adapter_flags.h"
#include "kvstash/commands.h"
#include "kvstash/common.h"
#include "kvstash/error.h"
#include "kvstash/evaluator.h"
#include "kvstash/model.h"
#include "kvstash/progress.h"
#include "kvstash/shared_flags.h"
#include "kvstash/state.h"
#include "kvstash/state_file.h"
#include "kvstash/tokenizer.h"

namespace kvstash::cli {
namespace {

struct PrefillFlags {
    std::string model_path;
    std::string prompt;
    std::string file;
    std::string output;
    std::string kv_type = "f16";  // the cache's type while prefilling
    std::string file_kv_type;     // the KV section's type in the file; empty = kv_type
    bool compress = false;
    int64_t ctx = 0;
    int threads = 0;
    AdapterFlags adapters;
};

int run_prefill(const PrefillFlags& f) {
    const std::string text = f.file.empty() ? f.prompt : read_text_file(f.file);
    if (text.empty()) throw Error(ErrorCode::invalid_argument, "the text is empty; give some with -p or -f");
    require_valid_utf8(text, f.file.empty() ? "the prompt" : "'" + f.file + "'");
    require_writable_output(f.output);  // before the prefill, whose result it would lose
    auto model = load_model(f.model_path, f.threads);
    const std::vector<int32_t> tokens = model->tokenizer().encode(text, AddSpecial::yes, ParseSpecial::yes);
    State state(*model, StateOptions{.kv_type = parse_cache_kv_type(f.kv_type),
                                     .n_ctx = f.ctx,
                                     .adapters = load_adapter_flags(*model, f.adapters)});
    if (static_cast<int64_t>(tokens.size()) >= state.n_ctx()) {
        throw Error(ErrorCode::out_of_range, "the text has " + std::to_string(tokens.size()) +
                                                 " tokens, more than the context of " + std::to_string(state.n_ctx()) +
                                                 "; shorten it or raise --ctx");
    }
    Evaluator evaluator(model, f.threads);
    const auto start = std::chrono::steady_clock::now();
    {
        PromptProgress progress(evaluator, "prefill");
        evaluator.eval(state, tokens);
    }
    const double eval_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    SaveOptions options;
    if (!f.file_kv_type.empty()) options.file_kv_type = parse_kv_type(f.file_kv_type);
    options.compress = f.compress;
    const auto save_start = std::chrono::steady_clock::now();
    save_state(state, f.output, options);
    const double save_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - save_start).count();
    const auto bytes = std::filesystem::file_size(f.output);
    std::printf("%s: %zu tokens, %llu bytes (%.0f bytes/token), prefill %.3f s (%.1f tok/s), save %.3f s\n",
                f.output.c_str(), tokens.size(), static_cast<unsigned long long>(bytes),
                static_cast<double>(bytes) / static_cast<double>(tokens.size()), eval_seconds,
                static_cast<double>(tokens.size()) / eval_seconds, save_seconds);
    if (options.file_kv_type == KvType::q8_0 && state.kv_type() != KvType::q8_0) {
        std::fprintf(
            stderr,
            "note: the KV cache is stored as q8_0: continuing from this file is close to, but not bit-exactly, "
            "what recomputing the text would give\n");
    }
    return 0;
}

}  // namespace

void register_prefill(CLI::App& root, Action& action) {
    auto f = std::make_shared<PrefillFlags>();
    auto* cmd = root.add_subcommand("prefill", "Read a text once and save the model's state after it to a file");
    add_model_option(*cmd, f->model_path);
    const PromptFlags text = add_prompt_flags(*cmd, f->prompt, f->file);
    cmd->add_option("-o,--output", f->output, "state file to write")->required();
    add_kv_type_option(*cmd, "--kv-type", f->kv_type, {KvType::f16, KvType::f32, KvType::q8_0},
                       "KV cache type while prefilling (as for generate)")
        ->capture_default_str();
    add_kv_type_option(*cmd, "--file-kv-type", f->file_kv_type, {KvType::f16, KvType::f32, KvType::q8_0},
                       "KV type in the file (default: the cache type, bit-exact; q8_0 is about half of f16, not "
                       "bit-exact unless the cache is q8_0)");
    cmd->add_flag("--compress", f->compress, "compress the file with zstd");
    add_ctx_option(*cmd, f->ctx, "context size of the saved state (0 = the model's)");
    add_adapter_flags(*cmd, f->adapters);
    add_threads_option(*cmd, f->threads);
    add_device_options(*cmd);
    cmd->callback([&action, f, text] {
        if (!text.given()) {
            std::optional<std::string> piped = piped_prompt();
            if (!piped) throw CLI::RequiredError("one of -p/--prompt, -f/--file or text on standard input");
            f->prompt = std::move(*piped);
        }
        action = [f] { return run_prefill(*f); };
    });
}

}  // namespace kvstash::cli
