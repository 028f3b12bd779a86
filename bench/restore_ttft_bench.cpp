// kvstash_restore_ttft_bench: time to first token after restoring a saved state (issue 15 item 6), split
// into its two parts, as one JSON object on stdout:
//
//   kvstash_restore_ttft_bench -m models/SmolLM2-135M-Instruct.Q4_1.gguf -t 2
//       -f tests/fixtures/text/persuasion_ch1-2.txt -n 8184 --suffix 8 --ctx 8192 -r 15 --state /tmp/p8184.kvs
//   (one command line)
//
// The measurement is kvstash_state_bench's "restore warm, in process" (bench/state_bench.cpp): the same
// tokens (the text tokenized as `kvstash tokenize -f` does, repeated end to end; prefix ids[0, n), suffix
// ids[n, n + suffix)), the same sampler (defaults, seed 42), the state file in the page cache. Per repeat:
//   load_s    load_state(file) (every check of the file included);
//   suffix_s  eval(suffix) on the restored state + sampling the first token;
//   ttft_s    the two together;
//   load_cpu_s, suffix_cpu_s  the CPU time of the process's threads in each part.
// Only that, so that it takes seconds once the file exists: the prefix is prefilled and saved (minutes for
// 8K tokens on 2 cores) only when --state does not already hold exactly these tokens. The logits after the
// suffix are hashed (FNV-1a of the f32 bits) and must be the same on every repeat (checked).
// Self-contained (public headers only) so that older commits can be measured with the same program.
#include <time.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "kvstash/error.h"
#include "kvstash/model.h"
#include "kvstash/sampler.h"
#include "kvstash/state_file.h"
#include "kvstash/tokenizer.h"
#if __has_include("kvstash/state.h")  // older commits declared State and Evaluator in model.h
#include "kvstash/evaluator.h"
#include "kvstash/state.h"
#endif

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// CPU time of all the process's threads (the pool's waits included): on a shared machine it does not count
// the time the threads waited for a core, as wall time does.
double process_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

json summary(std::vector<double> values) {
    json runs = values;
    std::sort(values.begin(), values.end());
    const size_t n = values.size();
    const double median = n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
    return {{"median", median}, {"min", values.front()}, {"max", values.back()}, {"runs", runs}};
}

uint64_t fnv1a(std::span<const float> logits) {
    uint64_t h = 1469598103934665603ull;
    for (const float f : logits) {
        uint32_t bits = 0;
        std::memcpy(&bits, &f, sizeof bits);
        for (int i = 0; i < 4; ++i) {
            h ^= (bits >> (8 * i)) & 0xffu;
            h *= 1099511628211ull;
        }
    }
    return h;
}

std::string read_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw kvstash::Error(kvstash::ErrorCode::io, "cannot open '" + path + "'");
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

kvstash::SamplerParams sampler_params() {
    kvstash::SamplerParams p;  // defaults: temperature 0.8, top-k 40, top-p 0.95, min-p 0.05
    p.seed = 42;
    return p;
}

