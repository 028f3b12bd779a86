// kvstash_grammar_bench: what constrained output costs per generated token (issue 18 item 1). Markdown
// on stdout; see docs/benchmarks-history.md, "Constrained output".
//
//   kvstash_grammar_bench -m models/SmolLM2-135M-Instruct.Q4_1.gguf -t 2 --rounds 5 --tokens 96
//
// Per round, alternately: an unconstrained generation and one under each grammar (json_object, a JSON
// Schema, a bounded GBNF list grammar, a bounded CSV grammar), from the same chat prompt, seeded
// sampling, --tokens at most. Reported per grammar (medians over rounds): decode ms per token (wall, the
// whole generate() loop: forward pass + mask + sampling), and the masking alone: the generated tokens
// replayed, mask + accept per token, in ms per token (wall, and the thread's CPU time, which a shared
// machine inflates less) and as a share of the unconstrained decode time per token, three ways:
//   plain: a matcher without mask reuse (every new state walks the whole trie: the code before reuse),
//   cold:  a fresh GrammarConstraint with the process-wide mask cache emptied (a server's first request),
//   warm:  another fresh GrammarConstraint right after (a repeated request: the shared cache is filled).
// Also the one-time vocabulary trie build. Then the lazy path (sample_constrained, what generate() and
// the server run): per grammar a generation with the default sampling (top-k 40, top-p 0.95, min-p 0.05,
// temperature 0.8) and a greedy one, their logits recorded; replayed through sample_constrained + accept
// (cold: fresh constraint, shared cache emptied; warm: right after) and through the plain sampler alone,
// alternately; reported: the difference (what constraining adds to sampling), thread CPU ms per token and
// as a share of the unconstrained decode, and how many steps fell back to the full mask. The replay
// checks that every token equals the generation's (the lazy path is exact).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench_common.h"
#include "engine/constrained_sample.h"
#include "grammar/grammar_access.h"
#include "grammar/grammar_matcher.h"
#include "kvstash/chat.h"
#include "kvstash/evaluator.h"
#include "kvstash/generate.h"
#include "kvstash/grammar.h"
#include "kvstash/model.h"
#include "kvstash/sampler.h"
#include "kvstash/state.h"
#include "kvstash/tokenizer.h"

namespace {

using namespace kvstash;

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

struct Case {
    Case(std::string n, std::shared_ptr<const Grammar> g) : name(std::move(n)), grammar(std::move(g)) {}
    std::string name;
    std::shared_ptr<const Grammar> grammar;  // null: unconstrained
    std::vector<double> decode_ms;
    std::vector<double> wall[3], cpu[3];  // plain, cold, warm
    std::vector<double> tokens;
    // The lazy path, by sampling (0: default, 1: greedy): thread CPU ms/token of sample_constrained +
    // accept minus the plain sampler's, cold and warm; tokens; steps that needed the full mask.
    std::vector<double> lazy_cpu[2][2], lazy_tokens[2], lazy_fallbacks[2];
};

SamplerParams sampling(int mode, uint64_t seed) {
    SamplerParams params;  // the defaults: temperature 0.8, top-k 40, top-p 0.95, min-p 0.05
    params.seed = seed;
    if (mode == 1) params.temperature = 0.0f;
    return params;
}

// The lazy path replayed over a generation's recorded logits (see the top); false when a token differs.
bool replay_lazy(Case& c, int mode, uint64_t seed, const std::shared_ptr<const GrammarVocabulary>& vocabulary,
                 const std::vector<int32_t>& prompt, const std::vector<std::vector<float>>& logits,
                 const std::vector<int32_t>& tokens) {
    const double n = static_cast<double>(std::max<size_t>(tokens.size(), 1));
    double sampler_only = 0.0;
    std::vector<float> scratch;
    for (int way = 0; way < 3; ++way) {  // 0: cold, 1: warm, 2: the sampler alone
        if (way == 0) clear_grammar_mask_cache();
        GrammarConstraint constraint(c.grammar, vocabulary);
        Sampler sampler(sampling(mode, seed));
        std::vector<int32_t> history = prompt;
        history.reserve(prompt.size() + tokens.size());
        const double cpu_start = bench::thread_cpu_seconds();
        for (size_t i = 0; i < tokens.size(); ++i) {
            if (way == 2) {
                sampler.sample(logits[i], history);
            } else {
                const auto token = sample_constrained(sampler, constraint, logits[i], history, scratch);
                if (token != tokens[i]) {
                    std::fprintf(stderr, "%s: the replay's token %zu differs from the generation's\n", c.name.c_str(),
                                 i);
                    return false;
                }
                constraint.accept(tokens[i]);
            }
            history.push_back(tokens[i]);
        }
        const double cpu = 1e3 * (bench::thread_cpu_seconds() - cpu_start) / n;
        if (way == 2) {
            sampler_only = cpu;
        } else {
            c.lazy_cpu[mode][way].push_back(cpu);
        }
    }
    for (int way = 0; way < 2; ++way) c.lazy_cpu[mode][way].back() -= sampler_only;
    // Untimed: the steps the lazy path could not decide alone.
    GrammarConstraint constraint(c.grammar, vocabulary);
    Sampler sampler(sampling(mode, seed));
    std::vector<int32_t> history = prompt;
    double fallbacks = 0;
    for (size_t i = 0; i < tokens.size(); ++i) {
        Sampler probe = sampler;
        if (constraint.mask_is_cached() ||
            !probe.sample_allowed(
                logits[i], history, [&](int32_t id) { return constraint.allows(id); }, kConstrainedMaxAsked))
            ++fallbacks;
        std::vector<float> scratch_logits;
        sample_constrained(sampler, constraint, logits[i], history, scratch_logits);
        constraint.accept(tokens[i]);
        history.push_back(tokens[i]);
    }
    c.lazy_tokens[mode].push_back(n);
    c.lazy_fallbacks[mode].push_back(fallbacks);
    return true;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"kvstash_grammar_bench: the cost of constrained output per token"};
    std::string model_path = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    int threads = 2, rounds = 5;
    int64_t tokens = 96;
    app.add_option("-m,--model", model_path, "GGUF model");
    app.add_option("-t,--threads", threads, "threads");
    app.add_option("--rounds", rounds, "rounds (each runs every case once, alternately)");
    app.add_option("--tokens", tokens, "at most this many tokens per generation");
    CLI11_PARSE(app, argc, argv);

