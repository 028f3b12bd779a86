// kvstash_bench: prefill / decode throughput, time to first token and memory bandwidth, as JSON.
//
//   kvstash_bench -m models/SmolLM2-135M-Instruct.Q4_1.gguf -t 2 -r 5 --bandwidth
//
// One repeat = a fresh State; a `prompt`-token random prompt (fixed seed) evaluated in one eval() call
// (prefill; time to first token = prefill + the argmax of its logits), then `decode` tokens one eval()
// each, feeding back the argmax (greedy). A warm-up repeat (not counted) pages the weights in.
// No copies of a recurrent state are kept unless --checkpoint-interval asks (llama.cpp keeps none).
// Every repeat must end with bitwise the same logits (a hash is printed: compare it across thread
// counts to check batch invariance cheaply). Medians with min / max over the repeats are reported.
//
// --bandwidth adds a STREAM-like read test (sum of a large buffer, 1 thread and `threads` threads) so
// that decode's achieved bandwidth (weight bytes per token × decode tok/s) can be put against it.
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <CLI/CLI.hpp>

#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>

#include <random>
#include <string>
#include <thread>
#include <vector>
#include "bench_common.h"

#include "backends/cpu/matmul/matmul.h"
#include "backends/cpu/matmul/repack_tiles.h"
#include "backends/cpu/runtime/dispatch.h"
#include "backends/cpu/runtime/thread_pool.h"
#include "format/tensor_type.h"
#include "kvstash/error.h"
#include "kvstash/evaluator.h"
#include "kvstash/instruction_sets.h"
#include "kvstash/model.h"
#include "kvstash/state.h"

namespace {

using bench::argmax;
using bench::Clock;
using bench::fnv1a;
using bench::process_cpu_seconds;
using bench::seconds_since;
using bench::summary;
using bench::thread_cpu_seconds;
using nlohmann::json;

struct Repeat {
    double prefill_tok_s = 0, ttft_s = 0, decode_tok_s = 0;
    double prefill_cpu_ms_per_token = 0, decode_cpu_ms_per_token = 0;  // CPU time of all threads
    uint64_t logits_hash = 0;
};

Repeat run_once(const std::shared_ptr<const kvstash::Model>& model, kvstash::Evaluator& evaluator,
                const std::vector<int32_t>& prompt, int64_t n_decode, int64_t checkpoint_interval,
                kvstash::KvType kv_type) {
    Repeat r;
    kvstash::StateOptions options;
    options.kv_type = kv_type;
    options.n_ctx = static_cast<int64_t>(prompt.size()) + n_decode + 1;
    options.checkpoint_interval = checkpoint_interval;
    kvstash::State state(*model, options);
    const auto start = Clock::now();
    const double cpu_start = process_cpu_seconds();
    evaluator.eval(state, prompt);
    const double prefill_s = seconds_since(start);
    r.prefill_cpu_ms_per_token = (process_cpu_seconds() - cpu_start) * 1e3 / static_cast<double>(prompt.size());
    int32_t next = argmax(state.last_logits());
    r.ttft_s = seconds_since(start);
    r.prefill_tok_s = static_cast<double>(prompt.size()) / prefill_s;
    const auto decode_start = Clock::now();
    const double decode_cpu_start = process_cpu_seconds();
    for (int64_t i = 0; i < n_decode; ++i) {
        evaluator.eval(state, std::span<const int32_t>(&next, 1));
        next = argmax(state.last_logits());
    }
    r.decode_tok_s = static_cast<double>(n_decode) / seconds_since(decode_start);
    r.decode_cpu_ms_per_token =
        (process_cpu_seconds() - decode_cpu_start) * 1e3 / static_cast<double>(std::max<int64_t>(n_decode, 1));
    r.logits_hash = fnv1a(state.last_logits());
    return r;
}

// ---- memory bandwidth: each thread sums its contiguous share of a buffer much larger than the L3 ----

#if defined(__x86_64__)
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
    const __m256i sum = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), sum);
    uint64_t s = lanes[0] + lanes[1] + lanes[2] + lanes[3];
    for (; i < n; ++i) s += p[i];
    return s;
}
#endif

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
    [[maybe_unused]] const bool avx2 = kvstash::cpu_features().avx2;  // x86 only
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
#if defined(__x86_64__)
                if (avx2) {
                    sums[static_cast<size_t>(t)] = sum_bytes_avx2(p, share);
                    return;
                }
