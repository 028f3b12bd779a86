// kvstash_state_bench: what a saved or forked state buys (issue 4), as JSON on stdout.
//
//   kvstash_state_bench -m models/SmolLM2-135M-Instruct.Q4_1.gguf -t 2
//       -f tests/fixtures/text/persuasion_ch1-2.txt --sizes 512,2048,8184 -r 5 --dir build-sb/state-bench
//   (one command line)
//
// The text is tokenized as `kvstash tokenize -f` does (add_special, parse_special), repeated end to end
// (the file's text concatenated with itself) until there are enough tokens. For a prefix of N tokens the
// prefix is ids[0, N) and the suffix ids[N, N + suffix). Time to first token (TTFT) is measured from
// the moment the request arrives to the first sampled token (kvstash::Sampler, default parameters,
// seed 42), for
//   full        a fresh State (n_ctx = --ctx): eval(prefix + suffix) in one call, sample;
//   restore     load_state(file) + eval(suffix) + sample, with the file in the page cache (warm),
//               (a) in this process, where the allocator hands back the KV memory of earlier repeats,
//               (b) in a fresh process (this program re-executed: model loaded, weights paged in and
//               fingerprint cached before the clock starts), where the KV blocks are new pages;
//   restore cold  as (b), with the file's pages evicted from the page cache first
//               (posix_fadvise DONTNEED after the save's fsync, checked with mincore; or
//               --cold drop_caches: `sync; echo 3 > /proc/sys/vm/drop_caches`, root only);
//   fork        State::fork() of a prefilled state + eval(suffix) + sample.
// Every way must give bitwise the same final logits and the same token (checked, reported).
//
// Then, per size: save_state (f16, as the cache; includes the fsync of the file and the directory) and
// load_state times and GB/s (file bytes / time), beside `cat FILE > /dev/null` (posix_spawn, warm) and
// a read(2) loop over the file in this process; and for --variants-size: --compress, q8_0 and
// q8_0 + compress. Bytes per token of each file against the raw KV (n_layer × 2 × n_embd_kv × bytes).
// Repeats are interleaved (full, restore, restore fresh, restore cold, fork, full, ...) so that load on
// a shared machine hits every way alike; medians with min / max and every run are printed. A full
// recompute of a long prefix takes minutes on 2 cores: --full-repeats-long limits how many of the
// repeats include one for prefixes over 4096 tokens (the prefill of the prefix, `prefill_s`, is one
// more such measurement). The first-token / logits check always includes the full recompute.
//
// --throughput-only: only the file part, in a few minutes instead of ~45: per size, save, load in this
// process and in a fresh one, `cat` and the read(2) loop, interleaved; the state files in --dir are
// reused when they hold the same tokens (see throughput_only() below).
#include <fcntl.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include <sstream>
#include <string>
#include <vector>
#include "bench_common.h"

#include "kvstash/error.h"
#include "kvstash/evaluator.h"
#include "kvstash/model.h"
#include "kvstash/sampler.h"
#include "kvstash/state.h"
#include "kvstash/state_file.h"
#include "kvstash/tokenizer.h"
#include "model/config.h"
#include "state_bench_io.h"
#include "state_bench_throughput.h"

namespace {

using namespace state_bench;
using bench::argmax;
using bench::fnv1a;
using bench::hex;

struct Outcome {
    double seconds = 0;
    int32_t token = -1;
    uint64_t hash = 0;
};

kvstash::SamplerParams sampler_params() {
    kvstash::SamplerParams p;  // defaults: temperature 0.8, top-k 40, top-p 0.95, min-p 0.05
    p.seed = 42;
    return p;
}

std::string join(const std::vector<int32_t>& ids) {
    std::string s;
    for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
    return s;
}

std::vector<int32_t> split_ids(const std::string& s) {
    std::vector<int32_t> ids;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) ids.push_back(static_cast<int32_t>(std::stol(item)));
    return ids;
}

// Pages the weights in, starts the pool's threads and computes (caches) the model fingerprint.
void warm_up(const kvstash::Model& model, kvstash::Evaluator& evaluator, const std::vector<int32_t>& ids) {
    kvstash::State s(model, kvstash::StateOptions{kvstash::KvType::f16, 256});
    evaluator.eval(s, std::span<const int32_t>(ids.data(), std::min<size_t>(ids.size(), 64)));
    kvstash::Sampler sampler(sampler_params());
    (void)sampler.sample(s.last_logits(), s.tokens());
    (void)kvstash::model_fingerprint(model);
}

