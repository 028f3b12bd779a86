// Thin conveniences over State + Evaluator + generate() for the two commonest uses:
//
//   // Read a long prefix once, then continue it many ways (each continuation forks the prefix).
//   kvstash::State book = kvstash::process_prefix(evaluator, text);
//   auto a = kvstash::generate_with_prefix(evaluator, book, " Question one?", sampler, options);
//   auto b = kvstash::generate_with_prefix(evaluator, book, " Question two?", sampler, options);
//
//   // A chat whose system prompt is computed once and whose earlier turns are never recomputed.
//   kvstash::Conversation chat(evaluator, kvstash::ChatTemplate::for_model(*model), "You are terse.");
//   chat.reply("Hi!", sampler, options, [](int32_t, std::string_view piece) { std::cout << piece; return true; });
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kvstash/chat.h"
#include "kvstash/generate.h"
#include "kvstash/model.h"

namespace kvstash {

// Tokenizes `text` (with BOS if the vocabulary asks for one; special-token text is parsed) and
// evaluates it into a new State.
State process_prefix(Evaluator& evaluator, std::string_view text, StateOptions options = {});

// Forks `prefix`, appends `continuation` (no BOS), and generates. `prefix` is left untouched.
GenerateResult generate_with_prefix(Evaluator& evaluator, const State& prefix, std::string_view continuation, Sampler& sampler,
                                    const GenerateOptions& options, const TokenCallback& on_text = {});

// A multi-turn chat over one State. The system prompt's tokens are evaluated once (at construction)
// and kept; each reply() renders the whole conversation with the template and evaluates only the
// tokens past the longest common prefix with what the State already holds.
class Conversation {
public:
    Conversation(Evaluator& evaluator, ChatTemplate chat_template, std::string system_prompt = {}, StateOptions options = {});

    // Adds the user's message, generates the assistant's reply (streamed through on_text), records it.
    // On an error the conversation is as it was before the call.
    GenerateResult reply(std::string_view user_message, Sampler& sampler, const GenerateOptions& options,
                         const TokenCallback& on_text = {});
    // Back to the system prompt alone (its cached state is reused, not recomputed).
    void reset();

    const std::vector<ChatMessage>& messages() const { return messages_; }
    const State& state() const { return state_; }
    // Prompt tokens of the last reply() that were evaluated vs taken from the State.
    int64_t last_computed() const { return last_computed_; }
    int64_t last_reused() const { return last_reused_; }

private:
    std::vector<int32_t> render_tokens(const std::vector<ChatMessage>& messages) const;

    Evaluator& evaluator_;
    ChatTemplate template_;
    std::vector<ChatMessage> messages_;
    State system_state_;
    State state_;
    int64_t last_computed_ = 0;
    int64_t last_reused_ = 0;
};

}  // namespace kvstash
