#include "encode_scaling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <iostream>

namespace kvstash::test {
namespace {

double best_of_three_ms(const Tokenizer& tok, const std::string& text, std::vector<int32_t>& ids) {
    double best = 0;
    for (int run = 0; run < 3; ++run) {
        const auto start = std::chrono::steady_clock::now();
        ids = tok.encode(text, AddSpecial::no, ParseSpecial::yes);
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        best = run == 0 ? ms : std::min(best, ms);
    }
    return best;
}

}  // namespace

std::vector<int32_t> expect_near_linear_encoding(const Tokenizer& tok, const std::string& text,
                                                 const std::string& what) {
    std::vector<int32_t> ids, part_ids;
    const double ms = best_of_three_ms(tok, text, ids);
    const double part_ms = best_of_three_ms(tok, text.substr(0, text.size() / 16), part_ids);
    std::cout << "[ speed    ] encode " << text.size() << " bytes of " << what << ": " << ids.size() << " tokens in "
              << ms << " ms; its first sixteenth: " << part_ids.size() << " tokens in " << part_ms << " ms\n";
// Under an emulator (a cross build's tests, KVSTASH_TEST_EMULATOR) the timings are the emulator's: printed only.
#if defined(NDEBUG) && !defined(__SANITIZE_ADDRESS__) && !defined(KVSTASH_TEST_EMULATOR)
    EXPECT_LT(ms, 100.0 * part_ms + 20.0) << what << ": the encoding time grows faster than the input";
#endif
    return ids;
}

}  // namespace kvstash::test
