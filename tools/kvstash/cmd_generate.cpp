// kvstash generate: continue one or more prompts — from scratch, from a chat-templated prompt
// (--chat), or from a saved state (--state, each -p a fork of it) — streaming the text to stdout.
// With --cache-dir, each prompt starts from the longest prefix a PrefixCache on that directory holds
// (from earlier prompts of this run or earlier runs) and its final state is offered back to it.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <span>

#include <nlohmann/json.hpp>

#include "kvstash/adapter_flags.h"
#include "kvstash/cache_flags.h"
#include "kvstash/chat.h"
#include "kvstash/commands.h"
#include "kvstash/common.h"
#include "kvstash/error.h"
#include "kvstash/evaluator.h"
#include "kvstash/generate.h"
#include "kvstash/model.h"
#include "kvstash/prefix_cache.h"
#include "kvstash/progress.h"
#include "kvstash/sampling_options.h"
#include "kvstash/shared_flags.h"
#include "kvstash/spec_flags.h"
#include "kvstash/state.h"
#include "kvstash/state_file.h"
#include "kvstash/tokenizer.h"

namespace kvstash::cli {
namespace {

struct GenerateFlags {
    std::string model_path;
    std::vector<std::string> prompts;
    std::string prompt_file;
    SamplingFlags sampling;
    SpecFlags spec;
    int threads = 0;
    int64_t ctx = 0;
    std::string kv_type = "f16";
    bool chat = false;
    std::string system;
    std::string chat_template;
    std::string state_path;
    std::string save_state_path;
    bool timings = false;
    bool json = false;
    bool resume_sampler = false;
    std::string dump_logits_path;
    CacheFlags cache;
    AdapterFlags adapters;
};

constexpr double kMiB = 1024.0 * 1024.0;

// One line of the cache's counters for --timings.
void print_cache_stats(const PrefixCacheStats& s, double acquire_seconds, double release_seconds) {
    std::fprintf(
        stderr,
        "cache: acquire %.3f s, release (with write-through) %.3f s; %llu lookups, %llu hits, %llu tokens reused, "
        "%llu computed; ram: %llu blocks (%.1f MiB of %.0f MiB), %llu evicted; "
        "disk: %llu blocks read, %llu misses, %llu written (%.1f MiB), %llu evicted, %llu rejected, %llu write errors, "
        "%llu files (%.1f MiB of %.0f MiB)\n",
        acquire_seconds, release_seconds, static_cast<unsigned long long>(s.lookups),
        static_cast<unsigned long long>(s.hits), static_cast<unsigned long long>(s.tokens_reused),
        static_cast<unsigned long long>(s.tokens_computed), static_cast<unsigned long long>(s.blocks_held),
        static_cast<double>(s.bytes_held) / kMiB, static_cast<double>(s.ram_budget_bytes) / kMiB,
        static_cast<unsigned long long>(s.evictions), static_cast<unsigned long long>(s.disk_hits),
        static_cast<unsigned long long>(s.disk_misses), static_cast<unsigned long long>(s.disk_blocks_written),
        static_cast<double>(s.disk_bytes_written) / kMiB, static_cast<unsigned long long>(s.disk_evictions),
        static_cast<unsigned long long>(s.disk_rejected), static_cast<unsigned long long>(s.disk_write_errors),
        static_cast<unsigned long long>(s.disk_blocks_held), static_cast<double>(s.disk_bytes_held) / kMiB,
        static_cast<double>(s.disk_budget_bytes) / kMiB);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The tokens to append for one prompt.
std::vector<int32_t> prompt_tokens(const Model& model, const GenerateFlags& f, const std::string& text,
                                   bool continuing) {
    const Tokenizer& tokenizer = model.tokenizer();
    if (f.chat) {
        const ChatTemplate tmpl = chat_template_from_flag(model, f.chat_template);
        std::vector<ChatMessage> messages;
        if (!f.system.empty()) messages.push_back({"system", f.system});
        messages.push_back({"user", text});
        const ChatPrompt prompt = tmpl.render_prompt(messages, {}, AddGenerationPrompt::yes);
        return tokenizer.encode(prompt.text, AddSpecial::no, ParseSpecial::yes, prompt.content);
    }
    // A continued state already has its BOS; a fresh one gets it if the vocabulary asks for one.
    return tokenizer.encode(text, continuing ? AddSpecial::no : AddSpecial::yes, ParseSpecial::yes);
}

int run_generate(const GenerateFlags& f) {
    std::vector<std::string> texts = f.prompts;
    if (!f.prompt_file.empty()) texts.push_back(read_text_file(f.prompt_file));
    const bool continuing = !f.state_path.empty();
    for (const std::string& text : texts) {
        require_valid_utf8(text, "the prompt");
        if (text.empty() && !continuing)
            throw Error(ErrorCode::invalid_argument, "the prompt is empty; give some text with -p or -f");
    }
    if (f.chat && continuing) {
        throw Error(ErrorCode::invalid_argument,
                    "--chat cannot be combined with --state yet; use `kvstash chat` for conversations");
    }
    if (f.resume_sampler && !continuing) throw Error(ErrorCode::invalid_argument, "--resume-sampler needs --state");
    if (!f.save_state_path.empty() && texts.size() > 1) {
        throw Error(ErrorCode::invalid_argument,
                    "--save-state needs a single prompt (it saves the state after that continuation)");
    }
    // A path that cannot be written fails now (exit 5), not after the whole generation.
    if (!f.save_state_path.empty()) require_writable_output(f.save_state_path);

    auto model = load_model(f.model_path, f.threads);
    Evaluator evaluator(model, f.threads);
    const std::shared_ptr<const AdapterSet> adapters = load_adapter_flags(*model, f.adapters);
    const auto load_start = std::chrono::steady_clock::now();
    std::optional<State> base;
    if (continuing) {
        base.emplace(load_state(*model, f.state_path, LoadOptions{adapters}));
        if (f.resume_sampler && !base->sampler_state()) {
            throw Error(ErrorCode::invalid_argument,
                        "'" + f.state_path +
                            "' holds no sampler state (it was saved before any generation); drop --resume-sampler");
        }
        std::fprintf(stderr, "state: %lld tokens loaded from %s in %.3f s\n", static_cast<long long>(base->n_tokens()),
                     f.state_path.c_str(), seconds_since(load_start));
        warn_if_not_exact_here(f.state_path);
    } else {
        base.emplace(*model,
                     StateOptions{.kv_type = parse_cache_kv_type(f.kv_type), .n_ctx = f.ctx, .adapters = adapters});
    }
    const std::unique_ptr<PrefixCache> cache = open_prefix_cache(*model, f.cache, adapters);

    const SamplerParams params = sampler_params(f.sampling);
    if (f.timings && !f.resume_sampler) std::fprintf(stderr, "%s\n", seed_line(f.sampling, params).c_str());
    GenerateOptions options = generate_options(f.sampling);
    apply_spec_flags(f.spec, f.model_path, *model, f.threads, options);
    const std::shared_ptr<const Grammar> grammar = grammar_from_flags(f.sampling);
    const auto vocabulary = grammar ? GrammarVocabulary::build(model->tokenizer()) : nullptr;
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> dump(nullptr, std::fclose);
    if (!f.dump_logits_path.empty()) {
        if (texts.size() > 1) throw Error(ErrorCode::invalid_argument, "--dump-logits needs a single prompt");
        dump.reset(std::fopen(f.dump_logits_path.c_str(), "wb"));
        if (!dump) throw Error(ErrorCode::output, "cannot create '" + f.dump_logits_path + "'");
        options.on_sample = [&dump, &f](std::span<const float> logits, int32_t token) {
            if (std::fwrite(&token, sizeof token, 1, dump.get()) != 1 ||
                std::fwrite(logits.data(), sizeof(float), logits.size(), dump.get()) != logits.size()) {
                throw Error(ErrorCode::output, "cannot write '" + f.dump_logits_path + "'");
            }
        };
    }
    for (size_t i = 0; i < texts.size(); ++i) {
        State state = base->fork();
        const std::vector<int32_t> tokens = prompt_tokens(*model, f, texts[i], continuing);
        if (state.n_tokens() + static_cast<int64_t>(tokens.size()) + 1 > state.n_ctx()) {
            throw Error(ErrorCode::out_of_range,
                        "the prompt (" + std::to_string(tokens.size()) + " tokens" +
                            (continuing ? " after " + std::to_string(state.n_tokens()) + " in the state" : "") +
                            ") does not fit the context of " + std::to_string(state.n_ctx()) +
                            " tokens; shorten it or raise --ctx");
        }
        // Several continuations: a header line on stdout keeps them apart (--json: one object per line).
        if (texts.size() > 1 && !f.json) {
            std::fprintf(stdout, "--- continuation %zu/%zu ---\n", i + 1, texts.size());
            std::fflush(stdout);
        }
        const auto start = std::chrono::steady_clock::now();
        // The tokens already in `state` (a cached prefix) are not evaluated again.
        size_t reused = 0;
        double acquire_seconds = 0;
        if (cache) {
            CachedPrefix hit = cache->acquire(
                tokens, StateOptions{.kv_type = parse_cache_kv_type(f.kv_type), .n_ctx = f.ctx, .adapters = adapters});
            reused = static_cast<size_t>(hit.reused_tokens);
            state = std::move(hit.state);
            acquire_seconds = seconds_since(start);
        }
        const std::span<const int32_t> computed = std::span(tokens).subspan(reused);
        {
            PromptProgress progress(evaluator, "prompt");
            evaluator.eval(state, computed);
        }
        const double prompt_seconds = seconds_since(start);
        if (continuing) {
            std::fprintf(stderr, "tokens: %lld reused from the state, %zu computed\n",
                         static_cast<long long>(base->n_tokens()), tokens.size());
        } else if (cache) {
            std::fprintf(stderr, "tokens: %zu reused from the cache, %zu computed\n", reused, computed.size());
        }
        // --resume-sampler: continue the saved sampler's parameters and random sequence exactly.
        Sampler sampler = f.resume_sampler ? Sampler(*state.sampler_state()) : Sampler(params);
        options.constraint = make_constraint(grammar, vocabulary);  // each continuation starts the grammar afresh
        double first_token_seconds = -1.0;
        std::string generated_text;
        const GenerateResult result = generate(evaluator, state, sampler, options, [&](int32_t, std::string_view text) {
            if (first_token_seconds < 0) first_token_seconds = seconds_since(start);
            if (f.json) {
                generated_text.append(text);
            } else {
                std::fwrite(text.data(), 1, text.size(), stdout);
                std::fflush(stdout);
            }
            return true;
        });
        if (f.json) {
            const nlohmann::json line = {
                {"index", i},
                {"prompt", texts[i]},
                {"text", generated_text},
                {"prompt_tokens", tokens.size()},
                {"reused_tokens", continuing ? base->n_tokens() : static_cast<int64_t>(reused)},
                {"generated_tokens", result.tokens.size()},
                {"stop", stop_reason_name(result.stop)},
                {"seed", f.resume_sampler ? nlohmann::json(nullptr) : nlohmann::json(params.seed)}};
            // Invalid UTF-8 cannot occur in text the tokenizer decoded from a valid prompt, but a token can
            // end inside a character at max_tokens: replace rather than fail.
            std::fputs(line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str(), stdout);
        }
        std::fputc('\n', stdout);
        std::fflush(stdout);
        if (f.timings) {
            const double generated = static_cast<double>(result.tokens.size());
            std::fprintf(
                stderr,
                "timings: prompt %zu tokens in %.3f s (%.1f tok/s); generated %zu tokens in %.3f s (%.1f tok/s); "
                "time to first token %.3f s; stop: %s%s\n",
                computed.size(), prompt_seconds, static_cast<double>(computed.size()) / std::max(prompt_seconds, 1e-9),
                result.tokens.size(), result.seconds, generated / std::max(result.seconds, 1e-9),
                first_token_seconds < 0 ? seconds_since(start) : first_token_seconds, stop_reason_name(result.stop),
                spec_timings(options, result).c_str());
        }
        // Offer the prompt and the generated text to later prompts and runs (written through to disk).
        if (cache) {
            const auto release_start = std::chrono::steady_clock::now();
            cache->release(state);
            if (f.timings) print_cache_stats(cache->stats(), acquire_seconds, seconds_since(release_start));
        }
        if (!f.save_state_path.empty()) {
            save_state(state, f.save_state_path);
            std::fprintf(stderr, "state: %lld tokens saved to %s\n", static_cast<long long>(state.n_tokens()),
                         f.save_state_path.c_str());
        }
    }
    return 0;
}

}  // namespace

void register_generate(CLI::App& root, Action& action) {
    auto f = std::make_shared<GenerateFlags>();
    auto* cmd = root.add_subcommand("generate", "Continue a prompt (or a saved state), streaming the text to stdout");
    add_model_option(*cmd, f->model_path);
    const PromptFlags text = add_prompt_flags(*cmd, f->prompts, f->prompt_file,
                                              "prompt text; repeat for several continuations (forks of one state)");
    add_sampling_flags(*cmd, f->sampling);
    add_spec_flags(*cmd, f->spec);
    cmd->add_flag("--chat", f->chat, "wrap the prompt as a user message in the model's chat template");
    cmd->add_option("--system", f->system, "system message (with --chat)");
    add_chat_template_option(*cmd, f->chat_template);
    cmd->add_option("--state", f->state_path,
                    "continue from a state file written by `kvstash prefill` or --save-state");
    cmd->add_flag(
        "--resume-sampler", f->resume_sampler,
        "continue the sampler saved in --state (its parameters and random sequence) instead of the sampling flags");
    cmd->add_option("--save-state", f->save_state_path, "save the state after generation to this file");
    cmd->add_option(
        "--dump-logits", f->dump_logits_path,
        "write, for every generated token, its id (int32) and the logits it was sampled from (n_vocab float32)");
    add_ctx_option(*cmd, f->ctx);
    add_adapter_flags(*cmd, f->adapters);
    add_kv_type_option(*cmd, "--kv-type", f->kv_type, {KvType::f16, KvType::f32, KvType::q8_0},
                       "KV cache type (q8_0: about half of f16's bytes, docs/kv-cache.md)")
        ->capture_default_str();
    add_threads_option(*cmd, f->threads);
    add_device_options(*cmd);
    cmd->add_flag("--json", f->json,
                  "print one JSON object per continuation on stdout (index, prompt, text, token counts, stop, seed) "
                  "instead of streaming the text");
    cmd->add_flag("--timings", f->timings,
                  "print prompt and generation speed and time to first token (and the cache's counters) to stderr");
    add_cache_flags(
        *cmd, f->cache,
        "reuse the longest cached prefix of each prompt from this prefix-cache directory (created if missing; "
        "shared by runs and processes) and add this run's blocks to it");
    cmd->callback([&action, f, text, cmd] {
        if (!text.given() && f->state_path.empty()) {
            std::optional<std::string> piped = piped_prompt();
            if (!piped) throw CLI::RequiredError("one of -p/--prompt, -f/--file, --state or text on standard input");
            f->prompts.push_back(std::move(*piped));
        }
        if (f->prompts.empty() && f->prompt_file.empty()) f->prompts.push_back("");  // --state alone: continue as is
        if (!f->system.empty() && !f->chat) throw CLI::ValidationError("--system", "needs --chat");
        if (!f->chat_template.empty() && !f->chat) throw CLI::ValidationError("--chat-template", "needs --chat");
        // Flags that would be silently ignored are refused.
        if (!f->state_path.empty()) {
            for (const char* flag : {"--ctx", "--kv-type"}) {
                if (cmd->count(flag) > 0) {
                    throw CLI::ValidationError(
                        flag, "cannot be combined with --state: the state file fixes its context and KV cache type");
                }
            }
        }
        if (f->resume_sampler) {
            for (const char* flag : {"--temp", "--top-k", "--top-p", "--min-p", "--repeat-penalty", "--repeat-last-n",
                                     "--presence-penalty", "--frequency-penalty", "--logit-bias", "--seed"}) {
                if (cmd->count(flag) > 0) {
                    throw CLI::ValidationError(
                        flag,
                        "cannot be combined with --resume-sampler, which continues the saved sampler's "
                        "parameters and random sequence; drop one of them");
                }
            }
        }
        // A state file already is its prefix: mixing the two would leave unclear which one a prompt continues.
        if (!f->cache.dir.empty() && !f->state_path.empty()) {
            throw CLI::ValidationError(
                "--cache-dir",
                "cannot be combined with --state (a state file already holds its prefix); use one of them");
        }
        action = [f] { return run_generate(*f); };
    });
}

}  // namespace kvstash::cli
