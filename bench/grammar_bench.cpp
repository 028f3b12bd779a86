// kvstash_grammar_bench: what constrained output costs per generated token (issue 18 item 1). Markdown
// on stdout; see docs/benchmarks.md, "Constrained output".
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
// Also the one-time vocabulary trie build.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench_common.h"
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
};

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
            // The masking alone, replayed: plain (no reuse), cold (fresh, shared cache emptied), warm.
            std::vector<float> logits(static_cast<size_t>(model->n_vocab()));
            for (int way = 0; way < 3; ++way) {
                if (way == 1) clear_grammar_mask_cache();
                GrammarConstraint replay(c.grammar, vocabulary);
                grammar::GrammarMatcher plain(c.grammar->parsed(), vocabulary->trie());
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
    const GrammarMaskCacheStats stats = grammar_mask_cache_stats();
    std::printf("\nshared mask cache at the end: %zu masks, %.1f MiB (capacity %.0f MiB)\n", stats.entries,
                static_cast<double>(stats.bytes) / (1 << 20), static_cast<double>(stats.capacity) / (1 << 20));
    return 0;
}