// --child-restore: one timed restore in a fresh process.
int child_restore(const std::string& model_path, int threads, const std::string& file, const std::string& suffix_csv,
                  const std::string& cold) {
    auto model = kvstash::Model::load(model_path);
    kvstash::Evaluator evaluator(model, threads);
    const std::vector<int32_t> suffix = split_ids(suffix_csv);
    warm_up(*model, evaluator, suffix);
    json out;
    out["resident_before"] = cold.empty() ? resident_fraction(file) : evict(file, cold);
    const auto start = Clock::now();
    kvstash::State state = kvstash::load_state(*model, file);
    const double load_s = seconds_since(start);
    evaluator.eval(state, suffix);
    kvstash::Sampler sampler(sampler_params());
    const int32_t token = sampler.sample(state.last_logits(), state.tokens());
    const double total_s = seconds_since(start);
    out["load_s"] = load_s;
    out["ttft_s"] = total_s;
    out["token"] = token;
    out["logits_fnv1a"] = hex(fnv1a(state.last_logits()));
    std::printf("%s\n", out.dump().c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{
        "kvstash_state_bench: time to first token with full recompute / restore from file / fork, state file "
        "save and load throughput (JSON on stdout)"};
    std::string model_path = "models/SmolLM2-135M-Instruct.Q4_1.gguf",
                text_path = "tests/fixtures/text/persuasion_ch1-2.txt";
    std::string dir = "build-sb/state-bench", sizes_csv = "512,2048,8184", cold = "fadvise", dump_tokens;
    std::string child_file, child_suffix, child_cold;
    int threads = 2, repeats = 5, n_suffix = 8, variants_size = 2048, full_repeats_long = -1;
    int64_t n_ctx = 8192;
    bool child = false, no_fresh = false, throughput = false;
    app.add_option("-m,--model", model_path, "GGUF model file");
    app.add_option("-t,--threads", threads, "evaluator threads")->check(CLI::Range(1, 1024));
    app.add_option("-f,--file", text_path, "text to tokenize (repeated end to end as needed)");
    app.add_option("--sizes", sizes_csv, "prefix lengths in tokens, comma-separated");
    app.add_option("--suffix", n_suffix, "suffix tokens evaluated after the prefix")->check(CLI::Range(1, 4096));
    app.add_option("--ctx", n_ctx, "context of every State (prefix + suffix must fit)");
    app.add_option("-r,--repeats", repeats, "measured repeats of each way")->check(CLI::Range(1, 1000));
    app.add_option("--full-repeats-long", full_repeats_long,
                   "full recomputes of prefixes over 4096 tokens (they take minutes; default: --repeats)");
    app.add_option("--dir", dir, "directory for the state files (created)");
    app.add_option("--variants-size", variants_size, "prefix length for the compress / q8_0 variants (0: none)");
    app.add_option("--cold", cold, "how to evict a file from the page cache: fadvise, drop_caches (root), none");
    app.add_flag("--no-fresh", no_fresh, "skip the fresh-process restores");
    app.add_flag(
        "--throughput-only", throughput,
        "only save / load throughput beside cat and read(2), reusing the state files in --dir when they match");
    app.add_option("--dump-tokens", dump_tokens,
                   "write the token ids (space-separated, one line) to this file and exit");
    app.add_flag("--child-restore", child, "internal: one restore in this (fresh) process");
    app.add_option("--child-file", child_file, "internal");
    app.add_option("--child-suffix", child_suffix, "internal");
    app.add_option("--child-cold", child_cold, "internal");
    CLI11_PARSE(app, argc, argv);

    try {
        if (child) return child_restore(model_path, threads, child_file, child_suffix, child_cold);

        std::vector<int64_t> sizes;
        for (const std::string& s : CLI::detail::split(sizes_csv, ',')) sizes.push_back(std::stoll(s));
        const int64_t max_tokens = *std::max_element(sizes.begin(), sizes.end()) + n_suffix;
        if (max_tokens > n_ctx)
            throw kvstash::Error(kvstash::ErrorCode::invalid_argument, "prefix + suffix exceeds --ctx");

        auto model = kvstash::Model::load(model_path);
        const std::string text = read_file(text_path);
        std::vector<int32_t> ids =
            model->tokenizer().encode(text, kvstash::AddSpecial::yes, kvstash::ParseSpecial::yes);
        const size_t n_text_tokens = ids.size();
        int copies = 1;
        {
            std::string all = text;
            while (static_cast<int64_t>(ids.size()) < max_tokens) {
                all += text;
                ++copies;
                ids = model->tokenizer().encode(all, kvstash::AddSpecial::yes, kvstash::ParseSpecial::yes);
            }
        }
        ids.resize(static_cast<size_t>(max_tokens));
        if (!dump_tokens.empty()) {
            std::ofstream out(dump_tokens);
            for (size_t i = 0; i < ids.size(); ++i) out << (i ? " " : "") << ids[i];
            out << "\n";
            return out ? 0 : 1;
        }
        ::mkdir(dir.c_str(), 0755);

        kvstash::Evaluator evaluator(model, threads);
        warm_up(*model, evaluator, ids);
        if (throughput) {
            json out{{"model", model_path}, {"mode", "throughput"}};
            out["sizes"] =
                throughput_only(model_path, threads, *model, evaluator, ids, sizes, n_ctx, repeats, dir, no_fresh);
            std::printf("%s\n", out.dump(2).c_str());
            return 0;
        }
        const kvstash::ModelInfo& cfg = model->info();
        const int64_t kv_f16_per_token = cfg.n_layer * 2 * cfg.n_embd_kv() * 2;
        const int64_t kv_q8_per_token = cfg.n_layer * 2 * ((cfg.n_embd_kv() + 31) / 32) * 34;

        json out;
        out["model"] = model_path;
        out["threads"] = threads;
        out["text"] = text_path;
        out["text_tokens"] = n_text_tokens;
        out["text_copies"] = copies;
        out["suffix_tokens"] = n_suffix;
        out["ctx"] = n_ctx;
        out["cold_method"] = cold;
        out["n_layer"] = cfg.n_layer;
        out["n_embd_kv"] = cfg.n_embd_kv();
        out["kv_bytes_per_token"] = {{"f16", kv_f16_per_token}, {"q8_0", kv_q8_per_token}};
        out["sampler"] = "kvstash::Sampler defaults (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05), seed 42";
        const std::string self_model = model_path;

        for (const int64_t n : sizes) {
            std::fprintf(stderr, "prefix %lld tokens...\n", static_cast<long long>(n));
            const std::vector<int32_t> prefix_suffix(ids.begin(), ids.begin() + n + n_suffix);
            const std::span<const int32_t> prefix(prefix_suffix.data(), static_cast<size_t>(n));
            const std::span<const int32_t> suffix(prefix_suffix.data() + n, static_cast<size_t>(n_suffix));
            const kvstash::StateOptions opts{kvstash::KvType::f16, n_ctx};
            json r;
            r["prefix_tokens"] = n;

            // The prefilled state every other way starts from.
            kvstash::State prefilled(*model, opts);
            const auto t_prefill = Clock::now();
            evaluator.eval(prefilled, prefix);
            r["prefill_s"] = seconds_since(t_prefill);
            r["prefix_argmax"] = argmax(prefilled.last_logits());

            const std::string path = dir + "/prefix_" + std::to_string(n) + ".kvs";
            std::vector<double> save_s, load_s, cat_s, read_s;
            for (int i = 0; i < repeats; ++i) {
                const auto t = Clock::now();
                kvstash::save_state(prefilled, path);
                save_s.push_back(seconds_since(t));
            }
            const uint64_t bytes = file_size(path);
            const std::string suffix_csv = join(std::vector<int32_t>(suffix.begin(), suffix.end()));

            std::vector<double> full_s, restore_s, restore_load_s, fresh_s, fresh_load_s, cold_s, cold_load_s, fork_s,
                cold_resident;
            std::vector<std::string> tokens_seen, hashes_seen;
            auto record = [&](const std::string& way, int32_t token, const std::string& hash) {
                tokens_seen.push_back(way + ":" + std::to_string(token));
                hashes_seen.push_back(hash);
            };
            const int full_repeats = (n > 4096 && full_repeats_long >= 0) ? std::max(1, full_repeats_long) : repeats;
            for (int i = 0; i < repeats; ++i) {
                if (i < full_repeats) {  // full recompute
                    const auto t = Clock::now();
                    kvstash::State s(*model, opts);
                    evaluator.eval(s, prefix_suffix);
                    kvstash::Sampler sampler(sampler_params());
                    const int32_t tok = sampler.sample(s.last_logits(), s.tokens());
                    full_s.push_back(seconds_since(t));
                    if (i == 0) record("full", tok, hex(fnv1a(s.last_logits())));
                }
                {  // restore, this process, warm page cache
                    const auto t = Clock::now();
                    kvstash::State s = kvstash::load_state(*model, path);
                    restore_load_s.push_back(seconds_since(t));
                    evaluator.eval(s, suffix);
                    kvstash::Sampler sampler(sampler_params());
                    const int32_t tok = sampler.sample(s.last_logits(), s.tokens());
                    restore_s.push_back(seconds_since(t));
                    if (i == 0) record("restore", tok, hex(fnv1a(s.last_logits())));
                }
                if (!no_fresh) {
                    std::vector<std::string> args{
                        "kvstash_state_bench",   "--child-restore", "-m", self_model,       "-t",
                        std::to_string(threads), "--child-file",    path, "--child-suffix", suffix_csv};
                    const json warm = run_child(args);  // the file is in the page cache: it was just written / read
                    fresh_s.push_back(warm["ttft_s"]);
                    fresh_load_s.push_back(warm["load_s"]);
                    if (i == 0) record("restore_fresh", warm["token"], warm["logits_fnv1a"]);
                    if (cold != "none") {
                        args.push_back("--child-cold");
                        args.push_back(cold);
                        const json c = run_child(args);
                        cold_s.push_back(c["ttft_s"]);
                        cold_load_s.push_back(c["load_s"]);
                        cold_resident.push_back(c["resident_before"]);
                        if (i == 0) record("restore_cold", c["token"], c["logits_fnv1a"]);
                        (void)time_read(path);  // warm again for what follows
                    }
                }
                {  // fork in memory
                    const auto t = Clock::now();
                    kvstash::State s = prefilled.fork();
                    evaluator.eval(s, suffix);
                    kvstash::Sampler sampler(sampler_params());
                    const int32_t tok = sampler.sample(s.last_logits(), s.tokens());
                    fork_s.push_back(seconds_since(t));
                    if (i == 0) record("fork", tok, hex(fnv1a(s.last_logits())));
                }
            }
            for (int i = 0; i < repeats; ++i) {
                const auto t = Clock::now();
                kvstash::State s = kvstash::load_state(*model, path);
                load_s.push_back(seconds_since(t));
                cat_s.push_back(time_cat(path));
                read_s.push_back(time_read(path));
            }
            bool same = true;
            for (const std::string& h : hashes_seen) same = same && h == hashes_seen.front();
            r["file_bytes"] = bytes;
            r["bytes_per_token"] = static_cast<double>(bytes) / static_cast<double>(n);
            r["ttft_s"] = {{"full", summary(full_s)},
                           {"restore_in_process", summary(restore_s)},
                           {"restore_fresh_process", summary(fresh_s)},
                           {"restore_cold", summary(cold_s)},
                           {"fork", summary(fork_s)}};
            r["restore_load_only_s"] = {{"in_process", summary(restore_load_s)},
                                        {"fresh_process", summary(fresh_load_s)},
                                        {"cold", summary(cold_load_s)}};
            r["cold_resident_fraction_before_load"] = cold_resident;
            r["save_s"] = summary(save_s);
            r["load_s"] = summary(load_s);
            r["cat_s"] = summary(cat_s);
            r["read_s"] = summary(read_s);
            r["first_tokens"] = tokens_seen;
            r["logits_fnv1a"] = hashes_seen.front();
            r["bitwise_identical"] = same;
            out["sizes"].push_back(r);

            if (n == variants_size) {
                struct Variant {
                    const char* name;
                    kvstash::SaveOptions opts;
                };
                const Variant variants[] = {
                    {"f16", {}},
                    {"f16+compress", {.compress = true}},
                    {"q8_0", {.file_kv_type = kvstash::KvType::q8_0}},
                    {"q8_0+compress", {.file_kv_type = kvstash::KvType::q8_0, .compress = true}},
                };
                for (const Variant& v : variants) {
                    const std::string vpath = dir + "/prefix_" + std::to_string(n) + "_" + v.name + ".kvs";
                    std::vector<double> vs, vl, vt;
                    int32_t tok = -1;
                    uint64_t h = 0;
                    for (int i = 0; i < repeats; ++i) {
                        auto t = Clock::now();
                        kvstash::save_state(prefilled, vpath, v.opts);
                        vs.push_back(seconds_since(t));
                        t = Clock::now();
                        kvstash::State s = kvstash::load_state(*model, vpath);
                        vl.push_back(seconds_since(t));
                        evaluator.eval(s, suffix);
                        kvstash::Sampler sampler(sampler_params());
                        tok = sampler.sample(s.last_logits(), s.tokens());
                        vt.push_back(seconds_since(t));
                        h = fnv1a(s.last_logits());
                    }
                    const uint64_t vb = file_size(vpath);
                    json vr;
                    vr["file_bytes"] = vb;
                    vr["bytes_per_token"] = static_cast<double>(vb) / static_cast<double>(n);
                    vr["save_s"] = summary(vs);
                    vr["load_s"] = summary(vl);
                    vr["restore_ttft_in_process_s"] = summary(vt);
                    vr["first_token"] = tok;
                    vr["logits_fnv1a"] = hex(h);
                    vr["bitwise_identical_to_full"] = hex(h) == hashes_seen.front();
                    out["variants"][v.name] = vr;
                    out["variants_prefix_tokens"] = n;
                    std::remove(vpath.c_str());
                }
            }
        }
        std::printf("%s\n", out.dump(2).c_str());
        return 0;
    } catch (const kvstash::Error& e) {
        std::fprintf(stderr, "kvstash_state_bench: %s\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "kvstash_state_bench: %s\n", e.what());
        return 1;
    }
}
