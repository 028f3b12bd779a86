// kvstash perplexity: the model's perplexity on a text file.
//
// Method (the same as tests/reference/make_smollm2_fixtures.py, so the two agree): tokenize the whole
// text (BOS only if the model's vocabulary asks for it); split into consecutive chunks of --ctx tokens,
// dropping a final partial chunk; evaluate each chunk from an empty state; in each chunk score the
// predictions of the tokens at positions ctx/2 .. ctx-1 (token j from the logits at j-1);
// ppl = exp(mean negative log-likelihood, natural log).
// A model whose vocabulary adds BOS (Gemma, Llama) sees BOS first in every chunk, as llama.cpp's
// perplexity does: each chunk's first token is replaced by BOS (chunk 0 already starts with it). Without
// it, later chunks start mid-text at position 0, which such models never saw in training, and score far
// worse (Gemma 3 270M: +46%). llama.cpp scores one position fewer per chunk (ctx/2+1 .. ctx-1).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>

#include "kvstash/adapter_flags.h"
#include "kvstash/commands.h"
#include "kvstash/common.h"
#include "kvstash/error.h"
#include "kvstash/evaluator.h"
#include "kvstash/log_softmax.h"
#include "kvstash/model.h"
#include "kvstash/shared_flags.h"
#include "kvstash/state.h"
#include "kvstash/tokenizer.h"

