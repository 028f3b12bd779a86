// kvstash_attention_bench: the attention kernel alone at long context, in a model's shape (JSON on stdout).
//
//   kvstash_attention_bench -m models/SmolLM2-135M-Instruct.Q4_1.gguf -t 2 --context 4096 --context 8192 [--kv-type
//   q8_0]
//   kvstash_attention_bench --shape 2 1 64 2 -t 2 --context 32768 --prefill-rows 128 --prefill-only
//   kvstash_attention_bench --shape 4 1 256 15 -t 1 --context 8192 --prefill-rows 256 --prefill-only --window 512
//
// (--shape: n_head n_head_kv head_dim n_layer, no model file needed; the second line is the random Llama 3.1
// fixture's shape; the third Gemma 3 270M's sliding-window layers.)
// For each context length C, a random f16 (or q8_0) KV cache of C positions for every layer (32-token blocks
// from the KV block pool, every layer's rows in one block, as a State holds it) and random queries; then, timed (median
// of the repeats):
//   decode:  one query row at position C - 1, every layer (what one decoded token costs in attention),
//            with the kernel as the engine runs it (attention_with, a pool of -t threads);
//   decode_per_row_definition: the same row through attention_per_row_with (one thread, per head, the
//            per-row operations: the arithmetic the old per-head kernel ran, with no grouping or split);
//   prefill: the last --prefill-rows rows (positions C - rows .. C - 1) in one call, every layer, and its
//            GFLOP/s (4 flops per head, key and dimension) per wall and per CPU second, and per CPU second of the
//            least disturbed repeat (on a shared machine); --prefill-only skips the decode measurements.
// Together with kvstash_bench's decode time per token this splits decode into attention and the rest
// (matmuls, norms, rope, sampling); see docs/benchmarks-history.md, "Long contexts".
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/attention/attention.h"
#include "backends/cpu/runtime/dispatch.h"
#include "backends/cpu/runtime/thread_pool.h"
#include "bench_common.h"
#include "format/quantize.h"
#include "format/tensor_type.h"
#include "kv/kv_block_buffer.h"
#include "kvstash/model.h"

namespace {

using kvstash::AttentionShape;
using kvstash::KvLayerView;

constexpr int64_t kBlockTokens = 32;

// Every layer's K and V of n_pos random positions laid out as a State holds them (kv/kv_cache.h): per
// 32-token block one K and one V buffer from the KV block pool (huge pages), each holding the block's rows
// of every layer, layer after layer; f16, or q8_0 with --kv-type q8_0.
struct ModelCache {
    std::vector<kvstash::KvBlockBuffer> k_blocks, v_blocks;
    std::vector<std::vector<const uint8_t*>> k_tables, v_tables;  // (layer, block)
    uint64_t row_bytes = 0;
    kvstash::TensorType type;

    ModelCache(int64_t n_layer, int64_t n_pos, int64_t width, std::mt19937& rng, kvstash::TensorType t) : type(t) {
        row_bytes = kvstash::tensor_row_bytes(type, width);
        const uint64_t layer_bytes = kBlockTokens * row_bytes;
        std::normal_distribution<float> normal(0.0f, 1.0f);
        std::vector<float> row(static_cast<size_t>(width));
        k_tables.resize(static_cast<size_t>(n_layer));
        v_tables.resize(static_cast<size_t>(n_layer));
        for (int64_t b = 0; b * kBlockTokens < n_pos; ++b) {
            for (auto* blocks : {&k_blocks, &v_blocks}) {
                blocks->emplace_back(static_cast<size_t>(n_layer) * layer_bytes);
                for (int64_t r = 0; r < n_layer * kBlockTokens; ++r) {
                    for (float& x : row) x = normal(rng);
                    uint8_t* dst = blocks->back().data() + static_cast<uint64_t>(r) * row_bytes;
                    if (type == kvstash::TensorType::Q8_0) {
                        kvstash::quantize_row_q8_0(row.data(), dst, width);
                    } else {
                        auto* h = reinterpret_cast<uint16_t*>(dst);
                        for (int64_t i = 0; i < width; ++i) h[i] = kvstash::fp32_to_fp16(row[static_cast<size_t>(i)]);
                    }
                }
            }
            for (int64_t l = 0; l < n_layer; ++l) {
                k_tables[static_cast<size_t>(l)].push_back(k_blocks.back().data() +
                                                           static_cast<uint64_t>(l) * layer_bytes);
                v_tables[static_cast<size_t>(l)].push_back(v_blocks.back().data() +
                                                           static_cast<uint64_t>(l) * layer_bytes);
            }
        }
    }

