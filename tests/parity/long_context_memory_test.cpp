// Memory grows with the tokens a state holds (KV blocks of 32 positions), never with its context size: the random
// Llama 3.1-shaped model (tests/fixtures/longctx/llama31_random.gguf, context_length 131072) run on 1,000 tokens with
// n_ctx 4,096 and with n_ctx 131,072 (= --ctx) takes the same KV bytes, and its peak RSS grows by the same amount
// within 4 MB, each in a child process measured from its own start (VmHWM - VmRSS at start, /proc/self/status).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "kvstash/evaluator.h"
#include "kvstash/model.h"
#include "kvstash/state.h"
#include "support/eval_helpers.h"
#include "support/paths.h"

namespace kvstash::test {
namespace {

constexpr int64_t kTokens = 1000;
// 2 layers × (K + V) × 64 f16 per position, in whole 32-position blocks.
constexpr uint64_t kBytesPerToken = 2 * 2 * 64 * 2;

// /proc/self/status field `key` (VmRSS, VmHWM) in KiB, -1 if absent.
long status_kib(const std::string& key) {
    std::ifstream in("/proc/self/status");
    for (std::string line; std::getline(in, line);) {
        if (line.rfind(key + ":", 0) == 0) return std::stol(line.substr(key.size() + 1));
    }
    return -1;
}

// Loads the model, evaluates n_tokens tokens with `n_ctx`; returns the state's KV bytes and, through
// `peak_growth_kib`, how far the process's peak RSS rose above its RSS at the start, the state still alive.
uint64_t run_and_count_kv(int64_t n_ctx, int64_t n_tokens, long* peak_growth_kib = nullptr) {
    const long base = status_kib("VmRSS");
    std::shared_ptr<const Model> model = Model::load(fixture_path("longctx/llama31_random.gguf"));
    Evaluator evaluator(model, 2);
    State state(*model, StateOptions{KvType::f16, n_ctx});
    const auto tokens = pseudo_random_tokens(n_tokens, model->n_vocab(), 7);
    std::vector<float> logits;
    for (int64_t done = 0; done < n_tokens; done += 250) {
        evaluator.eval(state, std::span<const int32_t>(tokens.data() + done, 250), &logits);
    }
    if (peak_growth_kib) *peak_growth_kib = status_kib("VmHWM") - base;
    return state.kv_bytes();
}

// Peak RSS growth (KiB) of a child process that loads the model and evaluates kTokens tokens with `n_ctx`. A
// forked child starts with the parent's resident pages (and its high-water mark from there), so the growth is
// measured from the child's own start.
long child_peak_growth_kib(int64_t n_ctx) {
    int fds[2];
    if (::pipe(fds) != 0) return -1;
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::close(fds[0]);
        long growth = -2;
        try {
            if (run_and_count_kv(n_ctx, kTokens, &growth) != 1024 * kBytesPerToken) growth = -3;
        } catch (...) {
            growth = -4;
        }
        const ssize_t w = ::write(fds[1], &growth, sizeof growth);
        ::_exit(w == sizeof growth ? 0 : 1);
    }
    ::close(fds[1]);
    long growth = -1;
    if (pid < 0 || ::read(fds[0], &growth, sizeof growth) != sizeof growth) growth = -1;
    ::close(fds[0]);
    int status = 0;
    if (pid > 0) ::waitpid(pid, &status, 0);
    return growth;
}

TEST(LongContextMemory, KvBytesFollowTokensNotContext) {
    EXPECT_EQ(run_and_count_kv(4096, kTokens), 1024 * kBytesPerToken);  // 32 blocks of 32 positions
    EXPECT_EQ(run_and_count_kv(131072, kTokens), 1024 * kBytesPerToken);
    EXPECT_EQ(run_and_count_kv(0, kTokens), 1024 * kBytesPerToken);  // 0: the model's 131072
}

TEST(LongContextMemory, PeakRssDoesNotGrowWithContext) {
    const long small = child_peak_growth_kib(4096);
    const long large = child_peak_growth_kib(131072);
    std::printf("peak RSS growth for %lld tokens: n_ctx 4096 %ld KiB, n_ctx 131072 %ld KiB\n",
                static_cast<long long>(kTokens), small, large);
    ASSERT_GT(small, 0);
    ASSERT_GT(large, 0);
    EXPECT_LT(std::labs(large - small), 4 * 1024);
}

}  // namespace
}  // namespace kvstash::test
