// Evaluator::eval_hidden (the final-norm hidden states behind /v1/embeddings): shape, bitwise the same
// however the tokens are chunked, logits unchanged by asking for it, and the rows really are what the
// output matrix multiplies (logits recomputed from them in double precision agree).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "format/tensor_type.h"
#include "kvstash/evaluator.h"
#include "kvstash/model.h"
#include "kvstash/state.h"
#include "model/model_access.h"
#include "support/eval_helpers.h"
#include "support/paths.h"

namespace kvstash::test {
namespace {

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(EvalHidden, ChunkingInvariantAndFeedsTheLogits) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const std::shared_ptr<const Model> model = Model::load(default_model_path());
    const ModelImpl& impl = ModelAccess::impl(*model);
    const int64_t n_embd = impl.config.n_embd;
    const int64_t n_vocab = impl.config.n_vocab;
    const std::vector<int32_t> tokens = pseudo_random_tokens(150, n_vocab, 7);  // crosses a 128-row micro-batch
    Evaluator eval(model, 2);

    State whole(*model, StateOptions{.n_ctx = 256});
    std::vector<float> hidden;
    eval.eval_hidden(whole, tokens, hidden);
    ASSERT_EQ(hidden.size(), tokens.size() * static_cast<size_t>(n_embd));

    // The same tokens in two calls: each call's rows are the matching rows of the whole, bitwise.
    State split(*model, StateOptions{.n_ctx = 256});
    std::vector<float> first;
    std::vector<float> second;
    const std::span<const int32_t> all(tokens);
    eval.eval_hidden(split, all.first(37), first);
    eval.eval_hidden(split, all.subspan(37), second);
    first.insert(first.end(), second.begin(), second.end());
    EXPECT_TRUE(bitwise_equal(first, hidden));

    // Asking for hidden states changes no logits.
    State plain(*model, StateOptions{.n_ctx = 256});
    eval.eval(plain, tokens);
    const std::vector<float> plain_logits(plain.last_logits().begin(), plain.last_logits().end());
    const std::vector<float> hidden_logits(whole.last_logits().begin(), whole.last_logits().end());
    EXPECT_TRUE(bitwise_equal(plain_logits, hidden_logits));

    // The last row times the output matrix gives the logits (within the activation quantisation the
    // matmul uses): compare the largest few.
    const float* h = hidden.data() + (tokens.size() - 1) * static_cast<size_t>(n_embd);
    std::vector<float> w(static_cast<size_t>(n_embd));
    double max_abs = 0;
    for (float v : hidden_logits) max_abs = std::max(max_abs, std::fabs(static_cast<double>(v)));
    for (int64_t id = 0; id < n_vocab; id += 997) {
        dequantize_row(impl.weights.output.type, impl.weights.output.row(id), w.data(), n_embd);
        double dot = 0;
        for (int64_t i = 0; i < n_embd; ++i) dot += static_cast<double>(w[static_cast<size_t>(i)]) * h[i];
        EXPECT_NEAR(dot, hidden_logits[static_cast<size_t>(id)], 0.02 * max_abs) << "token " << id;
    }
}

}  // namespace
}  // namespace kvstash::test
