// kvstash_grammar_bench: what constrained output costs per generated token (issue 18 item 1). Markdown
// on stdout; see docs/benchmarks.md, "Constrained output".
//
//   kvstash_grammar_bench -m models/SmolLM2-135M-Instruct.Q4_1.gguf -t 2 --rounds 5 --tokens 96
//
// Per round, alternately: an unconstrained generation and one under each grammar (json_object, a JSON
// Schema, a GBNF list grammar), from the same chat prompt, seeded sampling, --tokens at most. Reported
// per grammar (medians over rounds): decode ms per token (wall, the whole generate() loop: forward pass
// + mask + sampling), and the masking alone: the generated tokens replayed through a fresh
// GrammarConstraint (cold caches, as in a new request), mask() + accept() per token, in ms per token
// (wall, and the thread's CPU time, which a shared machine inflates less) and as a share of the
// unconstrained decode time per token. Also the one-time vocabulary trie build.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench_common.h"
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
    std::vector<double> decode_ms, mask_ms, mask_cpu_ms;
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
            // The masking alone, replayed on a fresh constraint (cold caches).
            GrammarConstraint replay(c.grammar, vocabulary);
            std::vector<float> logits(static_cast<size_t>(model->n_vocab()));
            const auto start = bench::Clock::now();
            const double cpu_start = bench::thread_cpu_seconds();
            for (const int32_t t : r.tokens) {
                std::fill(logits.begin(), logits.end(), 0.0f);
                replay.mask(logits);
                replay.accept(t);
            }
            c.mask_ms.push_back(1e3 * bench::seconds_since(start) / n);
            c.mask_cpu_ms.push_back(1e3 * (bench::thread_cpu_seconds() - cpu_start) / n);
        }
    }
    const double base = median(cases[0].decode_ms);
    std::printf("vocabulary trie build: %.1f ms (%lld tokens, once per model)\n\n", trie_ms,
                static_cast<long long>(model->n_vocab()));
    std::printf(
        "| case | tokens (median) | decode ms/token | mask+accept ms/token (wall) | (thread CPU) | mask / "
        "unconstrained decode |\n");
    std::printf("| --- | ---: | ---: | ---: | ---: | ---: |\n");
    for (const Case& c : cases) {
        if (!c.grammar) {
            std::printf("| %s | %.0f | %.2f | - | - | - |\n", c.name.c_str(), median(c.tokens), median(c.decode_ms));
        } else {
            const double m = median(c.mask_ms);
            std::printf("| %s | %.0f | %.2f | %.3f | %.3f | %.1f%% |\n", c.name.c_str(), median(c.tokens),
                        median(c.decode_ms), m, median(c.mask_cpu_ms), 100.0 * m / base);
        }
    }
    return 0;
}
