// kvstash chat: an interactive multi-turn conversation (also works with piped stdin: one user message
// per line) on a kvstash::Session: each turn evaluates only its own tokens; /undo, /save and /load work
// on the session; with --cache-dir the system prompt's KV comes from (and goes to) a prefix cache
// shared with other runs.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>

#include "kvstash/adapter_flags.h"
#include "kvstash/cache_flags.h"
#include "kvstash/chat.h"
#include "kvstash/commands.h"
#include "kvstash/common.h"
#include "kvstash/error.h"
#include "kvstash/evaluator.h"
#include "kvstash/generate.h"
#include "kvstash/line_reader.h"
#include "kvstash/model.h"
#include "kvstash/prefix_cache.h"
#include "kvstash/progress.h"
#include "kvstash/sampling_options.h"
#include "kvstash/session.h"
#include "kvstash/shared_flags.h"
#include "kvstash/spec_flags.h"
#include "kvstash/state.h"
#include "kvstash/state_file.h"
#include "kvstash/tokenizer.h"

namespace kvstash::cli {
namespace {

struct ChatFlags {
    std::string model_path;
    std::string system;
    std::string chat_template;
    SamplingFlags sampling;
    SpecFlags spec;
    int threads = 0;
    int64_t ctx = 0;
    std::string kv_type = "f16";
    bool timings = false;
    std::string load_path;
    CacheFlags cache;
    AdapterFlags adapters;
};

const char* chat_help =
    "commands: /save FILE (the conversation and its state), /load FILE (resume one), /undo (drop the last exchange), "
    "/reset (start over, keeping the system message), /exit (or end of input), /help\n"
    "input: a line ending in \\ continues on the next; \"\"\" on its own line opens a multi-line message closed by "
    "another \"\"\"; Ctrl-C stops the answer (the conversation is kept), twice quits\n";

// A loaded session continues its sampler's random sequence (as if it had never been saved), with this
// run's sampling flags.
Sampler resumed_sampler(const Session& session, const SamplerParams& params) {
    const SamplerState* saved = session.state().sampler_state();
    if (saved == nullptr) return Sampler(params);
    SamplerState state = *saved;
    state.params = params;
    return Sampler(state);
}

// "3 exchanges, 412 tokens"
std::string describe(const Session& session) {
    const size_t n = session.turn_starts().size();
    return std::to_string(n) + (n == 1 ? " exchange, " : " exchanges, ") + std::to_string(session.state().n_tokens()) +
           " tokens";
}

void print_loaded(const Session& session, const std::string& path) {
    std::fprintf(stderr, "(loaded '%s': %s)\n", path.c_str(), describe(session).c_str());
}

// "/cmd ARG" -> ARG (trimmed), or empty.
std::string argument_of(const std::string& line, size_t command_length) {
    std::string arg = line.substr(std::min(line.size(), command_length));
    const size_t begin = arg.find_first_not_of(" \t");
    if (begin == std::string::npos) return {};
    const size_t end = arg.find_last_not_of(" \t");
    return arg.substr(begin, end - begin + 1);
}

// Session::open / Session::load with the chat command's advice added to a refusal the library phrases in
// its own terms: which files --load and /load read, and the flag that picks a session's template.
template <typename Fn>
auto with_load_advice(const Model& model, const std::string& path, Fn load) {
    try {
        return load();
    } catch (const Error& e) {
        if (e.code() != ErrorCode::invalid_argument) throw;
        StateFileInfo info;
        try {
            info = inspect_state_file(path, Checksums::skip);
        } catch (const Error&) {
            throw e;  // the library's error is the one to show
        }
        if (info.model_fingerprint != model_fingerprint(model)) throw;  // another model: the message says so
        throw Error(e.code(), std::string(e.what()) +
                                  (info.has_session ? "; start kvstash chat with --chat-template NAME to resume it"
                                                    : "; load a file saved by /save (or continue this one with "
                                                      "`kvstash generate --state`)"));
    }
}

bool is_command(const std::string& line, const char* name) {
    const std::string n(name);
    return line == n || (line.starts_with(n) && (line[n.size()] == ' ' || line[n.size()] == '\t'));
}

int run_chat(const ChatFlags& f) {
    require_valid_utf8(f.system, "--system");
    auto model = load_model(f.model_path, f.threads);
    const ChatTemplate tmpl = chat_template_from_flag(*model, f.chat_template);
    Evaluator evaluator(model, f.threads);
    const std::shared_ptr<const AdapterSet> adapters = load_adapter_flags(*model, f.adapters);
    const std::unique_ptr<PrefixCache> cache = open_prefix_cache(*model, f.cache, adapters);
    const SessionOptions session_options{
        StateOptions{.kv_type = parse_cache_kv_type(f.kv_type), .n_ctx = f.ctx, .adapters = adapters}, cache.get()};
    const SamplerParams params = sampler_params(f.sampling);
    if (f.timings) std::fprintf(stderr, "%s\n", seed_line(f.sampling, params).c_str());
    std::optional<Session> session;
    if (!f.load_path.empty()) {
        session.emplace(with_load_advice(*model, f.load_path,
                                         [&] { return Session::open(evaluator, tmpl, f.load_path, session_options); }));
        warn_if_not_exact_here(f.load_path);
        if (!f.system.empty() && (session->messages().empty() || session->messages()[0].content != f.system)) {
            throw Error(ErrorCode::invalid_argument, "--system differs from the system message of the session in '" +
                                                         f.load_path +
                                                         "' (a loaded session keeps its own); drop --system");
        }
        print_loaded(*session, f.load_path);
    } else {
        PromptProgress progress(evaluator, "system prompt");
        session.emplace(evaluator, tmpl, f.system, session_options);
    }
    Sampler sampler = resumed_sampler(*session, params);
    GenerateOptions options = generate_options(f.sampling);
    apply_spec_flags(f.spec, f.model_path, *model, f.threads, options);
    const std::shared_ptr<const Grammar> grammar = grammar_from_flags(f.sampling);
    const auto vocabulary = grammar ? GrammarVocabulary::build(model->tokenizer()) : nullptr;
    const bool interactive = isatty(STDIN_FILENO) != 0;
    if (interactive) std::fprintf(stderr, "kvstash chat (%s template). %s", tmpl.name().c_str(), chat_help);

    Interrupts interrupts;
    LineReader reader(interactive, interactive ? default_history_path() : "");
    bool quit_armed = false;  // the last thing was a Ctrl-C: another one quits
    while (true) {
        const LineReader::Read input = reader.read();
        if (input.status == LineReader::Status::end) break;
        if (input.status == LineReader::Status::interrupted) {
            if (quit_armed || interrupts.take() > 1) break;
            quit_armed = true;
            std::fputs("(Ctrl-C again to quit, or /exit)\n", stderr);
            continue;
        }
        quit_armed = false;
        interrupts.take();
        const std::string& line = input.text;
        if (line.find_first_not_of(" \t\r\n\f\v") == std::string::npos) continue;  // blank: not a turn
        try {
            if (line == "/exit" || line == "/quit") break;
            if (line == "/help") {
                std::fputs(chat_help, stderr);
            } else if (line == "/reset") {
                session->reset();
                std::fputs("(conversation reset)\n", stderr);
            } else if (line == "/undo") {
                std::fputs(session->undo() ? "(last exchange dropped)\n" : "(nothing to undo)\n", stderr);
            } else if (is_command(line, "/save") || is_command(line, "/load")) {
                const std::string path = argument_of(line, 5);
                if (path.empty()) {
                    std::fprintf(stderr, "usage: %s FILE\n", line.substr(0, 5).c_str());
                } else if (line.starts_with("/save")) {
                    session->save(path);
                    std::fprintf(stderr, "(saved %s to '%s')\n", describe(*session).c_str(), path.c_str());
                } else {
                    with_load_advice(*model, path, [&] { session->load(path); });  // unchanged on error
                    warn_if_not_exact_here(path);
                    sampler = resumed_sampler(*session, params);
                    print_loaded(*session, path);
                }
            } else if (line[0] == '/') {
                std::fprintf(stderr, "unknown command '%s'; %s", line.c_str(), chat_help);
            } else {
                require_valid_utf8(line, "the message");
                PromptProgress progress(evaluator, "prompt");
                const auto turn_start = std::chrono::steady_clock::now();
                double first_token_seconds = -1.0;
                options.constraint = make_constraint(grammar, vocabulary);  // each reply starts the grammar afresh
                const GenerateResult result = [&] {
                    try {
                        return session->reply(line, sampler, options, [&](int32_t, std::string_view text) {
                            if (interrupts.pending()) return false;  // Ctrl-C: stop here, keep what was said
                            if (first_token_seconds < 0) {
                                first_token_seconds =
                                    std::chrono::duration<double>(std::chrono::steady_clock::now() - turn_start)
                                        .count();
                            }
                            std::fwrite(text.data(), 1, text.size(), stdout);
                            std::fflush(stdout);
                            return true;
                        });
                    } catch (const Error& e) {
                        if (e.code() != ErrorCode::out_of_range) throw;
                        throw Error(e.code(),
                                    std::string(e.what()) + " (/undo or /reset it, or restart with a larger --ctx)");
                    }
                }();
                std::fputc('\n', stdout);
                std::fflush(stdout);
                if (const int presses = interrupts.take(); presses > 0) {
                    std::fputs("(stopped; the answer so far is kept — /undo drops it)\n", stderr);
                    if (presses > 1) break;
                    quit_armed = true;
                }
                if (f.timings) {
                    std::fprintf(stderr,
                                 "timings: %lld prompt tokens computed (%lld reused), time to first token %.3f s, %zu "
                                 "generated in %.3f s%s\n",
                                 static_cast<long long>(session->last_computed()),
                                 static_cast<long long>(session->last_reused()),
                                 first_token_seconds < 0 ? result.seconds : first_token_seconds, result.tokens.size(),
                                 result.seconds, spec_timings(options, result).c_str());
                }
            }
        } catch (const Error& e) {
            // One bad turn or command (too long, bad bytes, a file that cannot be loaded) does not end the chat.
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
    add_chat_template_option(*cmd, f->chat_template);
    add_sampling_flags(*cmd, f->sampling);
    add_spec_flags(*cmd, f->spec);
    add_ctx_option(*cmd, f->ctx);
    add_kv_type_option(*cmd, "--kv-type", f->kv_type, {KvType::f16, KvType::f32, KvType::q8_0},
                       "KV cache type of a new conversation (a --load / /load one keeps its own)")
        ->capture_default_str();
    add_adapter_flags(*cmd, f->adapters);
    add_threads_option(*cmd, f->threads);
    add_device_options(*cmd);
    cmd->add_flag("--timings", f->timings, "print tokens computed vs reused and speed per turn to stderr");
    cmd->add_option("--load", f->load_path, "resume a conversation saved with /save");
    add_cache_flags(*cmd, f->cache,
                    "take the system prompt's (and earlier conversations') KV from this prefix-cache directory "
                    "(created if missing; shared by runs and processes) and add this chat's blocks to it");
    cmd->callback([&action, f, cmd] {
        if (!f->load_path.empty() && cmd->count("--ctx") > 0) {
            throw CLI::ValidationError("--ctx", "cannot be combined with --load: the saved session fixes its context");
        }
        action = [f] { return run_chat(*f); };
    });
}

}  // namespace kvstash::cli
