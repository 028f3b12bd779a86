// `kvstash perplexity` on a public-domain text against the reference perplexity computed by Hugging
// Face transformers with the same method (tests/fixtures/smollm2/perplexity.json, made by
// tests/reference/make_smollm2_fixtures.py). The bar: within 0.5%.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

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

}  // namespace
}  // namespace kvstash::test
