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

struct Session::Impl {
    Impl(Evaluator& e, ChatTemplate t, SessionOptions o, State s)
        : evaluator(e), chat_template(std::move(t)), options(o), state(std::move(s)) {}

    Evaluator& evaluator;
    ChatTemplate chat_template;
    SessionOptions options;
    std::vector<ChatMessage> messages;
    State state;
    std::vector<int32_t> system_tokens;
    std::vector<int64_t> turn_starts;
    SessionTurnStats last_turn;
};

Session::Session(Evaluator& evaluator, ChatTemplate chat_template, std::string system_prompt, SessionOptions options)
    : impl_(std::make_unique<Impl>(evaluator, std::move(chat_template), options,
                                   State(evaluator.model(), options.state))) {
    Impl& s = *impl_;
    if (!system_prompt.empty()) s.messages.push_back({"system", std::move(system_prompt)});
    s.system_tokens = session_file::system_block_tokens(evaluator.model(), s.chat_template, s.messages);
    // With a cache the first reply() acquires the system block (maybe computed by another session);
    // without one it is computed now, once, and kept for reset().
    if (s.options.cache == nullptr && !s.system_tokens.empty()) evaluator.eval(s.state, s.system_tokens);
}

Session::Session(Evaluator& evaluator, ChatTemplate chat_template, std::string system_prompt,
                 StateOptions state_options)
    : Session(evaluator, std::move(chat_template), std::move(system_prompt), SessionOptions{state_options, nullptr}) {}

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
    if (impl_->options.cache != nullptr) impl_->options.cache->release(impl_->state);
}

Session Session::open(Evaluator& evaluator, ChatTemplate chat_template, const std::string& path,
                      SessionOptions options) {
    LoadedSession loaded = session_file::read(evaluator.model(), chat_template, path, options.state.adapters);
    auto impl = std::make_unique<Impl>(evaluator, std::move(chat_template), options, std::move(loaded.state));
    impl->messages = std::move(loaded.messages);
    impl->turn_starts = std::move(loaded.turn_starts);
    impl->system_tokens = std::move(loaded.system_tokens);
    return Session(std::move(impl));
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
    std::vector<ChatMessage> next = impl_->messages;
    next.push_back({"user", std::string(user_message)});
    const ChatPrompt rendered = impl_->chat_template.render_prompt(next, {}, AddGenerationPrompt::yes);
    const std::string& text = rendered.text;
    const Tokenizer& tokenizer = impl_->evaluator.model().tokenizer();
    const int64_t held = impl_->state.n_tokens();

    // prompt: the token sequence the State will hold; keep: how many of the State's tokens it keeps.
    std::vector<int32_t> prompt;
    size_t keep = 0;
    bool appended = false;
    if (held > 0) {
        // The State's own tokens (generated ids included) spell a prefix of the new rendering: append
        // the rest (end-of-turn suffix + new user turn + generation prompt), encoded on its own.
        const std::string held_text = tokenizer.decode(impl_->state.tokens());
        if (text.size() > held_text.size() && text.starts_with(held_text)) {
            prompt.assign(impl_->state.tokens().begin(), impl_->state.tokens().end());
            const std::vector<int32_t> tail =
                session_file::encode_rendering(impl_->evaluator.model(), rendered, held_text.size());
            prompt.insert(prompt.end(), tail.begin(), tail.end());
            // Guards against a tokenizer whose decode is not concatenative (SentencePiece's leading space).
            appended = !tail.empty() && tokenizer.decode(prompt) == text;
            if (appended) keep = static_cast<size_t>(held);
        }
    }
    if (!appended) {
        prompt = session_file::encode_rendering(impl_->evaluator.model(), rendered);
        keep = common_prefix(impl_->state.tokens(), prompt);
        // The logits after the last token are needed: when nothing new follows, evaluate the last one again.
        if (keep == prompt.size() && keep > 0) --keep;
    }
    if (static_cast<int64_t>(prompt.size()) >= impl_->state.n_ctx()) {
        throw Error(ErrorCode::out_of_range, "the conversation (" + std::to_string(prompt.size()) +
                                                 " tokens) no longer fits the context of " +
                                                 std::to_string(impl_->state.n_ctx()) +
                                                 " tokens; undo or reset the session, or use a larger context");
    }
    // Where this exchange begins: the State's tokens before it, as far as they are kept.
    int64_t turn_start = std::min<int64_t>(held, static_cast<int64_t>(keep));
    if (held == 0) turn_start = static_cast<int64_t>(common_prefix(impl_->system_tokens, prompt));

    if (held == 0 && impl_->options.cache != nullptr) {
        CachedPrefix hit = impl_->options.cache->acquire(prompt, impl_->options.state);
        // Recurrent models reuse a prefix only up to a cached checkpoint: keep one where the system block
        // ends, so that release() caches it for the next session (a no-op for other models).
        if (turn_start > hit.reused_tokens) StateAccess::want_checkpoint(hit.state, turn_start);
        impl_->state = std::move(hit.state);
        keep = static_cast<size_t>(hit.reused_tokens);
    } else if (keep < static_cast<size_t>(held)) {
        impl_->state.truncate(static_cast<int64_t>(keep));
        for (int64_t& start : impl_->turn_starts) start = std::min(start, static_cast<int64_t>(keep));
    }
    // Recurrent models: keep the state where this exchange starts, so that undo() rewinds without
    // evaluating anything again (no-op for attention-only models, O(1) otherwise).
    impl_->state.checkpoint();
    impl_->evaluator.eval(impl_->state, std::span<const int32_t>(prompt).subspan(keep));
    impl_->last_turn = {static_cast<int64_t>(prompt.size()), static_cast<int64_t>(prompt.size() - keep),
                        static_cast<int64_t>(keep), appended};

    GenerateResult result = generate(impl_->evaluator, impl_->state, sampler, options, on_text);
    if (impl_->options.cache != nullptr) impl_->options.cache->release(impl_->state);
    next.push_back({"assistant", result.text});
    impl_->messages = std::move(next);
    impl_->turn_starts.push_back(turn_start);
    return result;
}

