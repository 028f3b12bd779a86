// kvstash_batch_bench: aggregate decode throughput of several sequences advanced together by
// Evaluator::eval_batch (continuous batching), as JSON.
//
//   kvstash_batch_bench -m models/SmolLM2-135M-Instruct.Q4_1.gguf -t 2 -r 5 --streams 1,2,4,8
//
// One run for B streams: B fresh States, each with its own random prompt of `prompt` tokens (stream i
// uses seed + i, whatever B), prefilled (not timed); then `decode` steps, each one eval_batch call
// advancing every stream by its greedy (argmax) token. Aggregate tok/s = B × decode / time of the
// steps. With --sequential, the same streams are also decoded by one eval() per stream and step (no
// batching), for comparison. A warm-up run (largest B, not counted) pages the weights in. Runs of the
// different B are interleaved in each repeat (the order rotating) so that a change of machine load
// hits all alike; medians with min / max are reported.
//
// Checks, cheap: stream 0 has the same prompt for every B, so its final logits must be bitwise equal
// whatever B (batch invariance) and in every repeat; "invariant" says whether they were (the program
// exits 1 if not).
#include <CLI/CLI.hpp>

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>
#include "bench_common.h"

#include "kvstash/error.h"
#include "kvstash/evaluator.h"
#include "kvstash/model.h"
#include "kvstash/state.h"

namespace {

using bench::argmax;
using bench::Clock;
using bench::fnv1a;
using bench::hex;
using bench::process_cpu_seconds;
using bench::random_tokens;
using bench::seconds_since;
using bench::summary;
using nlohmann::json;

std::string load_average() {
    std::ifstream in("/proc/loadavg");
    std::string one, five, fifteen;
    in >> one >> five >> fifteen;
    return one + " " + five + " " + fifteen;
}

struct Run {
    double tok_s = 0;            // aggregate decoded tokens per second, all streams
    double cpu_ms_per_step = 0;  // CPU time of all the process's threads per step (spin-waits included)
    uint64_t stream0_hash = 0;   // final logits of stream 0
};

// B streams: prefill each (untimed), then `n_decode` timed steps; batched (eval_batch) or sequential
// (eval per stream).
Run run_once(const std::shared_ptr<const kvstash::Model>& model, kvstash::Evaluator& evaluator, int64_t n_streams,
             int64_t n_prompt, int64_t n_decode, uint64_t seed, bool batched) {
    const int64_t n_ctx = n_prompt + n_decode + 1;
    std::vector<kvstash::State> states;
    std::vector<std::vector<int32_t>> prompts;
    for (int64_t i = 0; i < n_streams; ++i) {
        states.emplace_back(*model, kvstash::StateOptions{kvstash::KvType::f16, n_ctx});
        prompts.push_back(random_tokens(n_prompt, model->n_vocab(), seed + static_cast<uint64_t>(i)));
    }
    std::vector<kvstash::EvalRequest> requests;
    for (int64_t i = 0; i < n_streams; ++i)
        requests.push_back({&states[static_cast<size_t>(i)], prompts[static_cast<size_t>(i)]});
    evaluator.eval_batch(requests);

    std::vector<int32_t> next(static_cast<size_t>(n_streams));
    const auto start = Clock::now();
    const double cpu_start = process_cpu_seconds();
    for (int64_t step = 0; step < n_decode; ++step) {
        for (size_t i = 0; i < states.size(); ++i) {
            next[i] = argmax(states[i].last_logits());
            requests[i].tokens = std::span<const int32_t>(&next[i], 1);
        }
        if (batched) {
            evaluator.eval_batch(requests);
        } else {
            for (const auto& r : requests) evaluator.eval(*r.state, r.tokens);
        }
    }
    Run run;
    run.tok_s = static_cast<double>(n_streams * n_decode) / seconds_since(start);
    run.cpu_ms_per_step = (process_cpu_seconds() - cpu_start) * 1e3 / static_cast<double>(n_decode);
    run.stream0_hash = fnv1a(states[0].last_logits());
    return run;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"kvstash_batch_bench: aggregate decode tok/s of B sequences advanced together by eval_batch (JSON)"};
    std::string model_path = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    int threads = 2;
    int repeats = 5;
    int64_t n_prompt = 128;
    int64_t n_decode = 64;
    uint64_t seed = 1234;
    std::vector<int64_t> streams = {1, 2, 4, 8};
    bool sequential = false;
    app.add_option("-m,--model", model_path, "GGUF model file");
    app.add_option("-t,--threads", threads, "worker threads (0 = one per hardware thread)")->check(CLI::Range(0, 1024));
    app.add_option("-r,--repeats", repeats, "measured repeats (after one warm-up)")->check(CLI::Range(1, 1000));
    app.add_option("-p,--prompt", n_prompt, "prompt tokens of each stream")->check(CLI::Range(1, 1 << 20));
    app.add_option("-n,--decode", n_decode, "decode steps")->check(CLI::Range(1, 1 << 20));
    app.add_option("--streams", streams, "stream counts to measure")->delimiter(',')->check(CLI::Range(1, 4096));
    app.add_option("--seed", seed, "seed of stream 0's prompt (stream i: seed + i)");
    app.add_flag("--sequential", sequential, "also decode the streams one eval() at a time (no batching)");
    CLI11_PARSE(app, argc, argv);