namespace kvstash::cli {
namespace {

struct PerplexityOptions {
    std::string model_path;
    std::string file;
    int64_t ctx = 512;
    int threads = 0;
    std::string kv_type = "f16";
    bool kl_vs_f16 = false;
    AdapterFlags adapters;
};

// KL(p || q) in nats of two logit rows: p the reference distribution (softmax of `ref`), q the other's.
double kl_divergence(std::span<const float> ref, std::span<const float> other) {
    const auto log_sum_exp = [](std::span<const float> row) {
        const double m = *std::max_element(row.begin(), row.end());
        double s = 0.0;
        for (float x : row) s += std::exp(static_cast<double>(x) - m);
        return m + std::log(s);
    };
    const double lp = log_sum_exp(ref), lq = log_sum_exp(other);
    double kl = 0.0;
    for (size_t i = 0; i < ref.size(); ++i) {
        const double log_p = ref[i] - lp;
        kl += std::exp(log_p) * (log_p - (other[i] - lq));
    }
    return kl;
}

int run_perplexity(const PerplexityOptions& o) {
    auto model = load_model(o.model_path, o.threads);
    const std::string text = read_text_file(o.file);
    const std::vector<int32_t> tokens = model->tokenizer().encode(text, AddSpecial::yes, ParseSpecial::no);
    const int32_t bos = model->tokenizer().bos();
    const bool bos_per_chunk = bos >= 0 && !tokens.empty() && tokens.front() == bos;  // the vocabulary adds BOS
    const auto n_chunks = static_cast<int64_t>(tokens.size()) / o.ctx;
    if (n_chunks == 0) {
        throw Error(ErrorCode::invalid_argument, "'" + o.file + "' has " + std::to_string(tokens.size()) +
                                                     " tokens, fewer than one chunk of --ctx " + std::to_string(o.ctx) +
                                                     "; use a longer text or a smaller --ctx");
    }
    Evaluator evaluator(model, o.threads);
    const std::shared_ptr<const AdapterSet> adapters = load_adapter_flags(*model, o.adapters);
    const int64_t n_vocab = model->n_vocab();
    const int64_t first = o.ctx / 2;
    std::cerr << "perplexity: " << tokens.size() << " tokens, " << n_chunks << " chunks of " << o.ctx
              << ", scoring positions " << first << ".." << o.ctx - 1 << " of each"
              << (bos_per_chunk ? ", each starting with BOS" : "") << ", " << evaluator.n_threads() << " threads\n";
    double nll_sum = 0.0;
    int64_t n_scored = 0;
    const KvType kv_type = parse_cache_kv_type(o.kv_type);
    double kl_sum = 0.0, nll_f16_sum = 0.0;
    std::vector<float> logits, logits_f16;
    std::vector<int32_t> chunk_tokens(static_cast<size_t>(o.ctx));
    const auto start = std::chrono::steady_clock::now();
    for (int64_t c = 0; c < n_chunks; ++c) {
        State state(*model, StateOptions{.kv_type = kv_type, .n_ctx = o.ctx, .adapters = adapters});
        std::copy_n(tokens.begin() + c * o.ctx, o.ctx, chunk_tokens.begin());
        if (bos_per_chunk) chunk_tokens[0] = bos;
        const std::span<const int32_t> chunk(chunk_tokens);
        // Logits only where they are scored (positions first-1 .. ctx-2, and ctx-1): the same bits as one
        // eval of the whole chunk (batch invariance), at half the output projection's cost.
        const auto unscored = static_cast<size_t>(first - 1);
        evaluator.eval(state, chunk.first(unscored));
        evaluator.eval(state, chunk.subspan(unscored), &logits);
        if (o.kl_vs_f16) {
            State f16(*model, StateOptions{.kv_type = KvType::f16, .n_ctx = o.ctx, .adapters = adapters});
            evaluator.eval(f16, chunk.first(unscored));
            evaluator.eval(f16, chunk.subspan(unscored), &logits_f16);
        }
        for (int64_t j = first; j < o.ctx; ++j) {
            const std::span<const float> row(logits.data() + (j - first) * n_vocab, static_cast<size_t>(n_vocab));
            nll_sum -= log_softmax_at(row, static_cast<size_t>(chunk[static_cast<size_t>(j)]));
            if (o.kl_vs_f16) {
                const std::span<const float> f16_row(logits_f16.data() + (j - first) * n_vocab,
                                                     static_cast<size_t>(n_vocab));
                kl_sum += kl_divergence(f16_row, row);
                nll_f16_sum -= log_softmax_at(f16_row, static_cast<size_t>(chunk[static_cast<size_t>(j)]));
            }
            ++n_scored;
        }
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        // Progress is a diagnostic: stderr, so that stdout holds only the result line.
        std::fprintf(stderr, "[%lld/%lld] ppl so far %.4f (%.1f tok/s)\n", static_cast<long long>(c + 1),
                     static_cast<long long>(n_chunks), std::exp(nll_sum / static_cast<double>(n_scored)),
                     static_cast<double>((c + 1) * o.ctx) / seconds);
    }
    // The KL line comes first: the last line stays 'ppl = X'.
    if (o.kl_vs_f16) {
        std::printf("ppl with the f16 cache = %.4f\n", std::exp(nll_f16_sum / static_cast<double>(n_scored)));
        std::printf("mean KL vs f16 = %.6g nats\n", kl_sum / static_cast<double>(n_scored));
    }
    std::printf("ppl = %.4f\n", std::exp(nll_sum / static_cast<double>(n_scored)));
    return 0;
}

}  // namespace

void register_perplexity(CLI::App& root, Action& action) {
    auto o = std::make_shared<PerplexityOptions>();
    auto* cmd = root.add_subcommand("perplexity", "Perplexity of the model on a text file (last line: 'ppl = X')");
    add_model_option(*cmd, o->model_path);
    cmd->add_option("-f,--file", o->file, "text file to score")->required();
    cmd->footer(
        "Method: the text is tokenized once and cut into chunks of --ctx tokens (a final partial chunk is "
        "dropped); each chunk is evaluated from an empty state and scored on positions ctx/2..ctx-1. For a "
        "model whose vocabulary adds BOS (Gemma, Llama) each chunk starts with BOS, its first token replaced, "
        "as llama.cpp's perplexity does (llama.cpp scores positions ctx/2+1..ctx-1).");
    cmd->add_option("-c,--ctx", o->ctx, "tokens per chunk (each chunk scored on its second half)")
        ->check(CLI::Range(int64_t{2}, int64_t{1} << 20))
        ->capture_default_str();
    add_threads_option(*cmd, o->threads);
    add_kv_type_option(*cmd, "--kv-type", o->kv_type, {KvType::f16, KvType::f32, KvType::q8_0}, "KV cache type")
        ->capture_default_str();
    cmd->add_flag("--kl-vs-f16", o->kl_vs_f16,
                  "also evaluate each chunk with an f16 cache and print its perplexity and the mean KL divergence "
                  "(nats) of the scored next-token distributions from the f16 ones");
    add_adapter_flags(*cmd, o->adapters);
    cmd->callback([&action, o] { action = [o] { return run_perplexity(*o); }; });
}

}  // namespace kvstash::cli