    auto model = Model::load(model_path);
    Evaluator evaluator(model, threads);
    const auto trie_start = bench::Clock::now();
    const auto vocabulary = GrammarVocabulary::build(model->tokenizer());
    const double trie_ms = 1e3 * bench::seconds_since(trie_start);

    std::vector<Case> cases;
    cases.emplace_back("unconstrained", nullptr);
    cases.emplace_back("json_object", Grammar::json_object());
    cases.emplace_back("json_schema", Grammar::from_json_schema(R"({"type":"object","properties":{
        "name":{"type":"string"},"age":{"type":"integer"},"city":{"enum":["Paris","London","Tokyo"]},
        "pets":{"type":"array","items":{"type":"string"}},"born":{"type":"string","format":"date"}},
        "required":["name","age","city","pets"]})"));
    cases.emplace_back("gbnf_list", Grammar::from_gbnf("root ::= (\"- \" [^\\n]{1,60} \"\\n\"){1,8}"));
    cases.emplace_back("gbnf_csv", Grammar::from_gbnf("root ::= \"name,age,city\\n\" row{1,6}\n"
                                                      "row ::= field \",\" [0-9]{1,3} \",\" field \"\\n\"\n"
                                                      "field ::= [A-Za-z] [A-Za-z .'-]{0,30}"));

    const ChatTemplate tmpl = ChatTemplate::for_model(*model);
    const std::string prompt_text = tmpl.render(
        {{"user", "Describe a person (name, age, city, pets, birth date) as JSON."}}, AddGenerationPrompt::yes);
    const std::vector<int32_t> prompt = model->tokenizer().encode(prompt_text, AddSpecial::no, ParseSpecial::yes);
    State prefilled(*model, StateOptions{});
    evaluator.eval(prefilled, prompt);

    for (int round = 0; round < rounds; ++round) {
        for (Case& c : cases) {
            State state = prefilled.fork();
            SamplerParams params;
            params.seed = static_cast<uint64_t>(round + 1);
            Sampler sampler(params);
            GenerateOptions options;
            options.max_tokens = tokens;
            if (c.grammar) options.constraint = std::make_shared<GrammarConstraint>(c.grammar, vocabulary);
            const GenerateResult r = generate(evaluator, state, sampler, options);
            const double n = static_cast<double>(std::max<size_t>(r.tokens.size(), 1));
            c.decode_ms.push_back(1e3 * r.seconds / n);
            c.tokens.push_back(n);
            if (!c.grammar) continue;
            for (int mode = 0; mode < 2; ++mode) {  // the lazy path: default sampling, greedy
                State lazy_state = prefilled.fork();
                Sampler lazy_sampler(sampling(mode, static_cast<uint64_t>(round + 1)));
                GenerateOptions lazy_options;
                lazy_options.max_tokens = tokens;
                lazy_options.constraint = std::make_shared<GrammarConstraint>(c.grammar, vocabulary);
                std::vector<std::vector<float>> seen;
                lazy_options.on_sample = [&seen](std::span<const float> l, int32_t) {
                    seen.emplace_back(l.begin(), l.end());
                };
                const GenerateResult g = generate(evaluator, lazy_state, lazy_sampler, lazy_options);
                if (!replay_lazy(c, mode, static_cast<uint64_t>(round + 1), vocabulary, prompt, seen, g.tokens))
                    return 1;
            }
            // The masking alone, replayed: plain (no reuse), cold (fresh, shared cache emptied), warm.
            std::vector<float> logits(static_cast<size_t>(model->n_vocab()));
            for (int way = 0; way < 3; ++way) {
                if (way == 1) clear_grammar_mask_cache();
                GrammarConstraint replay(c.grammar, vocabulary);
                grammar::GrammarMatcher plain(GrammarAccess::parsed(*c.grammar), GrammarAccess::trie(*vocabulary));
                plain.set_mask_reuse(false);
                const auto start = bench::Clock::now();
                const double cpu_start = bench::thread_cpu_seconds();
                for (const int32_t t : r.tokens) {
                    std::fill(logits.begin(), logits.end(), 0.0f);
                    if (way == 0) {
                        const std::vector<uint64_t>& allowed = plain.allowed_tokens();
                        for (size_t i = 0; i < logits.size(); ++i) {
                            if (!((allowed[i / 64] >> (i % 64)) & 1)) logits[i] = -INFINITY;
                        }
                        plain.accept_token(t);
                    } else {
                        replay.mask(logits);
                        replay.accept(t);
                    }
                }
                c.wall[way].push_back(1e3 * bench::seconds_since(start) / n);
                c.cpu[way].push_back(1e3 * (bench::thread_cpu_seconds() - cpu_start) / n);
            }
        }
    }
    const double base = median(cases[0].decode_ms);
    std::printf("vocabulary trie build: %.1f ms (%lld tokens, once per model)\n\n", trie_ms,
                static_cast<long long>(model->n_vocab()));
    std::printf("unconstrained decode: %.2f ms/token (median, this run)\n\n", base);
    std::printf(
        "| case | tokens (median) | decode ms/token | mask+accept ms/token, wall: plain / cold / warm | thread CPU: "
        "plain / cold / warm | wall / unconstrained decode: plain / cold / warm |\n");
    std::printf("| --- | ---: | ---: | ---: | ---: | ---: |\n");
    for (const Case& c : cases) {
        if (!c.grammar) continue;
        double w[3], u[3];
        for (int way = 0; way < 3; ++way) {
            w[way] = median(c.wall[way]);
            u[way] = median(c.cpu[way]);
        }
        std::printf("| %s | %.0f | %.2f | %.3f / %.3f / %.3f | %.3f / %.3f / %.3f | %.1f%% / %.1f%% / %.1f%% |\n",
                    c.name.c_str(), median(c.tokens), median(c.decode_ms), w[0], w[1], w[2], u[0], u[1], u[2],
                    100.0 * w[0] / base, 100.0 * w[1] / base, 100.0 * w[2] / base);
    }
    std::printf(
        "\nThe lazy path (sample_constrained + accept, minus the sampler alone), thread CPU ms/token and share of "
        "the unconstrained decode:\n\n");
    std::printf(
        "| case | sampling | tokens (median) | cold ms | warm ms | cold / decode | warm / decode | full-mask steps "
        "|\n");
    std::printf("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (const Case& c : cases) {
        if (!c.grammar) continue;
        for (int mode = 0; mode < 2; ++mode) {
            const double cold = median(c.lazy_cpu[mode][0]), warm = median(c.lazy_cpu[mode][1]);
            std::printf("| %s | %s | %.0f | %.3f | %.3f | %.1f%% | %.1f%% | %.0f |\n", c.name.c_str(),
                        mode == 0 ? "default (top-k 40)" : "greedy", median(c.lazy_tokens[mode]), cold, warm,
                        100.0 * cold / base, 100.0 * warm / base, median(c.lazy_fallbacks[mode]));
        }
    }
    const GrammarMaskCacheStats stats = grammar_mask_cache_stats();
    std::printf("\nshared mask cache at the end: %zu masks, %.1f MiB (capacity %.0f MiB)\n", stats.entries,
                static_cast<double>(stats.bytes) / (1 << 20), static_cast<double>(stats.capacity) / (1 << 20));
    return 0;
}
