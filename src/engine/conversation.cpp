#include "kvstash/conversation.h"

#include <algorithm>

#include "kvstash/error.h"
#include "kvstash/tokenizer.h"

namespace kvstash {
namespace {

size_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
    size_t n = 0;
    while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
    return n;
}

// Brings `state` to hold exactly `tokens`, evaluating only what differs; returns tokens evaluated.
int64_t advance_to(Evaluator& evaluator, State& state, const std::vector<int32_t>& tokens) {
    size_t keep = common_prefix(state.tokens(), tokens);
    // The logits after the last token are needed: when nothing new follows, evaluate the last one again.
    if (keep == tokens.size() && keep > 0) --keep;
    if (keep < static_cast<size_t>(state.n_tokens())) state.truncate(static_cast<int64_t>(keep));
    evaluator.eval(state, std::span<const int32_t>(tokens.data() + keep, tokens.size() - keep));
    return static_cast<int64_t>(tokens.size() - keep);
}

}  // namespace

State process_prefix(Evaluator& evaluator, std::string_view text, StateOptions options) {
    const Model& model = evaluator.model();
    State state(model, options);
    evaluator.eval(state, model.tokenizer().encode(text, /*add_special=*/true, /*parse_special=*/true));
    return state;
}

GenerateResult generate_with_prefix(Evaluator& evaluator, const State& prefix, std::string_view continuation, Sampler& sampler,
                                    const GenerateOptions& options, const TokenCallback& on_text) {
    State state = prefix.fork();
    evaluator.eval(state, evaluator.model().tokenizer().encode(continuation, /*add_special=*/false, /*parse_special=*/true));
    return generate(evaluator, state, sampler, options, on_text);
}

Conversation::Conversation(Evaluator& evaluator, ChatTemplate chat_template, std::string system_prompt, StateOptions options)
    : evaluator_(evaluator),
      template_(std::move(chat_template)),
      system_state_(evaluator.model(), options),
      state_(evaluator.model(), options) {
    if (!system_prompt.empty()) messages_.push_back({"system", std::move(system_prompt)});
    // The tokens every conversation starts with: the common prefix of two renderings that differ only
    // in the user's text. This is the system block, including a template's default system prompt.
    std::vector<ChatMessage> a = messages_, b = messages_;
    a.push_back({"user", "a"});
    b.push_back({"user", "b"});
    const std::vector<int32_t> ta = render_tokens(a), tb = render_tokens(b);
    const size_t shared = common_prefix(ta, tb);
    if (shared > 0) evaluator_.eval(system_state_, std::span<const int32_t>(ta.data(), shared));
    state_ = system_state_.fork();
}

std::vector<int32_t> Conversation::render_tokens(const std::vector<ChatMessage>& messages) const {
    return evaluator_.model().tokenizer().encode(template_.render(messages, /*add_generation_prompt=*/true),
                                                 /*add_special=*/false, /*parse_special=*/true);
}

GenerateResult Conversation::reply(std::string_view user_message, Sampler& sampler, const GenerateOptions& options,
                                   const TokenCallback& on_text) {
    std::vector<ChatMessage> next = messages_;
    next.push_back({"user", std::string(user_message)});
    const std::vector<int32_t> tokens = render_tokens(next);
    if (static_cast<int64_t>(tokens.size()) >= state_.n_ctx()) {
        throw Error(ErrorCode::out_of_range, "the conversation (" + std::to_string(tokens.size()) +
                                                 " tokens) no longer fits the context of " + std::to_string(state_.n_ctx()) +
                                                 " tokens; reset it or use a larger context");
    }
    last_computed_ = advance_to(evaluator_, state_, tokens);
    last_reused_ = static_cast<int64_t>(tokens.size()) - last_computed_;
    GenerateResult result = generate(evaluator_, state_, sampler, options, on_text);
    next.push_back({"assistant", result.text});
    messages_ = std::move(next);
    return result;
}

void Conversation::reset() {
    messages_.resize(!messages_.empty() && messages_[0].role == "system" ? 1 : 0);
    state_ = system_state_.fork();
}

}  // namespace kvstash