bool Session::undo() {
    if (impl_->turn_starts.empty() || impl_->messages.size() < 2) return false;
    const int64_t start = impl_->turn_starts.back();
    if (start < impl_->state.n_tokens()) impl_->state.truncate(start);
    impl_->turn_starts.pop_back();
    impl_->messages.resize(impl_->messages.size() - 2);
    return true;
}

void Session::reset() {
    impl_->messages.resize(has_system(impl_->messages) ? 1 : 0);
    impl_->turn_starts.clear();
    const auto keep = static_cast<int64_t>(common_prefix(impl_->state.tokens(), impl_->system_tokens));
    if (keep < impl_->state.n_tokens()) impl_->state.truncate(keep);
}

void Session::set_adapters(std::shared_ptr<const AdapterSet> adapters, PrefixCache* cache) {
    StateOptions options = impl_->options.state;
    options.adapters = std::move(adapters);
    const std::vector<int32_t> tokens(impl_->state.tokens().begin(), impl_->state.tokens().end());
    // Every position's KV depends on the weights: only what was computed under the new set is reusable
    // (the cache's blocks under it: typically the system prompt), the rest is computed again.
    State next = cache != nullptr ? cache->acquire(tokens, options).state : State(impl_->evaluator.model(), options);
    const int64_t reused = next.n_tokens();
    if (reused < static_cast<int64_t>(tokens.size()))
        impl_->evaluator.eval(next, std::span(tokens).subspan(static_cast<size_t>(reused)));
    if (const SamplerState* sampler = impl_->state.sampler_state()) next.set_sampler_state(*sampler);
    if (cache != nullptr) cache->release(next);
    impl_->state = std::move(next);
    impl_->options.state = std::move(options);
    impl_->options.cache = cache;
    impl_->last_turn = {};
    impl_->last_turn.prompt_tokens = static_cast<int64_t>(tokens.size());
    impl_->last_turn.reused = reused;
    impl_->last_turn.computed = static_cast<int64_t>(tokens.size()) - reused;
}

void Session::save(const std::string& path, const SaveOptions& options) const {
    save_state(impl_->state, path, options,
               session_file::encode(impl_->chat_template.name(), impl_->messages, impl_->turn_starts));
}

void Session::load(const std::string& path) {
    // Read everything first: on any error the session is unchanged. The moves below cannot throw.
    LoadedSession loaded =
        session_file::read(impl_->evaluator.model(), impl_->chat_template, path, impl_->options.state.adapters);
    impl_->state = std::move(loaded.state);
    impl_->messages = std::move(loaded.messages);
    impl_->turn_starts = std::move(loaded.turn_starts);
    impl_->system_tokens = std::move(loaded.system_tokens);
    impl_->last_turn = {};
    if (impl_->options.cache != nullptr) impl_->options.cache->release(impl_->state);
}

const std::vector<ChatMessage>& Session::messages() const { return impl_->messages; }
const State& Session::state() const { return impl_->state; }
const ChatTemplate& Session::chat_template() const { return impl_->chat_template; }
int64_t Session::system_tokens() const { return static_cast<int64_t>(impl_->system_tokens.size()); }
const std::vector<int64_t>& Session::turn_starts() const { return impl_->turn_starts; }
const SessionTurnStats& Session::last_turn() const { return impl_->last_turn; }

}  // namespace kvstash