#endif
                sums[static_cast<size_t>(t)] = sum_bytes_plain(p, share);
            });
        }
        for (std::thread& th : threads) th.join();
        const double s = seconds_since(start);
        for (uint64_t v : sums) sink = sink + v;
        gbs.push_back(static_cast<double>(share) * n_threads / s / 1e9);
    }
    return summary(gbs);
}

// ---- matmul kernel alone: random valid weights of one type, n_tokens × (rows × cols) ----

// Random quant bytes with every fp16 scale / min overwritten by a small finite value.
std::vector<uint8_t> random_weights(kvstash::TensorType type, int64_t rows, int64_t cols) {
    const auto& traits = kvstash::tensor_type_traits(type);
    std::vector<uint8_t> w(kvstash::tensor_row_bytes(type, cols) * static_cast<uint64_t>(rows));
    std::mt19937 rng(7);
    for (uint8_t& b : w) b = static_cast<uint8_t>(rng());
    const uint16_t small = kvstash::fp32_to_fp16(0.01f);
    auto put = [&](size_t off) { std::memcpy(w.data() + off, &small, 2); };
    if (traits.block_size == 1) {
        for (size_t off = 0; off + traits.type_size <= w.size(); off += traits.type_size) {
            if (type == kvstash::TensorType::F32) {
                const float v = 0.01f;
                std::memcpy(w.data() + off, &v, 4);
            } else {
                put(off);
            }
        }
        return w;
    }
    for (size_t off = 0; off < w.size(); off += traits.type_size) {
        switch (type) {
            case kvstash::TensorType::Q4_1:
            case kvstash::TensorType::Q4_K:
            case kvstash::TensorType::Q5_K:
                put(off);
                put(off + 2);
                break;
            case kvstash::TensorType::Q6_K: put(off + 208); break;
            default: put(off); break;
        }
    }
    return w;
}

// Weight-stream GB/s and GFLOP/s of one matmul shape, median of `repeats` calls (after a warm-up).
json kernel_speed(kvstash::TensorType type, int64_t rows, int64_t cols, int64_t n_tokens, int threads, int repeats) {
    const std::vector<uint8_t> w = random_weights(type, rows, cols);
    std::vector<float> x(static_cast<size_t>(n_tokens * cols)), y(static_cast<size_t>(n_tokens * rows));
    std::mt19937 rng(3);
    std::normal_distribution<float> normal;
    for (float& v : x) v = normal(rng);
    kvstash::ThreadPool pool(threads);
    // The weights repacked as a model load repacks them (backends/cpu/matmul/repack_tiles.h; KVSTASH_REPACK=off: not).
    std::vector<uint8_t> tiles;
    if (kvstash::kernels::matmul_reads_repacked(kvstash::active_isa(), type)) {
        tiles.resize(kvstash::kernels::repacked_bytes(type, rows, cols));
        kvstash::kernels::repack_tiles(type, w.data(), rows, cols, tiles.data());
    }
    const void* tiles_or_null = tiles.empty() ? nullptr : tiles.data();
    // Calls per measurement: enough for ~20 ms.
    const auto t0 = Clock::now();
    kvstash::matmul(type, w.data(), rows, cols, x.data(), n_tokens, y.data(), &pool, tiles_or_null);
    const int calls = std::max(1, static_cast<int>(0.02 / std::max(seconds_since(t0), 1e-7)));
    std::vector<double> per_call, cpu_per_call;
    for (int rep = 0; rep < repeats; ++rep) {
        const auto start = Clock::now();
        const double cpu_start = thread_cpu_seconds();
        for (int c = 0; c < calls; ++c)
            kvstash::matmul(type, w.data(), rows, cols, x.data(), n_tokens, y.data(), &pool, tiles_or_null);
        cpu_per_call.push_back((thread_cpu_seconds() - cpu_start) / calls);
        per_call.push_back(seconds_since(start) / calls);
    }
    std::sort(per_call.begin(), per_call.end());
    std::sort(cpu_per_call.begin(), cpu_per_call.end());
    // One thread: the fastest CPU time (least disturbed by other processes on a shared machine); more
    // threads: the median wall time.
    const double s = threads == 1 ? cpu_per_call.front() : per_call[per_call.size() / 2];
    return {{"type", kvstash::tensor_type_name(static_cast<uint32_t>(type))},
            {"rows", rows},
            {"cols", cols},
            {"tokens", n_tokens},
            {"threads", threads},
            {"weight_mib", static_cast<double>(w.size()) / (1 << 20)},
            {"repacked", !tiles.empty()},
            {"us_per_call", s * 1e6},
            {"timed_by", threads == 1 ? "min thread cpu time" : "median wall time"},
            {"weight_gb_s", static_cast<double>(w.size()) / s / 1e9},
            {"gflop_s", 2.0 * static_cast<double>(rows * cols * n_tokens) / s / 1e9}};
}

