// Session: one turn = render, find what the State already holds, evaluate the rest, generate.
#include "kvstash/session.h"

#include <algorithm>

#include "engine/session_file.h"
#include "kvstash/adapter.h"
#include "kvstash/error.h"
#include "kvstash/prefix_cache.h"
#include "kvstash/tokenizer.h"
#include "state/state_access.h"

namespace kvstash {
namespace {

size_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
    size_t n = 0;
    while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
    return n;
}

bool has_system(const std::vector<ChatMessage>& messages) { return !messages.empty() && messages[0].role == "system"; }

}  // namespace

Session::Session(Evaluator& evaluator, ChatTemplate chat_template, std::string system_prompt, SessionOptions options)
    : evaluator_(evaluator),
      template_(std::move(chat_template)),
      options_(options),
      state_(evaluator.model(), options.state) {
    if (!system_prompt.empty()) messages_.push_back({"system", std::move(system_prompt)});
    system_tokens_ = session_file::system_block_tokens(evaluator_.model(), template_, messages_);
    // With a cache the first reply() acquires the system block (maybe computed by another session);
    // without one it is computed now, once, and kept for reset().
    if (options_.cache == nullptr && !system_tokens_.empty()) evaluator_.eval(state_, system_tokens_);
}

Session::Session(Evaluator& evaluator, ChatTemplate chat_template, std::string system_prompt,
                 StateOptions state_options)
    : Session(evaluator, std::move(chat_template), std::move(system_prompt), SessionOptions{state_options, nullptr}) {}

Session::Session(Evaluator& evaluator, ChatTemplate chat_template, SessionOptions options, State state,
                 std::vector<ChatMessage> messages, std::vector<int64_t> turn_starts,
                 std::vector<int32_t> system_tokens)
    : evaluator_(evaluator),
      template_(std::move(chat_template)),
      options_(options),
      messages_(std::move(messages)),
      state_(std::move(state)),
      system_tokens_(std::move(system_tokens)),
      turn_starts_(std::move(turn_starts)) {
    if (options_.cache != nullptr) options_.cache->release(state_);
}

Session Session::open(Evaluator& evaluator, ChatTemplate chat_template, const std::string& path,
                      SessionOptions options) {
    LoadedSession loaded = session_file::read(evaluator.model(), chat_template, path, options.state.adapters);
    return Session(evaluator, std::move(chat_template), options, std::move(loaded.state), std::move(loaded.messages),
                   std::move(loaded.turn_starts), std::move(loaded.system_tokens));
}

Session::Session(Session&&) noexcept = default;
Session::~Session() = default;

namespace session_file {

std::vector<int32_t> encode_rendering(const Model& model, const ChatPrompt& prompt, size_t from) {
    std::vector<TextRange> plain;
    for (const TextRange& r : prompt.content) {
        if (r.end > from) plain.push_back({std::max(r.begin, from) - from, r.end - from});
    }
    return model.tokenizer().encode(std::string_view(prompt.text).substr(from), AddSpecial::no, ParseSpecial::yes,
                                    plain);
}

std::vector<int32_t> system_block_tokens(const Model& model, const ChatTemplate& chat_template,
                                         const std::vector<ChatMessage>& messages) {
    std::vector<ChatMessage> a(messages.begin(), messages.begin() + (has_system(messages) ? 1 : 0)), b = a;
    a.push_back({"user", "a"});
    b.push_back({"user", "b"});
    std::vector<int32_t> ta = encode_rendering(model, chat_template.render_prompt(a, {}, AddGenerationPrompt::yes));
    const std::vector<int32_t> tb =
        encode_rendering(model, chat_template.render_prompt(b, {}, AddGenerationPrompt::yes));
    ta.resize(common_prefix(ta, tb));
    return ta;
}

}  // namespace session_file

