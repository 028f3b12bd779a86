// `kvstash chat` sessions through the real CLI over piped stdin: /save then --load in a fresh process
// continues exactly as the uninterrupted conversation, /undo, errors that keep the REPL running, a
// session file read by `generate --state`, and --cache-dir reusing the system prompt across processes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "support/paths.h"
#include "support/subprocess.h"

namespace kvstash::test {
namespace {

namespace fs = std::filesystem;

class ChatSession : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("kvstash_chat_session_" + std::to_string(getpid()));
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string path(const std::string& name) const { return (dir_ / name).string(); }
    fs::path dir_;
};

const std::string kSystem =
    "You are a patient tutor for a student of English literature. You answer in one short sentence and never use "
    "lists.";

std::vector<std::string> chat_args(std::vector<std::string> extra, const std::string& system = kSystem) {
    std::vector<std::string> args{"chat", "--system", system, "-n", "24", "--timings"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
}

struct TurnTiming {
    long computed = 0, reused = 0;
};

// The "timings: N prompt tokens computed (M reused)" lines of stderr, in order.
std::vector<TurnTiming> timings_of(const std::string& err) {
    // Plain parsing rather than std::regex: GCC 12 reports a -Wmaybe-uninitialized false positive inside
    // <regex> for this pattern at -O3, which -Werror turns into a build failure.
    std::vector<TurnTiming> out;
    std::istringstream lines(err);
    std::string line;
    while (std::getline(lines, line)) {
        TurnTiming t;
        if (std::sscanf(line.c_str(), "timings: %ld prompt tokens computed (%ld reused)", &t.computed, &t.reused) ==
            2) {
            out.push_back(t);
        }
    }
    return out;
}

TEST_F(ChatSession, SaveThenLoadInAFreshProcessContinuesAsTheUninterruptedChat) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    // Greedy, and sampled with a seed: the sampler's random sequence must continue across the file too.
    for (const std::vector<std::string>& sampling :
         {std::vector<std::string>{"--temp", "0"}, std::vector<std::string>{"--temp", "0.9", "--seed", "5"}}) {
        SCOPED_TRACE(sampling[1]);
        const std::string file = path("chat_" + sampling[1] + ".kvs");
        const auto whole =
            run_cli(chat_args(sampling), "Who wrote Persuasion?\nWhen was it published?\nName its heroine.\n");
        const auto first =
            run_cli(chat_args(sampling), "Who wrote Persuasion?\nWhen was it published?\n/save " + file + "\n");
        auto load_args = chat_args(sampling);
        load_args.insert(load_args.end(), {"--load", file});
        const auto second = run_cli(load_args, "Name its heroine.\n");
        ASSERT_EQ(whole.exit_code, 0) << whole.err;
        ASSERT_EQ(first.exit_code, 0) << first.err;
        ASSERT_EQ(second.exit_code, 0) << second.err;
        EXPECT_NE(first.err.find("(saved 2 exchanges"), std::string::npos) << first.err;
        EXPECT_NE(second.err.find("(loaded '" + file + "': 2 exchanges"), std::string::npos) << second.err;
        EXPECT_EQ(first.out + second.out, whole.out) << "the resumed chat diverged from the uninterrupted one";
        // The resumed turn computes only its own tokens, as the uninterrupted third turn did.
        const auto w = timings_of(whole.err), s = timings_of(second.err);
        ASSERT_EQ(w.size(), 3u) << whole.err;
        ASSERT_EQ(s.size(), 1u) << second.err;
        EXPECT_EQ(s[0].computed, w[2].computed);
        EXPECT_EQ(s[0].reused, w[2].reused);
    }

    // A session file is a plain state file for `generate --state` (the session section is skipped).
    const auto g = run_cli({"generate", "--state", path("chat_0.kvs"), "-p", "Thanks!", "-n", "4", "--temp", "0"});
    EXPECT_EQ(g.exit_code, 0) << g.err;
    const auto info = run_cli({"state", "info", path("chat_0.kvs")});
    EXPECT_EQ(info.exit_code, 0) << info.err;
    EXPECT_NE(info.out.find("chat session:  yes"), std::string::npos) << info.out;
}

TEST_F(ChatSession, UndoDropsTheLastExchangeWithoutRecomputing) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    const auto r = run_cli(chat_args({"--temp", "0"}),
                           "Who wrote Persuasion?\nWhen was it published?\n/undo\nWhen was it published?\n"
                           "/undo\n/undo\n/undo\nWho wrote Persuasion?\n");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::vector<std::string> replies;
    std::istringstream lines(r.out);
    for (std::string l; std::getline(lines, l);) replies.push_back(l);
    ASSERT_EQ(replies.size(), 4u) << r.out;
    EXPECT_EQ(replies[2], replies[1]) << "the question asked again after /undo got another answer";
    EXPECT_EQ(replies[3], replies[0]);
    EXPECT_NE(r.err.find("(last exchange dropped)"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("(nothing to undo)"), std::string::npos) << r.err;
    const auto t = timings_of(r.err);
    ASSERT_EQ(t.size(), 4u) << r.err;
    EXPECT_EQ(t[2].computed, t[1].computed) << "after /undo the question should cost what it cost the first time";
    EXPECT_EQ(t[2].reused, t[1].reused);
    EXPECT_EQ(t[3].computed, t[0].computed) << "after undoing everything only the system prompt should remain";
}

TEST_F(ChatSession, BadFilesAreClearErrorsAndTheChatGoesOn) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    ASSERT_EQ(run_cli({"prefill", "-p", "Just a state, no chat.", "-o", path("plain.kvs")}).exit_code, 0);
    const auto saved = run_cli(chat_args({"--temp", "0"}), "Hi\n/save " + path("good.kvs") + "\n");
    ASSERT_EQ(saved.exit_code, 0) << saved.err;
    // A flipped byte in the middle of the file (inside the KV): a checksum error.
    {
        std::fstream f(path("good.kvs"), std::ios::in | std::ios::out | std::ios::binary);
        f.seekg(0, std::ios::end);
        const auto size = static_cast<std::streamoff>(f.tellg());
        std::string copy(static_cast<size_t>(size), '\0');
        f.seekg(0);
        f.read(copy.data(), size);
        copy[static_cast<size_t>(size / 2)] ^= 0x5a;
        std::ofstream(path("corrupt.kvs"), std::ios::binary).write(copy.data(), size);
    }
    // A state of another model.
    const auto other =
        run_cli({"prefill", "-m", fixture_path("tiny/gqa_f32.gguf"), "-p", "hello", "-o", path("other.kvs")});
    ASSERT_EQ(other.exit_code, 0) << other.err;