    try {
        auto model = kvstash::Model::load(model_path);
        kvstash::Evaluator evaluator(model, threads);
        json out;
        out["model"] = model_path;
        out["threads"] = evaluator.n_threads();
        out["prompt_tokens"] = n_prompt;
        out["decode_steps"] = n_decode;
        out["repeats"] = repeats;
        out["load_average_start"] = load_average();

        const int64_t largest = *std::max_element(streams.begin(), streams.end());
        run_once(model, evaluator, largest, n_prompt, n_decode, seed, true);  // warm-up

        std::map<int64_t, std::vector<double>> batched_tok_s, sequential_tok_s, batched_cpu_ms;
        std::map<int64_t, uint64_t> hashes;
        bool invariant = true;
        uint64_t reference_hash = 0;
        bool have_reference = false;
        for (int rep = 0; rep < repeats; ++rep) {
            for (size_t k = 0; k < streams.size(); ++k) {
                const int64_t b = streams[(k + static_cast<size_t>(rep)) % streams.size()];
                for (bool batched : {true, false}) {
                    if (!batched && !sequential) continue;
                    const Run r = run_once(model, evaluator, b, n_prompt, n_decode, seed, batched);
                    (batched ? batched_tok_s : sequential_tok_s)[b].push_back(r.tok_s);
                    if (batched) batched_cpu_ms[b].push_back(r.cpu_ms_per_step);
                    if (!have_reference) {
                        reference_hash = r.stream0_hash;
                        have_reference = true;
                    }
                    if (r.stream0_hash != reference_hash) invariant = false;
                    hashes[b] = r.stream0_hash;
                }
            }
        }
        json per_streams = json::array();
        for (int64_t b : streams) {
            json row = {
                {"streams", b}, {"batched_tok_s", summary(batched_tok_s[b])}, {"stream0_logits_fnv1a", hex(hashes[b])}};
            row["cpu_ms_per_step"] = summary(batched_cpu_ms[b]);
            row["step_ms"] = 1e3 * static_cast<double>(b) / row["batched_tok_s"]["median"].get<double>();
            if (sequential) row["sequential_tok_s"] = summary(sequential_tok_s[b]);
            per_streams.push_back(row);
        }
        out["results"] = per_streams;
        const auto median_of = [&](int64_t b) { return summary(batched_tok_s[b])["median"].get<double>(); };
        const int64_t smallest = *std::min_element(streams.begin(), streams.end());
        out["ratio_largest_to_smallest"] = {
            {"largest", largest}, {"smallest", smallest}, {"ratio", median_of(largest) / median_of(smallest)}};
        out["invariant"] = invariant;
        out["load_average_end"] = load_average();
        std::cout << out.dump(2) << "\n";
        return invariant ? 0 : 1;
    } catch (const kvstash::Error& e) {
        std::cerr << "error: " << e.what() << "\n";
        return 2;
    }
}
