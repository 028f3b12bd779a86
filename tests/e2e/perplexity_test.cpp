// `kvstash perplexity` on a public-domain text against the reference perplexity computed by Hugging
// Face transformers with the same method (tests/fixtures/smollm2/perplexity.json, made by
// tests/reference/make_smollm2_fixtures.py). The bar: within 0.5%.
// Gemma 3 (its vocabulary adds BOS) against llama.cpp's perplexity: tests/fixtures/gemma3/perplexity.json, made by
// tests/reference/make_gemma3_fixtures.py --only perplexity with llama-cpp-python 0.3.36 (issue 33 item 4).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "support/eval_helpers.h"
#include "support/paths.h"
#include "support/subprocess.h"

namespace kvstash::test {
namespace {

TEST(Perplexity, AgreesWithTransformersWithinHalfAPercent) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const auto ref = load_json(fixture_path("smollm2/perplexity.json"));
    const std::string text = source_dir() + "/" + ref.at("text_file").get<std::string>();
    const auto ctx = ref.at("ctx").get<int64_t>();
    const auto r = run_cli({"perplexity", "-f", text, "--ctx", std::to_string(ctx), "-t", "2"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto last_line_start = r.out.rfind("ppl = ");
    ASSERT_NE(last_line_start, std::string::npos) << r.out;
    ASSERT_EQ(r.out.find('\n', last_line_start), r.out.size() - 1) << "'ppl = X' must be the last line:\n" << r.out;
    const double ours = std::stod(r.out.substr(last_line_start + 6));
    const double reference = ref.at("ppl").get<double>();
    std::printf("perplexity: kvstash %.4f, transformers %.4f, relative difference %.3g%%\n", ours, reference,
                100.0 * std::fabs(ours - reference) / reference);
    EXPECT_LE(std::fabs(ours - reference) / reference, 0.005);
}

std::string gemma3_path() {
    const char* dir = std::getenv("KVSTASH_MODELS_DIR");
    const std::string models = dir != nullptr && *dir != '\0' ? dir : source_dir() + "/models";
    return models + "/gemma-3-270m-q4_k_m.gguf";
}

double ppl_of(const ProcessResult& r) {
    const auto start = r.out.rfind("ppl = ");
    return start == std::string::npos ? 0.0 : std::stod(r.out.substr(start + 6));
}

// Every chunk starts with BOS, as llama.cpp's perplexity: without it (the old convention) chunks after the
// first were scored from a mid-text position 0 and the total came out ~46% above llama.cpp's. Four chunks of
// 512 tokens (the text's first 10,000 bytes) against the fixture's per-chunk mean NLL of the same chunks,
// scored on kvstash's positions 256..511 ("kvstash" in the fixture: the same llama.cpp logits).
TEST(Perplexity, Gemma3ChunksStartWithBosAsLlamaCpp) {
    const std::string model = gemma3_path();
    if (!std::filesystem::exists(model)) GTEST_SKIP() << model << " not found: run scripts/fetch_model.sh gemma3";
    const auto ref = load_json(fixture_path("gemma3/perplexity.json"));
    const auto ctx = ref.at("ctx").get<int64_t>();
    std::ifstream in(source_dir() + "/" + ref.at("text_file").get<std::string>(), std::ios::binary);
    const std::string text = std::string(std::istreambuf_iterator<char>(in), {}).substr(0, 10000);
    const std::string path = (std::filesystem::temp_directory_path() / "kvstash_gemma3_ppl.txt").string();
    std::ofstream(path, std::ios::binary) << text;

    // The chunks are the fixture's: kvstash's tokens of this prefix start with llama.cpp's.
    const auto ids = run_cli({"tokenize", "-m", model, "-f", path});
    ASSERT_EQ(ids.exit_code, 0) << ids.err;
    std::istringstream words(ids.out);
    const std::vector<int32_t> ours{std::istream_iterator<int32_t>(words), {}};
    const auto want_tokens = ref.at("tokens").get<std::vector<int32_t>>();
    const auto n_chunks = static_cast<int64_t>(ours.size()) / ctx;
    ASSERT_EQ(n_chunks, 4);
    ASSERT_TRUE(std::equal(ours.begin(), ours.begin() + n_chunks * ctx, want_tokens.begin()));

    const auto r = run_cli({"perplexity", "-m", model, "-f", path, "--ctx", std::to_string(ctx), "-t", "2"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("each starting with BOS"), std::string::npos) << r.err;
    const auto mean_of = [&](const char* convention) {
        const auto chunk_nll = ref.at(convention).at("chunk_mean_nll").get<std::vector<double>>();
        double sum = 0.0;
        for (int64_t c = 0; c < n_chunks; ++c) sum += chunk_nll[static_cast<size_t>(c)];
        return std::exp(sum / static_cast<double>(n_chunks));
    };
    const double llamacpp_same_positions = mean_of("kvstash");
    const double llamacpp_own_positions = mean_of("llamacpp");
    const double ppl = ppl_of(r);
    std::printf(
        "Gemma 3 270M, %lld chunks of %lld: kvstash perplexity %.4f; llama.cpp %.4f on the same positions "
        "(%+.3f%%), %.4f on its own (positions ctx/2+1..)\n",
        static_cast<long long>(n_chunks), static_cast<long long>(ctx), ppl, llamacpp_same_positions,
        100.0 * (ppl / llamacpp_same_positions - 1.0), llamacpp_own_positions);
    EXPECT_LT(std::fabs(ppl / llamacpp_same_positions - 1.0), 0.01);
    std::filesystem::remove(path);
}

}  // namespace
}  // namespace kvstash::test