    KvLayerView view(int64_t layer) const {
        KvLayerView v;
        v.type = type;
        v.block_tokens = kBlockTokens;
        v.row_bytes = row_bytes;
        v.k_blocks = k_tables[static_cast<size_t>(layer)].data();
        v.v_blocks = v_tables[static_cast<size_t>(layer)].data();
        return v;
    }
};

// Medians of wall-clock ms and of the process's CPU ms (all threads: with -t 1 the work itself,
// insensitive to other processes on a shared machine).
struct Timing {
    double wall_ms = 0, cpu_ms = 0;
    double min_cpu_ms = 0;  // the least disturbed repeat on a shared machine
};

template <typename F>
Timing median_ms(int repeats, F&& f) {
    std::vector<double> wall, cpu;
    f();  // warm-up
    for (int r = 0; r < repeats; ++r) {
        const auto start = bench::Clock::now();
        const double cpu_start = bench::process_cpu_seconds();
        f();
        wall.push_back(bench::seconds_since(start) * 1e3);
        cpu.push_back((bench::process_cpu_seconds() - cpu_start) * 1e3);
    }
    std::sort(wall.begin(), wall.end());
    std::sort(cpu.begin(), cpu.end());
    return {wall[wall.size() / 2], cpu[cpu.size() / 2], cpu.front()};
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"kvstash_attention_bench: the attention kernel alone at long context, in a model's shape"};
    std::string model_path;
    int threads = 2, repeats = 5;
    int64_t prefill_rows = 128;
    std::vector<int64_t> contexts;
    std::vector<int64_t> shape_override;
    auto* model_option = app.add_option("-m,--model", model_path, "GGUF model (for its attention shape)");
    app.add_option("--shape", shape_override,
                   "n_head n_head_kv head_dim n_layer instead of a model's (e.g. SmolLM2-135M: 9 3 64 30)")
        ->expected(4)
        ->excludes(model_option);
    app.add_option("-t,--threads", threads, "worker threads")->check(CLI::Range(1, 1024));
    app.add_option("-r,--repeats", repeats, "measured repeats")->check(CLI::Range(1, 1000));
    app.add_option("--context", contexts, "context lengths (repeatable)")->required();
    app.add_option("--prefill-rows", prefill_rows, "query rows of the prefill measurement (0: none)");
    std::string kv_type = "f16";
    app.add_option("--kv-type", kv_type, "KV type of the random cache: f16 or q8_0")
        ->check(CLI::IsMember({"f16", "q8_0"}))
        ->capture_default_str();
    bool prefill_only = false;
    app.add_flag("--prefill-only", prefill_only, "skip the decode measurements");
    int64_t window = 0;
    app.add_option("--window", window, "sliding window of every layer (Gemma 3's local layers: 512; 0: none)")
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
    CLI11_PARSE(app, argc, argv);

    if (model_path.empty() && shape_override.empty()) {
        std::fprintf(stderr, "give -m MODEL or --shape\n");
        return 1;
    }
    AttentionShape shape;
    int64_t n_layer = 0;
    if (shape_override.empty()) {
        const auto model = kvstash::Model::load(model_path);
        const kvstash::ModelInfo& info = model->info();
        shape.n_head = info.n_head;
        shape.n_head_kv = info.n_head_kv;
        shape.head_dim = info.head_dim;
        n_layer = info.n_kv_layers;
    } else {
        shape.n_head = shape_override[0];
        shape.n_head_kv = shape_override[1];
        shape.head_dim = shape_override[2];
        n_layer = shape_override[3];
    }
    shape.scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
    shape.window = window;
    const int64_t q_width = shape.n_head * shape.head_dim;
    kvstash::ThreadPool pool(threads);
    const kvstash::Isa isa = kvstash::active_isa();

