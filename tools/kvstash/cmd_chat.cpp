// kvstash chat: an interactive multi-turn conversation (also works with piped stdin: one user message
// per line). Each turn renders the whole conversation with the chat template and evaluates only the
// tokens past the longest common prefix with what the state already holds, so earlier turns are never
// recomputed.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>

#include "kvstash/chat.h"
#include "kvstash/commands.h"
#include "kvstash/common.h"
#include "kvstash/error.h"
#include "kvstash/generate.h"
#include "kvstash/model.h"
#include "kvstash/progress.h"
#include "kvstash/sampling_options.h"
#include "kvstash/tokenizer.h"

namespace kvstash::cli {
namespace {

struct ChatFlags {
    std::string model_path;
    std::string system;
    std::string chat_template;
    SamplingFlags sampling;
    int threads = 0;
    int64_t ctx = 0;
    bool timings = false;
};

const char* chat_help =
    "commands: /reset (start over, keeping the system message), /exit (or end of input), /help\n";

// Brings `state` to hold exactly `tokens`: keeps the common prefix, evaluates the rest.
// Returns how many tokens were computed.
size_t advance_to(Evaluator& evaluator, State& state, const std::vector<int32_t>& tokens) {
    const auto held = state.tokens();
    size_t common = 0;
    while (common < held.size() && common < tokens.size() && held[common] == tokens[common]) ++common;
    // The last held token's logits are needed if nothing new follows; always re-evaluate at least one token.
    if (common == tokens.size() && common > 0) --common;
    if (common < held.size()) state.truncate(static_cast<int64_t>(common));
    const std::span<const int32_t> rest(tokens.data() + common, tokens.size() - common);
    PromptProgress progress(evaluator, "prompt");
    evaluator.eval(state, rest);
    return rest.size();
}

int run_chat(const ChatFlags& f) {
    auto model = Model::load(f.model_path);
    const ChatTemplate tmpl = f.chat_template.empty() ? ChatTemplate::for_model(*model) : ChatTemplate::named(f.chat_template);
    const Tokenizer& tokenizer = model->tokenizer();
    Evaluator evaluator(model, f.threads);
    State state(*model, StateOptions{KvType::f16, f.ctx});
    Sampler sampler(sampler_params(f.sampling));
    const GenerateOptions options = generate_options(f.sampling);
    require_valid_utf8(f.system, "--system");

    std::vector<ChatMessage> messages;
    if (!f.system.empty()) messages.push_back({"system", f.system});
    const bool interactive = isatty(STDIN_FILENO) != 0;
    if (interactive) std::fprintf(stderr, "kvstash chat (%s template). %s", tmpl.name().c_str(), chat_help);

    std::string line;
    while (true) {
        if (interactive) std::fputs("> ", stderr);
        if (!std::getline(std::cin, line)) break;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.empty()) continue;
        if (line == "/exit" || line == "/quit") break;
        if (line == "/help") {
            std::fputs(chat_help, stderr);
            continue;
        }
        if (line == "/reset") {
            messages.resize(f.system.empty() ? 0 : 1);
            std::fputs("(conversation reset)\n", stderr);
            continue;
        }
        if (line[0] == '/') {
            std::fprintf(stderr, "unknown command '%s'; %s", line.c_str(), chat_help);
            continue;
        }
        try {
            require_valid_utf8(line, "the message");
        } catch (const Error& e) {
            std::fprintf(stderr, "kvstash: error: %s\n", e.what());
            continue;
        }
        messages.push_back({"user", line});
        const std::vector<int32_t> tokens =
            tokenizer.encode(tmpl.render(messages, /*add_generation_prompt=*/true), /*add_special=*/false, /*parse_special=*/true);
        if (static_cast<int64_t>(tokens.size()) + 1 >= state.n_ctx()) {
            messages.pop_back();
            std::fprintf(stderr, "kvstash: error: the conversation (%zu tokens) no longer fits the context of %lld tokens; /reset to start over\n",
                         tokens.size(), static_cast<long long>(state.n_ctx()));
            continue;
        }
        const size_t computed = advance_to(evaluator, state, tokens);
        const GenerateResult result = generate(evaluator, state, sampler, options, [](int32_t, std::string_view text) {
            std::fwrite(text.data(), 1, text.size(), stdout);
            std::fflush(stdout);
            return true;
        });
        std::fputc('\n', stdout);
        std::fflush(stdout);
        messages.push_back({"assistant", result.text});
        if (f.timings) {
            std::fprintf(stderr, "timings: %zu prompt tokens computed (%zu reused), %zu generated in %.3f s\n", computed,
                         tokens.size() - computed, result.tokens.size(), result.seconds);
        }
    }
    return 0;
}

}  // namespace

void register_chat(CLI::App& root, Action& action) {
    auto f = std::make_shared<ChatFlags>();
    auto* cmd = root.add_subcommand("chat", "Talk with the model, turn after turn (reads stdin; one message per line)");
    add_model_option(*cmd, f->model_path);
    cmd->add_option("--system", f->system, "system message");
    cmd->add_option("--chat-template", f->chat_template, "chat template to use instead of the model's: " + join_names(ChatTemplate::names()))
        ->check(CLI::IsMember(ChatTemplate::names()));
    add_sampling_flags(*cmd, f->sampling);
    cmd->add_option("--ctx", f->ctx, "context size in tokens (0 = the model's)")->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
    add_threads_option(*cmd, f->threads);
    cmd->add_flag("--timings", f->timings, "print tokens computed vs reused and speed per turn to stderr");
    cmd->callback([&action, f] { action = [f] { return run_chat(*f); }; });
}

}  // namespace kvstash::cli