GenerateResult Session::reply(std::string_view user_message, Sampler& sampler, const GenerateOptions& options,
                              const TokenCallback& on_text) {
    std::vector<ChatMessage> next = messages_;
    next.push_back({"user", std::string(user_message)});
    const ChatPrompt rendered = template_.render_prompt(next, {}, AddGenerationPrompt::yes);
    const std::string& text = rendered.text;
    const Tokenizer& tokenizer = evaluator_.model().tokenizer();
    const int64_t held = state_.n_tokens();

    // prompt: the token sequence the State will hold; keep: how many of the State's tokens it keeps.
    std::vector<int32_t> prompt;
    size_t keep = 0;
    bool appended = false;
    if (held > 0) {
        // The State's own tokens (generated ids included) spell a prefix of the new rendering: append
        // the rest (end-of-turn suffix + new user turn + generation prompt), encoded on its own.
        const std::string held_text = tokenizer.decode(state_.tokens());
        if (text.size() > held_text.size() && text.starts_with(held_text)) {
            prompt.assign(state_.tokens().begin(), state_.tokens().end());
            const std::vector<int32_t> tail =
                session_file::encode_rendering(evaluator_.model(), rendered, held_text.size());
            prompt.insert(prompt.end(), tail.begin(), tail.end());
            // Guards against a tokenizer whose decode is not concatenative (SentencePiece's leading space).
            appended = !tail.empty() && tokenizer.decode(prompt) == text;
            if (appended) keep = static_cast<size_t>(held);
        }
    }
    if (!appended) {
        prompt = session_file::encode_rendering(evaluator_.model(), rendered);
        keep = common_prefix(state_.tokens(), prompt);
        // The logits after the last token are needed: when nothing new follows, evaluate the last one again.
        if (keep == prompt.size() && keep > 0) --keep;
    }
    if (static_cast<int64_t>(prompt.size()) >= state_.n_ctx()) {
        throw Error(ErrorCode::out_of_range,
                    "the conversation (" + std::to_string(prompt.size()) + " tokens) no longer fits the context of " +
                        std::to_string(state_.n_ctx()) + " tokens; undo or reset the session, or use a larger context");
    }
    // Where this exchange begins: the State's tokens before it, as far as they are kept.
    int64_t turn_start = std::min<int64_t>(held, static_cast<int64_t>(keep));
    if (held == 0) turn_start = static_cast<int64_t>(common_prefix(system_tokens_, prompt));

    if (held == 0 && options_.cache != nullptr) {
        CachedPrefix hit = options_.cache->acquire(prompt, options_.state);
        // Recurrent models reuse a prefix only up to a cached checkpoint: keep one where the system block
        // ends, so that release() caches it for the next session (a no-op for other models).
        if (turn_start > hit.reused_tokens) StateAccess::want_checkpoint(hit.state, turn_start);
        state_ = std::move(hit.state);
        keep = static_cast<size_t>(hit.reused_tokens);
    } else if (keep < static_cast<size_t>(held)) {
        state_.truncate(static_cast<int64_t>(keep));
        for (int64_t& start : turn_starts_) start = std::min(start, static_cast<int64_t>(keep));
    }
    // Recurrent models: keep the state where this exchange starts, so that undo() rewinds without
    // evaluating anything again (no-op for attention-only models, O(1) otherwise).
    state_.checkpoint();
    evaluator_.eval(state_, std::span<const int32_t>(prompt).subspan(keep));
    last_turn_ = {static_cast<int64_t>(prompt.size()), static_cast<int64_t>(prompt.size() - keep),
                  static_cast<int64_t>(keep), appended};

    GenerateResult result = generate(evaluator_, state_, sampler, options, on_text);
    if (options_.cache != nullptr) options_.cache->release(state_);
    next.push_back({"assistant", result.text});
    messages_ = std::move(next);
    turn_starts_.push_back(turn_start);
    return result;
}

bool Session::undo() {
    if (turn_starts_.empty() || messages_.size() < 2) return false;
    const int64_t start = turn_starts_.back();
    if (start < state_.n_tokens()) state_.truncate(start);
    turn_starts_.pop_back();
    messages_.resize(messages_.size() - 2);
    return true;
}

void Session::reset() {
    messages_.resize(has_system(messages_) ? 1 : 0);
    turn_starts_.clear();
    const auto keep = static_cast<int64_t>(common_prefix(state_.tokens(), system_tokens_));
    if (keep < state_.n_tokens()) state_.truncate(keep);
}

void Session::set_adapters(std::shared_ptr<const AdapterSet> adapters, PrefixCache* cache) {
    StateOptions options = options_.state;
    options.adapters = std::move(adapters);
    const std::vector<int32_t> tokens(state_.tokens().begin(), state_.tokens().end());
    // Every position's KV depends on the weights: only what was computed under the new set is reusable
    // (the cache's blocks under it: typically the system prompt), the rest is computed again.
    State next = cache != nullptr ? cache->acquire(tokens, options).state : State(evaluator_.model(), options);
    const int64_t reused = next.n_tokens();
    if (reused < static_cast<int64_t>(tokens.size()))
        evaluator_.eval(next, std::span(tokens).subspan(static_cast<size_t>(reused)));
    if (const SamplerState* sampler = state_.sampler_state()) next.set_sampler_state(*sampler);
    if (cache != nullptr) cache->release(next);
    state_ = std::move(next);
    options_.state = std::move(options);
    options_.cache = cache;
    last_turn_ = {};
    last_turn_.prompt_tokens = static_cast<int64_t>(tokens.size());
    last_turn_.reused = reused;
    last_turn_.computed = static_cast<int64_t>(tokens.size()) - reused;
}

void Session::save(const std::string& path, const SaveOptions& options) const {
    save_state(state_, path, options, session_file::encode(template_.name(), messages_, turn_starts_));
}

void Session::load(const std::string& path) {
    // Read everything first: on any error the session is unchanged. The moves below cannot throw.
    LoadedSession loaded = session_file::read(evaluator_.model(), template_, path, options_.state.adapters);
    state_ = std::move(loaded.state);
    messages_ = std::move(loaded.messages);
    turn_starts_ = std::move(loaded.turn_starts);
    system_tokens_ = std::move(loaded.system_tokens);
    last_turn_ = {};
    if (options_.cache != nullptr) options_.cache->release(state_);
}

}  // namespace kvstash