// --kernel-shape TYPE:ROWS:COLS:TOKENS: one kernel_speed shape.
json one_kernel_shape(const std::string& spec, int threads, int repeats) {
    std::vector<std::string> parts;
    size_t start = 0;
    for (size_t colon = spec.find(':'); colon != std::string::npos; colon = spec.find(':', start)) {
        parts.push_back(spec.substr(start, colon - start));
        start = colon + 1;
    }
    parts.push_back(spec.substr(start));
    if (parts.size() != 4) {
        throw kvstash::Error(kvstash::ErrorCode::invalid_argument, "--kernel-shape: TYPE:ROWS:COLS:TOKENS");
    }
    using kvstash::TensorType;
    for (TensorType type :
         {TensorType::Q4_0, TensorType::Q4_1, TensorType::Q8_0, TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K}) {
        if (kvstash::tensor_type_name(static_cast<uint32_t>(type)) == parts[0]) {
            return kernel_speed(type, std::stoll(parts[1]), std::stoll(parts[2]), std::stoll(parts[3]), threads,
                                repeats);
        }
    }
    throw kvstash::Error(kvstash::ErrorCode::invalid_argument, "--kernel-shape: unknown type " + parts[0]);
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"kvstash_bench: prefill and decode speed, time to first token, memory bandwidth (JSON on stdout)"};
    std::string model_path;
    int threads = 0, repeats = 5, bandwidth_mib = 1024;
    int64_t n_prompt = 512, n_decode = 128;
    // llama.cpp keeps no copies of a recurrent state, so by default neither does the benchmark.
    int64_t checkpoint_interval = 0;
    bool bandwidth = false, bandwidth_only = false, kernels = false;
    uint32_t seed = 42;
    std::string kv_type_name = "f16";
    bool no_warmup = false;
    app.add_option("-m,--model", model_path, "GGUF model file");
    app.add_option("-t,--threads", threads, "worker threads (0 = one per hardware thread)")->check(CLI::Range(0, 1024));
    app.add_option("-r,--repeats", repeats, "measured repeats (after one warm-up)")->check(CLI::Range(1, 1000));
    app.add_option("-p,--prompt", n_prompt, "prompt tokens (prefill)")->check(CLI::Range(1, 1 << 20));
    app.add_option("-n,--decode", n_decode, "decoded tokens after the prompt")->check(CLI::Range(0, 1 << 20));
    app.add_option("--seed", seed, "seed of the random prompt");
    app.add_option("--kv-type", kv_type_name, "KV cache type: f16, f32 or q8_0")->capture_default_str();
    app.add_flag("--no-warmup", no_warmup,
                 "skip the warm-up run (long prompts on a loaded machine: the first repeat then includes page faults)");
    app.add_option("--checkpoint-interval", checkpoint_interval,
                   "recurrent models: keep a copy of the state every this many tokens (0 = none, as llama.cpp)")
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
    app.add_flag("--bandwidth", bandwidth, "also measure memory read bandwidth");
    app.add_flag("--bandwidth-only", bandwidth_only, "only measure memory read bandwidth (no model)");
    app.add_flag("--kernels", kernels, "only time the matmul kernels on random weights (no model)");
    std::string kernel_shape;
    app.add_option("--kernel-shape", kernel_shape,
                   "with --kernels: only this shape, TYPE:ROWS:COLS:TOKENS (e.g. q8_0:262144:640:1, Gemma 3's output)");
    app.add_option("--bandwidth-mib", bandwidth_mib, "buffer size of the bandwidth test")
        ->check(CLI::Range(64, 1 << 16));
    CLI11_PARSE(app, argc, argv);
    if (threads == 0) threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));

    try {
        json out;
        out["threads"] = threads;
        out["isa"] = kvstash::instruction_sets().active;  // "amx" where the AVX-512 path runs the AMX tiles
        if (kernels) {
            json k = json::array();
            using kvstash::TensorType;
            const std::vector<TensorType> all_types = {TensorType::Q4_1, TensorType::Q8_0, TensorType::Q4_K,
                                                       TensorType::Q6_K};
            if (!kernel_shape.empty()) k.push_back(one_kernel_shape(kernel_shape, threads, repeats));
            for (TensorType type : kernel_shape.empty() ? all_types : std::vector<TensorType>{}) {
                const int64_t small_cols = kvstash::tensor_type_traits(type).block_size == 256 ? 512 : 576;
                for (int64_t n_tokens : {int64_t{1}, int64_t{128}}) {
                    // 5632 × 2048 (a big FFN matrix: beyond the L2, within the L3) and 1536 × 576 (SmolLM2's
                    // FFN, within the L2).
                    k.push_back(kernel_speed(type, 5632, 2048, n_tokens, threads, repeats));
                    if (n_tokens > 1) k.push_back(kernel_speed(type, 2048, 5632, n_tokens, threads, repeats));
                    k.push_back(kernel_speed(type, 1536, small_cols, n_tokens, threads, repeats));
                }
                // Decode from DRAM (beyond the L3): short rows (131072 × small_cols, 40-60 MB) and long
                // rows (32768 × 2048, 36-72 MB).
                k.push_back(kernel_speed(type, 131072, small_cols, 1, threads, repeats));
                k.push_back(kernel_speed(type, 32768, 2048, 1, threads, repeats));
            }
            out["kernels"] = k;
            // Cost of one ThreadPool::run with a trivial task per thread (wake the workers, wait for them).
            kvstash::ThreadPool pool(threads);
            const int runs = 20000;
            std::atomic<int64_t> sink{0};
            const auto start = Clock::now();
            for (int i = 0; i < runs; ++i)
                pool.run(threads, [&](int64_t t) { sink.fetch_add(t, std::memory_order_relaxed); });
            out["pool_run_us"] = seconds_since(start) / runs * 1e6;
        } else if (!bandwidth_only) {
            if (model_path.empty()) {
                throw kvstash::Error(kvstash::ErrorCode::invalid_argument,
                                     "give a model with -m (or --bandwidth-only)");
            }
            auto model = kvstash::Model::load(model_path);
            kvstash::Evaluator evaluator(model, threads);
            std::mt19937 rng(seed);
            std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(model->n_vocab() - 1));
            std::vector<int32_t> prompt(static_cast<size_t>(n_prompt));
            for (int32_t& id : prompt) id = token(rng);

            const std::optional<kvstash::KvType> kv_type = kvstash::parse_kv_type(kv_type_name);
            if (!kv_type) throw kvstash::Error(kvstash::ErrorCode::invalid_argument, "--kv-type: f16, f32 or q8_0");
            if (!no_warmup) {
                run_once(model, evaluator, prompt, std::min<int64_t>(n_decode, 8), checkpoint_interval, *kv_type);
            }
            std::vector<double> prefill, ttft, decode, prefill_cpu, decode_cpu;
            uint64_t hash = 0;
            bool deterministic = true;
            for (int rep = 0; rep < repeats; ++rep) {
                const Repeat r = run_once(model, evaluator, prompt, n_decode, checkpoint_interval, *kv_type);
                prefill.push_back(r.prefill_tok_s);
                ttft.push_back(r.ttft_s);
                decode.push_back(r.decode_tok_s);
                prefill_cpu.push_back(r.prefill_cpu_ms_per_token);
                decode_cpu.push_back(r.decode_cpu_ms_per_token);
                if (rep > 0 && r.logits_hash != hash) deterministic = false;
                hash = r.logits_hash;
            }
            char hash_hex[17];
            std::snprintf(hash_hex, sizeof hash_hex, "%016llx", static_cast<unsigned long long>(hash));
            out["model"] = model_path;
            out["weight_bytes"] = model->weight_bytes();
            const kvstash::ModelInfo& info = model->info();
            out["architecture"] = info.architecture;
            out["n_layer"] = info.n_layer;
            out["n_recurrent_layers"] = info.n_recurrent_layers;
            // Per sequence, read and written once per decoded token by the recurrent layers.
            out["recurrent_state_bytes"] = info.recurrent_state_bytes;
            out["checkpoint_interval"] = checkpoint_interval;
            out["prompt_tokens"] = n_prompt;
            out["kv_type"] = kv_type_name;
            out["decode_tokens"] = n_decode;
            out["repeats"] = repeats;
            out["prefill_tok_s"] = summary(prefill);
            out["decode_tok_s"] = summary(decode);
            out["ttft_s"] = summary(ttft);
            // CPU time of all threads per token (spin-waiting included): with one thread, the work itself,
            // insensitive to other processes taking the cores.
            out["prefill_cpu_ms_per_token"] = summary(prefill_cpu);
            out["decode_cpu_ms_per_token"] = summary(decode_cpu);
            // Weight matrices are read once per decoded token (the KV cache and activations are extra).
            const double decode_median = out["decode_tok_s"]["median"].get<double>();
            out["decode_weight_gb_s"] = static_cast<double>(model->weight_bytes()) * decode_median / 1e9;
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
