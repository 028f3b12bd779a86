#include "kvstash/sampling_options.h"

#include <cmath>
#include <limits>
#include <random>

#include "kvstash/common.h"
#include "kvstash/error.h"

namespace kvstash::cli {

void add_sampling_flags(CLI::App& app, SamplingFlags& f) {
    app.add_option("-n,--n-predict", f.max_tokens, "maximum tokens to generate")
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 24))
        ->capture_default_str();
    app.add_option("--temp", f.params.temperature, "temperature; 0 = greedy")
        ->check(CLI::Range(0.0f, 100.0f))
        ->capture_default_str();
    app.add_option("--top-k", f.params.top_k, "keep the k most likely tokens; 0 = off")
        ->check(CLI::Range(0, 1 << 24))
        ->capture_default_str();
    app.add_option("--top-p", f.params.top_p, "nucleus sampling threshold; 1 = off")
        ->check(CLI::Range(0.0f, 1.0f))
        ->capture_default_str();
    app.add_option("--min-p", f.params.min_p, "drop tokens below min-p x the top probability; 0 = off")
        ->check(CLI::Range(0.0f, 1.0f))
        ->capture_default_str();
    app.add_option("--repeat-penalty", f.params.repeat_penalty,
                   "penalty for tokens in the last --repeat-last-n; 1 = off")
        ->check(CLI::Range(0.0f, 100.0f))
        ->capture_default_str();
    app.add_option("--repeat-last-n", f.params.repeat_last_n, "tokens the penalties look back over; -1 = all")
        ->check(CLI::Range(-1, 1 << 24))
        ->capture_default_str();
    app.add_option("--presence-penalty", f.params.presence_penalty, "subtracted from tokens already present")
        ->capture_default_str();
    app.add_option("--frequency-penalty", f.params.frequency_penalty, "subtracted per occurrence")
        ->capture_default_str();
    app.add_option("--logit-bias", f.logit_bias, "ID=BIAS added to a token's logit (BIAS may be -inf); repeatable");
    f.seed_option = app.add_option("-s,--seed", f.params.seed,
                                   "random seed (same seed and state => same tokens); default: a random one per run, "
                                   "printed by --timings");
    app.add_option("--stop", f.stop, "stop before this text; repeatable");
    auto* grammar = app.add_option("--grammar", f.grammar_path,
                                   "constrain the output to this GBNF grammar file (llama.cpp syntax; "
                                   "docs/constrained-output.md)");
    app.add_option("--json-schema", f.json_schema_path,
                   "constrain the output to JSON valid under this JSON Schema file (docs/constrained-output.md)")
        ->excludes(grammar);
}

SamplerParams sampler_params(const SamplingFlags& f) {
    SamplerParams p = f.params;
    if (f.seed_option == nullptr || f.seed_option->count() == 0) {
        std::random_device device;
        p.seed = (static_cast<uint64_t>(device()) << 32) ^ device();
    }
    for (const std::string& entry : f.logit_bias) {
        const auto eq = entry.find('=');
        try {
            if (eq == std::string::npos) throw std::invalid_argument("no '='");
            const int32_t id = std::stoi(entry.substr(0, eq));
            const std::string value = entry.substr(eq + 1);
            float bias = 0.0f;
            if (value == "-inf") {
                bias = -std::numeric_limits<float>::infinity();
            } else if (value == "inf" || value == "+inf") {
                bias = std::numeric_limits<float>::infinity();
            } else {
                size_t used = 0;
                bias = std::stof(value, &used);
                if (used != value.size()) throw std::invalid_argument("trailing characters");
            }
            p.logit_bias.emplace_back(id, bias);
        } catch (const std::logic_error&) {
            throw Error(ErrorCode::invalid_argument,
                        "--logit-bias '" + entry + "' is not ID=BIAS (for example 2=-inf or 1234=2.5)");
        }
    }
    return p;
}

std::string seed_line(const SamplingFlags& f, const SamplerParams& p) {
    const std::string seed = std::to_string(p.seed);
    if (f.seed_option != nullptr && f.seed_option->count() > 0) return "seed: " + seed;
    return "seed: " + seed + " (random; pass --seed " + seed + " to repeat this run)";
}

GenerateOptions generate_options(const SamplingFlags& f) {
    GenerateOptions o;
    o.max_tokens = f.max_tokens;
    for (const std::string& s : f.stop) {
        if (s.empty()) throw Error(ErrorCode::invalid_argument, "--stop needs a non-empty text");
        o.stop_strings.push_back(s);
    }
    return o;
}

std::shared_ptr<const Grammar> grammar_from_flags(const SamplingFlags& f) {
    const bool schema = !f.json_schema_path.empty();
    if (f.grammar_path.empty() && !schema) return nullptr;
    const std::string& path = schema ? f.json_schema_path : f.grammar_path;
    const std::string text = read_text_file(path);
    try {
        return schema ? Grammar::from_json_schema(text) : Grammar::from_gbnf(text);
    } catch (const Error& e) {
        const ErrorCode code = e.code() == ErrorCode::invalid_argument ? ErrorCode::bad_format : e.code();
        throw Error(code, "'" + path + "': " + e.what());
    }
}

std::shared_ptr<GrammarConstraint> make_constraint(const std::shared_ptr<const Grammar>& grammar,
                                                   const std::shared_ptr<const GrammarVocabulary>& vocabulary) {
    return grammar ? std::make_shared<GrammarConstraint>(grammar, vocabulary) : nullptr;
}

}  // namespace kvstash::cli