    const auto r =
        run_cli(chat_args({"--temp", "0"}), "/load " + path("missing.kvs") + "\n/load " + path("plain.kvs") +
                                                "\n/load " + path("corrupt.kvs") + "\n/load " + path("other.kvs") +
                                                "\n/load\n/save\n" + "/frobnicate\nHi\n");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_FALSE(r.out.empty()) << "the chat did not go on after the errors";
    for (const char* expected :
         {"missing.kvs", "without a chat session", "load a file saved by /save", "checksum mismatch", "fingerprint",
          "usage: /load FILE", "usage: /save FILE", "unknown command '/frobnicate'"}) {
        EXPECT_NE(r.err.find(expected), std::string::npos) << expected << "\n" << r.err;
    }
    EXPECT_EQ(r.out, saved.out) << "a failed /load changed the conversation";

    // --load of a bad file at start: a one-line error and the input-file exit code.
    auto load_bad = chat_args({"--temp", "0", "--load", path("plain.kvs")});
    const auto bad = run_cli(load_bad, "Hi\n");
    EXPECT_EQ(bad.exit_code, 2) << bad.err;
    EXPECT_NE(bad.err.find("without a chat session"), std::string::npos) << bad.err;
    EXPECT_NE(bad.err.find("; load a file saved by /save (or continue this one with `kvstash generate --state`)"),
              std::string::npos)
        << bad.err;
    const auto missing = run_cli(chat_args({"--load", path("missing.kvs")}), "Hi\n");
    EXPECT_EQ(missing.exit_code, 3) << missing.err;
}

// The library's errors name the problem; the REPL adds its own commands and flags.
TEST_F(ChatSession, ErrorsCarryTheChatCommandsAdvice) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    std::string long_message;
    for (int i = 0; i < 40; ++i) long_message += "Tell me more about the novel. ";
    const auto full = run_cli(chat_args({"--temp", "0", "--ctx", "96"}), long_message + "\nHi\n");
    ASSERT_EQ(full.exit_code, 0) << full.err;
    EXPECT_NE(full.err.find("no longer fits the context of 96 tokens"), std::string::npos) << full.err;
    EXPECT_NE(full.err.find("(/undo or /reset it, or restart with a larger --ctx)"), std::string::npos) << full.err;
    EXPECT_FALSE(full.out.empty()) << "the chat did not go on after the error";

    // A session saved with one template, resumed with another.
    ASSERT_EQ(run_cli(chat_args({"--temp", "0"}), "Hi\n/save " + path("chatml.kvs") + "\n").exit_code, 0);
    const auto other = run_cli(chat_args({"--chat-template", "llama3", "--load", path("chatml.kvs")}), "Hi\n");
    EXPECT_EQ(other.exit_code, 2) << other.err;
    EXPECT_NE(other.err.find("resume it with the 'chatml' template; start kvstash chat with --chat-template NAME"),
              std::string::npos)
        << other.err;
}

TEST_F(ChatSession, CacheDirReusesTheSystemPromptInALaterProcess) {
    KVSTASH_REQUIRE_DEFAULT_MODEL();
    // Several KV blocks of system prompt: the disk tier holds full 32-token blocks.
    const std::string system =
        kSystem +
        " The student is reading the novels of Jane Austen this term, starting with Persuasion, "
        "and will ask about their authors, dates, characters and places; when you do not know, say so.";
    const auto args = chat_args({"--temp", "0", "--cache-dir", path("cache")}, system);
    const auto first = run_cli(args, "Who wrote Persuasion?\n");
    const auto second = run_cli(args, "What is a sonnet?\n");
    ASSERT_EQ(first.exit_code, 0) << first.err;
    ASSERT_EQ(second.exit_code, 0) << second.err;
    const auto a = timings_of(first.err), b = timings_of(second.err);
    ASSERT_EQ(a.size(), 1u) << first.err;
    ASSERT_EQ(b.size(), 1u) << second.err;
    EXPECT_EQ(a[0].reused, 0) << "an empty cache directory gave tokens";
    // The system prompt's full 32-token blocks come from the first process's block files.
    EXPECT_GE(b[0].reused, 32) << second.err;
    // And the answer is the one a chat without the cache gives.
    EXPECT_EQ(second.out, run_cli(chat_args({"--temp", "0"}, system), "What is a sonnet?\n").out);
}

}  // namespace
}  // namespace kvstash::test
