// kvstash chat: an interactive multi-turn conversation (also works with piped stdin: one user message
// per line), on kvstash::Conversation: the system prompt is computed once and earlier turns are never
// recomputed.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>

#include "kvstash/chat.h"
#include "kvstash/commands.h"
#include "kvstash/conversation.h"
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

int run_chat(const ChatFlags& f) {
    require_valid_utf8(f.system, "--system");
    auto model = Model::load(f.model_path);
    ChatTemplate tmpl = f.chat_template.empty() ? ChatTemplate::for_model(*model) : ChatTemplate::named(f.chat_template);
    const std::string template_name = tmpl.name();
    Evaluator evaluator(model, f.threads);
    Conversation conversation(evaluator, std::move(tmpl), f.system, StateOptions{KvType::f16, f.ctx});
    Sampler sampler(sampler_params(f.sampling));
    const GenerateOptions options = generate_options(f.sampling);
    const bool interactive = isatty(STDIN_FILENO) != 0;
    if (interactive) std::fprintf(stderr, "kvstash chat (%s template). %s", template_name.c_str(), chat_help);

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
            conversation.reset();
            std::fputs("(conversation reset)\n", stderr);
            continue;
        }
        if (line[0] == '/') {
            std::fprintf(stderr, "unknown command '%s'; %s", line.c_str(), chat_help);
            continue;
        }
        try {
            require_valid_utf8(line, "the message");
            PromptProgress progress(evaluator, "prompt");
            const GenerateResult result = conversation.reply(line, sampler, options, [](int32_t, std::string_view text) {
                std::fwrite(text.data(), 1, text.size(), stdout);
                std::fflush(stdout);
                return true;
            });
            std::fputc('\n', stdout);
            std::fflush(stdout);
            if (f.timings) {
                std::fprintf(stderr, "timings: %lld prompt tokens computed (%lld reused), %zu generated in %.3f s\n",
                             static_cast<long long>(conversation.last_computed()), static_cast<long long>(conversation.last_reused()),
                             result.tokens.size(), result.seconds);
            }
        } catch (const Error& e) {
            // One bad turn (too long, bad bytes) does not end the conversation.
            std::fprintf(stderr, "kvstash: error: %s\n", e.what());
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