    nlohmann::json out;
    out["model"] = model_path;
    out["isa"] = kvstash::isa_name(isa);
    out["threads"] = threads;
    out["kv_type"] = kv_type;
    out["n_layer"] = n_layer;
    out["shape"] = {{"n_head", shape.n_head},
                    {"n_head_kv", shape.n_head_kv},
                    {"head_dim", shape.head_dim},
                    {"window", shape.window}};
    for (int64_t ctx : contexts) {
        std::mt19937 rng(static_cast<uint32_t>(ctx));
        const ModelCache cache(n_layer, ctx, shape.n_head_kv * shape.head_dim, rng,
                               kv_type == "q8_0" ? kvstash::TensorType::Q8_0 : kvstash::TensorType::F16);
        const int64_t rows = std::min(prefill_rows, ctx);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        std::vector<float> q(static_cast<size_t>(std::max<int64_t>(rows, 1) * q_width));
        for (float& x : q) x = normal(rng);
        std::vector<float> o(q.size());
        nlohmann::json r;
        r["context"] = ctx;
        const double kv_bytes = 2.0 * static_cast<double>(n_layer * ctx) * static_cast<double>(cache.row_bytes);
        r["kv_bytes_per_token"] = kv_bytes;
        if (!prefill_only) {
            const Timing decode = median_ms(repeats, [&] {
                for (int64_t l = 0; l < n_layer; ++l) {
                    kvstash::attention_with(isa, shape, cache.view(l), q.data(), 1, ctx - 1, o.data(), &pool);
                }
            });
            r["decode_ms_per_token"] = decode.wall_ms;
            r["decode_cpu_ms_per_token"] = decode.cpu_ms;
            r["decode_kv_gb_s"] = kv_bytes / decode.wall_ms / 1e6;
            const Timing definition = median_ms(std::min(repeats, 3), [&] {
                for (int64_t l = 0; l < n_layer; ++l) {
                    kvstash::attention_per_row_with(isa, shape, cache.view(l), q.data(), 1, ctx - 1, o.data());
                }
            });
            r["decode_per_row_definition_ms"] = definition.wall_ms;
            r["decode_per_row_definition_cpu_ms"] = definition.cpu_ms;
        }
        if (rows > 0) {
            const Timing prefill = median_ms(repeats, [&] {
                for (int64_t l = 0; l < n_layer; ++l) {
                    kvstash::attention_with(isa, shape, cache.view(l), q.data(), rows, ctx - rows, o.data(), &pool);
                }
            });
            r["prefill_rows"] = rows;
            r["prefill_ms_per_row"] = prefill.wall_ms / static_cast<double>(rows);
            r["prefill_cpu_ms_per_row"] = prefill.cpu_ms / static_cast<double>(rows);
            // 4 flops per (head, key, dimension): the score's multiply-add and the value's.
            double flops = 0;
            for (int64_t p = ctx - rows; p < ctx; ++p) {
                const int64_t keys = window > 0 ? std::min(window, p + 1) : p + 1;
                flops += 4.0 * static_cast<double>(shape.n_head * shape.head_dim) * static_cast<double>(keys);
            }
            flops *= static_cast<double>(n_layer);
            r["prefill_gflop_s"] = flops / prefill.wall_ms / 1e6;
            r["prefill_gflop_per_cpu_s"] = flops / prefill.cpu_ms / 1e6;
            r["prefill_gflop_per_cpu_s_best"] = flops / prefill.min_cpu_ms / 1e6;
        }
        out["contexts"].push_back(r);
        std::fprintf(stderr, "context %lld done\n", static_cast<long long>(ctx));
    }
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
}
