// kvstash_bench: prefill / decode throughput, time to first token and memory bandwidth, as JSON.
//
//   kvstash_bench -m models/SmolLM2-135M-Instruct.Q4_1.gguf -t 2 -r 5 --bandwidth
//
// One repeat = a fresh State; a `prompt`-token random prompt (fixed seed) evaluated in one eval() call
// (prefill; time to first token = prefill + the argmax of its logits), then `decode` tokens one eval()
// each, feeding back the argmax (greedy). A warm-up repeat (not counted) pages the weights in.
// Every repeat must end with bitwise the same logits (a hash is printed: compare it across thread
// counts to check batch invariance cheaply). Medians with min / max over the repeats are reported.
//
// --bandwidth adds a STREAM-like read test (sum of a large buffer, 1 thread and `threads` threads) so
// that decode's achieved bandwidth (weight bytes per token × decode tok/s) can be put against it.
#include <CLI/CLI.hpp>
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/dispatch.h"
#include "kvstash/error.h"
#include "kvstash/model.h"

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

json summary(std::vector<double> values) {
    std::sort(values.begin(), values.end());
    const size_t n = values.size();
    const double median = n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
    return {{"median", median}, {"min", values.front()}, {"max", values.back()}, {"runs", values}};
}

int32_t argmax(std::span<const float> logits) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// FNV-1a over the bytes of the logits: equal hashes across runs / thread counts = bitwise equal logits.
uint64_t fnv1a(std::span<const float> logits) {
    uint64_t h = 1469598103934665603ull;
    const auto* p = reinterpret_cast<const uint8_t*>(logits.data());
    for (size_t i = 0; i < logits.size_bytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

struct Repeat {
    double prefill_tok_s = 0, ttft_s = 0, decode_tok_s = 0;
    uint64_t logits_hash = 0;
};

Repeat run_once(const std::shared_ptr<const kvstash::Model>& model, kvstash::Evaluator& evaluator,
                const std::vector<int32_t>& prompt, int64_t n_decode) {
    Repeat r;
    kvstash::State state(*model, kvstash::StateOptions{kvstash::KvType::f16, static_cast<int64_t>(prompt.size()) + n_decode + 1});
    const auto start = Clock::now();
    evaluator.eval(state, prompt);
    const double prefill_s = seconds_since(start);
    int32_t next = argmax(state.last_logits());
    r.ttft_s = seconds_since(start);
    r.prefill_tok_s = static_cast<double>(prompt.size()) / prefill_s;
    const auto decode_start = Clock::now();
    for (int64_t i = 0; i < n_decode; ++i) {
        evaluator.eval(state, std::span<const int32_t>(&next, 1));
        next = argmax(state.last_logits());
    }
    r.decode_tok_s = static_cast<double>(n_decode) / seconds_since(decode_start);
    r.logits_hash = fnv1a(state.last_logits());
    return r;
}

// ---- memory bandwidth: each thread sums its contiguous share of a buffer much larger than the L3 ----

__attribute__((target("avx2"))) uint64_t sum_bytes_avx2(const uint8_t* p, size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 128 <= n; i += 128) {
        a0 = _mm256_add_epi64(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
        a2 = _mm256_add_epi64(a2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
        a3 = _mm256_add_epi64(a3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
    }
    alignas(32) uint64_t lanes[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
    uint64_t s = lanes[0] + lanes[1] + lanes[2] + lanes[3];
    for (; i < n; ++i) s += p[i];
    return s;
}

uint64_t sum_bytes_plain(const uint8_t* p, size_t n) {
    uint64_t s = 0;
    for (size_t i = 0; i + 8 <= n; i += 8) {
        uint64_t v;
        std::memcpy(&v, p + i, 8);
        s += v;
    }
    return s;
}

// GB/s (1e9 bytes/s) reading `buffer` with n_threads threads; median of `repeats` passes.
json read_bandwidth(const std::vector<uint8_t>& buffer, int n_threads, int repeats) {
    const bool avx2 = __builtin_cpu_supports("avx2");
    std::vector<double> gbs;
    volatile uint64_t sink = 0;
    for (int rep = 0; rep < repeats; ++rep) {
        std::vector<uint64_t> sums(static_cast<size_t>(n_threads));
        const size_t share = buffer.size() / static_cast<size_t>(n_threads) / 4096 * 4096;
        const auto start = Clock::now();
        std::vector<std::thread> threads;
        for (int t = 0; t < n_threads; ++t) {
            threads.emplace_back([&, t] {
                const uint8_t* p = buffer.data() + share * static_cast<size_t>(t);
                sums[static_cast<size_t>(t)] = avx2 ? sum_bytes_avx2(p, share) : sum_bytes_plain(p, share);
            });
        }
        for (std::thread& th : threads) th.join();
        const double s = seconds_since(start);
        for (uint64_t v : sums) sink = sink + v;
        gbs.push_back(static_cast<double>(share) * n_threads / s / 1e9);
    }
    return summary(gbs);
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"kvstash_bench: prefill and decode speed, time to first token, memory bandwidth (JSON on stdout)"};
    std::string model_path;
    int threads = 0, repeats = 5, bandwidth_mib = 1024;
    int64_t n_prompt = 512, n_decode = 128;
    bool bandwidth = false, bandwidth_only = false;
    uint32_t seed = 42;
    app.add_option("-m,--model", model_path, "GGUF model file");
    app.add_option("-t,--threads", threads, "worker threads (0 = one per hardware thread)")->check(CLI::Range(0, 1024));
    app.add_option("-r,--repeats", repeats, "measured repeats (after one warm-up)")->check(CLI::Range(1, 1000));
    app.add_option("-p,--prompt", n_prompt, "prompt tokens (prefill)")->check(CLI::Range(1, 1 << 20));
    app.add_option("-n,--decode", n_decode, "decoded tokens after the prompt")->check(CLI::Range(0, 1 << 20));
    app.add_option("--seed", seed, "seed of the random prompt");
    app.add_flag("--bandwidth", bandwidth, "also measure memory read bandwidth");
    app.add_flag("--bandwidth-only", bandwidth_only, "only measure memory read bandwidth (no model)");
    app.add_option("--bandwidth-mib", bandwidth_mib, "buffer size of the bandwidth test")->check(CLI::Range(64, 1 << 16));
    CLI11_PARSE(app, argc, argv);
    if (threads == 0) threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));

    try {
        json out;
        out["threads"] = threads;
        out["isa"] = kvstash::isa_name(kvstash::active_isa());
        if (!bandwidth_only) {
            if (model_path.empty()) throw kvstash::Error(kvstash::ErrorCode::invalid_argument, "give a model with -m (or --bandwidth-only)");
            auto model = kvstash::Model::load(model_path);
            kvstash::Evaluator evaluator(model, threads);
            std::mt19937 rng(seed);
            std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(model->n_vocab() - 1));
            std::vector<int32_t> prompt(static_cast<size_t>(n_prompt));
            for (int32_t& id : prompt) id = token(rng);

            const Repeat warm = run_once(model, evaluator, prompt, std::min<int64_t>(n_decode, 8));
            (void)warm;
            std::vector<double> prefill, ttft, decode;
            uint64_t hash = 0;
            bool deterministic = true;
            for (int rep = 0; rep < repeats; ++rep) {
                const Repeat r = run_once(model, evaluator, prompt, n_decode);
                prefill.push_back(r.prefill_tok_s);
                ttft.push_back(r.ttft_s);
                decode.push_back(r.decode_tok_s);
                if (rep > 0 && r.logits_hash != hash) deterministic = false;
                hash = r.logits_hash;
            }
            char hash_hex[17];
            std::snprintf(hash_hex, sizeof hash_hex, "%016llx", static_cast<unsigned long long>(hash));
            out["model"] = model_path;
            out["weight_bytes"] = model->weight_bytes();
            out["prompt_tokens"] = n_prompt;
            out["decode_tokens"] = n_decode;
            out["repeats"] = repeats;
            out["prefill_tok_s"] = summary(prefill);
            out["decode_tok_s"] = summary(decode);
            out["ttft_s"] = summary(ttft);
            // Weight matrices are read once per decoded token (the KV cache and activations are extra).
            out["decode_weight_gb_s"] = static_cast<double>(model->weight_bytes()) * out["decode_tok_s"]["median"].get<double>() / 1e9;
            out["final_logits_fnv1a"] = hash_hex;
            out["deterministic"] = deterministic;
        }
        if (bandwidth || bandwidth_only) {
            std::vector<uint8_t> buffer(static_cast<size_t>(bandwidth_mib) << 20);
            for (size_t i = 0; i < buffer.size(); i += 64) buffer[i] = static_cast<uint8_t>(i >> 6);
            json bw;
            bw["buffer_mib"] = bandwidth_mib;
            bw["read_gb_s_1_thread"] = read_bandwidth(buffer, 1, 7);
            bw["read_gb_s_threads"] = read_bandwidth(buffer, threads, 7);
            out["bandwidth"] = bw;
        }
        std::printf("%s\n", out.dump(2).c_str());
    } catch (const kvstash::Error& e) {
        std::fprintf(stderr, "kvstash_bench: %s\n", e.what());
        return 1;
    }
    return 0;
}
