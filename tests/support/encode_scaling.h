// Tokenizer speed as a property of the algorithm, not of the machine: inputs that would defeat a quadratic
// merge loop or regex (one 100 KB word, 100 KB of one whitespace, pseudo-random bytes) must encode in
// near-linear time. Checked as a ratio of two timings on the same machine, so that a busy machine does not
// decide it; not checked under an emulator (the arm64 stage runs the tokenizer tests under qemu), whose timings
// say nothing about the code.
#pragma once

#include <string>

#include "kvstash/tokenizer.h"

namespace kvstash::test {

// Encodes `text` and its first sixteenth (each the best of three runs), prints both timings, and fails the
// current test when the whole took more than 100 times as long as the sixteenth plus 20 ms (linear: 16;
// measured 17-79 on an AVX-512 Xeon under load, caches making the small input cheaper per byte; quadratic:
// 256). Release builds without sanitizers, not under an emulator (elsewhere it prints). Returns the token ids of
// `text`.
std::vector<int32_t> expect_near_linear_encoding(const Tokenizer& tok, const std::string& text,
                                                 const std::string& what);

}  // namespace kvstash::test
