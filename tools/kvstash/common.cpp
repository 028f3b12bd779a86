#include "kvstash/common.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "base/atomic_file.h"
#include "base/regular_file.h"
#include "base/utf8.h"
#include "engine/device.h"
#include "kvstash/error.h"
#include "kvstash/model_source.h"
#include "kvstash/state_file.h"

namespace kvstash::cli {

std::string default_model_path() {
    if (const char* env = std::getenv("KVSTASH_MODEL"); env && *env) return env;
    if (const char* dir = std::getenv("KVSTASH_MODELS_DIR"); dir && *dir) {
        return std::string(dir) + "/SmolLM2-135M-Instruct.Q4_1.gguf";
    }
    return std::string(KVSTASH_DEFAULT_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf";
}

namespace {
std::string g_quantize = "none";  // --quantize: one process runs one subcommand
std::string g_device;             // --device; empty: not given
int g_gpu_layers = -1;            // -ngl; -1: not given

}  // namespace

// The device the flags ask for, chosen for the process (once; later calls: the draft model's load).
void apply_device_flags() {
    static bool applied = false;
    if (applied) return;
    applied = true;
    DeviceKind device = g_device.empty() ? DeviceKind::cpu : parse_device(g_device);
    if (g_gpu_layers >= 0) {
        const DeviceKind from_layers = device_from_gpu_layers(g_gpu_layers);
        if (!g_device.empty() && from_layers != device) {
            throw Error(ErrorCode::invalid_argument, "--device " + g_device + " and -ngl " +
                                                         std::to_string(g_gpu_layers) + " disagree; give one of them");
        }
        device = from_layers;
    }
    try {
        use_device(device);
    } catch (const Error& e) {
        // Not built with CUDA, or no GPU here: the flag cannot be honoured (a usage error, exit 2).
        throw Error(ErrorCode::invalid_argument, e.what());
    }
}

void add_device_options(CLI::App& app) {
    app.add_option("--device", g_device,
                   "where the model runs: cpu (default) or cuda (the whole model on GPU 0; a -DKVSTASH_CUDA=ON build, "
                   "Llama-family and Qwen2 models; docs/cuda.md)")
        ->check(CLI::IsMember({"cpu", "cuda"}));
    app.add_option("--n-gpu-layers,--gpu-layers", g_gpu_layers,
                   "-ngl: llama.cpp's layer offload count, accepted: 0 = --device cpu, any N > 0 = --device cuda (all "
                   "layers; kvstash never splits a model between devices)")
        ->check(CLI::Range(0, 1 << 20));
}

void add_model_option(CLI::App& app, std::string& model_path) {
    model_path = default_model_path();
    app.add_option("-m,--model", model_path,
                   "GGUF model file, Hugging Face model directory (config.json, *.safetensors, tokenizer.json), or "
                   "hf:OWNER/NAME[:QUANT] from the hub cache (fetched when missing; see kvstash pull) "
                   "(default: $KVSTASH_MODEL or the model installed by scripts/setup.sh)")
        ->capture_default_str();
    app.add_option("--quantize", g_quantize,
                   "quantize a model directory's weights at load: none, q8_0 (as convert_hf_to_gguf.py "
                   "--outtype q8_0) or q4_K (ggml's q4_K for matrices whose rows are whole 256-blocks, q8_0 for "
                   "the others); a GGUF keeps its own types")
        ->check(CLI::IsMember({"none", "q8_0", "q4_K"}))
        ->capture_default_str();
}

std::shared_ptr<const Model> load_model(const std::string& path, int n_threads) {
    apply_device_flags();
    ModelLoadOptions options;
    if (g_quantize == "q8_0") options.quantize = LoadQuantization::q8_0;
    if (g_quantize == "q4_K") options.quantize = LoadQuantization::q4_K;
    options.n_threads = n_threads;
    bool shown = false;
    if (stderr_is_tty()) {
        // Only what lasts: the first report comes after ~0.2 s, so a small model's load prints nothing.
        options.on_progress = [&shown](const LoadProgress& p) {
            if (p.done == p.total && !shown) return;
            shown = true;
            std::fprintf(stderr, "\r\033[Kloading: %.*s, %.1f of %.1f GB (%.0f%%)", static_cast<int>(p.what.size()),
                         p.what.data(), static_cast<double>(p.done) / 1e9, static_cast<double>(p.total) / 1e9,
                         100.0 * static_cast<double>(p.done) / static_cast<double>(std::max<uint64_t>(1, p.total)));
            std::fflush(stderr);
        };
    }
    auto model = Model::load(resolve_model_path(path), options);
    if (shown) std::fputs("\r\033[K", stderr);  // clear the line
    for (const std::string& warning : model->warnings())
        std::fprintf(stderr, "kvstash: warning: %s\n", warning.c_str());
    return model;
}

void add_threads_option(CLI::App& app, int& n_threads) {
    app.add_option("-t,--threads", n_threads, "worker threads (0 = one per hardware thread)")
        ->check(CLI::Range(0, 1024))
        ->capture_default_str();
}

std::string read_text_file(const std::string& path) {
    if (path == "-") return read_standard_input();
    return regular_file::read_all(path, "text file");  // a FIFO or directory: refused at once
}

std::string read_standard_input() {
    std::ostringstream text;
    text << std::cin.rdbuf();
    if (std::cin.bad()) throw Error(ErrorCode::io, "cannot read the text from standard input");
    return text.str();
}

bool stdin_is_piped() {
    // A pipe or a redirected file carries text; a terminal waits for typing and /dev/null (a character
    // device, what CI and service managers give) carries none: both mean "no text given".
    struct stat info {};
    if (fstat(STDIN_FILENO, &info) != 0) return false;
    return S_ISFIFO(info.st_mode) || S_ISREG(info.st_mode);
}

void require_writable_output(const std::string& path) {
    atomic_file::Options options;
    options.what = "state file";
    atomic_file::check_writable(path, options);
}

bool stderr_is_tty() { return isatty(STDERR_FILENO) != 0; }

void warn_if_not_exact_here(const std::string& path) {
    const StateFileInfo info = inspect_state_file(path, Checksums::skip);
    if (info.exact_here) return;
    const std::string why = info.lossy_kv ? "its KV is stored as q8_0"
                                          : "its KV was computed with other numerics (" + info.numerics +
                                                "; this process: " + process_numerics() + ")";
    std::fprintf(stderr,
                 "note: %s: %s, so continuing it is close to, but not bit-identical with, recomputing its text "
                 "here (`kvstash prefill` it again for bit-exact results); the prefix cache does not reuse it\n",
                 path.c_str(), why.c_str());
}

}  // namespace kvstash::cli

namespace kvstash::cli {

void require_valid_utf8(std::string_view text, const std::string& what) {
    const size_t valid = utf8::valid_prefix_length(text);
    if (valid != text.size()) {
        throw Error(ErrorCode::invalid_argument, what + " is not valid UTF-8 (bad byte at offset " +
                                                     std::to_string(valid) + "); kvstash reads text as UTF-8");
    }
}

KvType parse_cache_kv_type(const std::string& name) {
    const std::optional<KvType> type = parse_kv_type(name);
    if (type) return *type;
    throw Error(ErrorCode::invalid_argument, "unknown KV cache type '" + name + "' (use f16, f32 or q8_0)");
}

std::string join_names(const std::vector<std::string>& names) {
    std::string out;
    for (const auto& n : names) out += (out.empty() ? "" : "|") + n;
    return out;
}

}  // namespace kvstash::cli