// Whether `path` is a state file holding exactly `prefix` (any failure to load: no).
bool holds(const kvstash::Model& model, const std::string& path, std::span<const int32_t> prefix) {
    try {
        const kvstash::State s = kvstash::load_state(model, path);
        const std::span<const int32_t> t = s.tokens();
        return t.size() == prefix.size() && std::equal(t.begin(), t.end(), prefix.begin());
    } catch (const kvstash::Error&) {
        return false;
    }
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"kvstash_restore_ttft_bench: load_state + a short suffix, timed in parts"};
    std::string model_path = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    std::string text_path = "tests/fixtures/text/persuasion_ch1-2.txt";
    std::string state_path = "/tmp/restore_ttft_prefix.kvs";
    int threads = 2;
    int64_t n_prefix = 8184;
    int64_t n_suffix = 8;
    int64_t n_ctx = 8192;
    int repeats = 15;
    app.add_option("-m,--model", model_path, "GGUF model file");
    app.add_option("-t,--threads", threads, "evaluator threads")->check(CLI::Range(1, 1024));
    app.add_option("-f,--file", text_path, "text to tokenize (repeated end to end as needed)");
    app.add_option("-n,--prefix", n_prefix, "prefix tokens held by the state file")->check(CLI::Range(1, 1 << 20));
    app.add_option("--suffix", n_suffix, "suffix tokens evaluated after the restore")->check(CLI::Range(1, 4096));
    app.add_option("--ctx", n_ctx, "context of the state (prefix + suffix must fit)");
    app.add_option("-r,--repeats", repeats, "timed restores")->check(CLI::Range(1, 10000));
    app.add_option("--state", state_path, "the state file: reused when it holds the prefix, else written");
    CLI11_PARSE(app, argc, argv);

    try {
        if (n_prefix + n_suffix > n_ctx) {
            throw kvstash::Error(kvstash::ErrorCode::invalid_argument, "prefix + suffix exceeds --ctx");
        }
        auto model = kvstash::Model::load(model_path);
        const std::string text = read_text(text_path);
        std::string all = text;
        std::vector<int32_t> ids = model->tokenizer().encode(all, kvstash::AddSpecial::yes, kvstash::ParseSpecial::yes);
        while (static_cast<int64_t>(ids.size()) < n_prefix + n_suffix) {
            all += text;
            ids = model->tokenizer().encode(all, kvstash::AddSpecial::yes, kvstash::ParseSpecial::yes);
        }
        const std::span<const int32_t> prefix(ids.data(), static_cast<size_t>(n_prefix));
        const std::span<const int32_t> suffix(ids.data() + n_prefix, static_cast<size_t>(n_suffix));

        kvstash::Evaluator evaluator(model, threads);
        json out{{"model", model_path},       {"threads", threads}, {"prefix_tokens", n_prefix},
                 {"suffix_tokens", n_suffix}, {"ctx", n_ctx},       {"state", state_path}};
        if (!holds(*model, state_path, prefix)) {
            std::fprintf(stderr, "prefilling %lld tokens into %s...\n", static_cast<long long>(n_prefix),
                         state_path.c_str());
            kvstash::State s(*model, kvstash::StateOptions{kvstash::KvType::f16, n_ctx});
            const auto t = Clock::now();
            evaluator.eval(s, prefix);
            out["prefill_s"] = seconds_since(t);
            kvstash::save_state(s, state_path);
        }
        {  // warm-up: pages the weights and the file in, starts the pool's threads, caches the fingerprint
            kvstash::State s = kvstash::load_state(*model, state_path);
            evaluator.eval(s, suffix);
        }

        std::vector<double> load_s, suffix_s, ttft_s, load_cpu_s, suffix_cpu_s;
        std::string hash;
        int32_t token = -1;
        bool same = true;
        for (int i = 0; i < repeats; ++i) {
            const double cpu0 = process_cpu_seconds();
            const auto start = Clock::now();
            kvstash::State s = kvstash::load_state(*model, state_path);
            const double loaded = seconds_since(start);
            const double cpu1 = process_cpu_seconds();
            evaluator.eval(s, suffix);
            kvstash::Sampler sampler(sampler_params());
            const int32_t tok = sampler.sample(s.last_logits(), s.tokens());
            const double total = seconds_since(start);
            load_cpu_s.push_back(cpu1 - cpu0);
            suffix_cpu_s.push_back(process_cpu_seconds() - cpu1);
            load_s.push_back(loaded);
            suffix_s.push_back(total - loaded);
            ttft_s.push_back(total);
            char h[17];
            std::snprintf(h, sizeof h, "%016llx", static_cast<unsigned long long>(fnv1a(s.last_logits())));
            if (i == 0) {
                hash = h;
                token = tok;
            }
            same = same && hash == h && tok == token;
        }
        out["load_s"] = summary(load_s);
        out["suffix_s"] = summary(suffix_s);
        out["ttft_s"] = summary(ttft_s);
        out["load_cpu_s"] = summary(load_cpu_s);
        out["suffix_cpu_s"] = summary(suffix_cpu_s);
        out["first_token"] = token;
        out["logits_fnv1a"] = hash;
        out["same_every_repeat"] = same;
        std::printf("%s\n", out.dump(2).c_str());
        return same ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "kvstash_restore_ttft_bench: %s\n", e.what());
        return 1;
    }
}
