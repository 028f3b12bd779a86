// A chat session: a conversation held as a State plus its messages, advanced turn by turn without
// recomputing what is already in the State, shareable through a PrefixCache, undoable, saved to and
// resumed from one state file.
//
//   kvstash::PrefixCache cache(*model);                                   // optional: shares work between sessions
//   auto tmpl = kvstash::ChatTemplate::for_model(*model);
//   kvstash::Session chat(evaluator, tmpl, "You are terse.", {.state = {}, .cache = &cache});
//   chat.reply("Hi!", sampler, options, print_piece);                    // turn 1: system prompt + turn
//   chat.reply("And then?", sampler, options, print_piece);              // turn 2: only turn 2's tokens
//   chat.save("chat.kvs");                                                // a state file + the messages
//   kvstash::Session resumed = kvstash::Session::open(evaluator, tmpl, "chat.kvs");  // continues bit-exactly
//
// Each turn renders the whole conversation with the template (text T). The State holds the tokens of
// every earlier turn — the generated ids of each reply included, never a re-encoding of the reply text
// (which can tokenize differently). When the text of those tokens is a prefix of T (the usual case: T
// continues with the template's end-of-turn suffix and the new user turn), only the rest of T is
// encoded and evaluated (after a reply cut by max_tokens, the rest begins with the end-of-turn token's
// text). Otherwise (a reply cut by a stop string, a template that rewrites earlier turns, a tokenizer
// whose decode does not concatenate) T is encoded whole and the State is cut back to the longest
// common token prefix.
//
// With a PrefixCache, the first turn takes the longest cached prefix (the system prompt that another
// session, or an earlier process through the cache's disk tier, already computed) and every turn offers
// the State's blocks back to the cache (release()), so sessions with one system prompt compute it once.
//
// Exactness: every kernel is batch-invariant, so the logits after each turn are bitwise those of
// evaluating the State's tokens from an empty State in one pass (tests/unit/session_test.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvstash/chat.h"
#include "kvstash/evaluator.h"
#include "kvstash/generate.h"
#include "kvstash/state.h"
#include "kvstash/state_file.h"

namespace kvstash {

class PrefixCache;

struct SessionOptions {
    StateOptions state;  // KV type and context of the session's State
    // Not owned; must outlive the session; null = the session keeps its own system prompt.
    PrefixCache* cache = nullptr;
};

// What the last reply() did with the prompt (the rendered conversation up to the assistant's turn).
struct SessionTurnStats {
    int64_t prompt_tokens = 0;  // tokens of the whole conversation at the start of generation
    int64_t computed = 0;       // of those, evaluated in this turn
    int64_t reused = 0;         // of those, already in the State (or taken from the cache)
    bool appended = false;      // the new tokens were appended to the State's own (no re-encoding of earlier turns)
};

class Session {
public:
    // Without a cache, evaluates the system block (the tokens every rendering starts with: the system
    // message, or the template's default one) at once and keeps it for reset(). With a cache, nothing is
    // evaluated before the first reply(), which takes whatever the cache has.
    Session(Evaluator& evaluator, ChatTemplate chat_template, std::string system_prompt = {},
            SessionOptions options = {});
    Session(Evaluator& evaluator, ChatTemplate chat_template, std::string system_prompt, StateOptions state_options);
    // A session saved by save(), resumed (see load()).
    static Session open(Evaluator& evaluator, ChatTemplate chat_template, const std::string& path,
                        SessionOptions options = {});

    Session(Session&&) noexcept;
    ~Session();

    // Adds the user's message, generates the assistant's reply (streamed through on_text), records it.
    // Throws Error(out_of_range) when the conversation no longer fits the context. On an error the
    // messages are as before the call (the State may hold fewer tokens; the next turn recomputes them).
    GenerateResult reply(std::string_view user_message, Sampler& sampler, const GenerateOptions& options,
                         const TokenCallback& on_text = {});
    // Drops the last user + assistant exchange: the State is cut back to where that exchange began (no
    // recomputation). Returns false when there is none.
    bool undo();
    // Back to the system prompt alone (State cut back to the system block; nothing recomputed).
    void reset();

    // Continues the conversation under another adapter set (kvstash/adapter.h; null = none) and prefix
    // cache (one holding States of that set, or null): the State's tokens are computed again under the
    // new weights from the last point computed under them (the cache's longest prefix: e.g. the system
    // prompt; else from scratch), so the result is bitwise a cold evaluation under the new set.
    // last_turn() reports what was reused and computed. Throws as Evaluator::eval; the session is then
    // unchanged.
    void set_adapters(std::shared_ptr<const AdapterSet> adapters, PrefixCache* cache = nullptr);
    // One state file: the State (a valid file for load_state and `kvstash generate --state`) and an
    // ancillary 'session' section with the messages, the template's name and the turn boundaries.
    // Throws as save_state.
    void save(const std::string& path, const SaveOptions& options = {}) const;
    // Replaces this session with the one saved in `path`; on any error the session is unchanged. Throws
    // as load_state (missing, corrupt, other model), Error(invalid_argument) for a state file without a
    // session or one saved with another chat template, Error(bad_format) for a malformed session section.
    void load(const std::string& path);

    const std::vector<ChatMessage>& messages() const;
    const State& state() const;
    const ChatTemplate& chat_template() const;
    // Tokens of the system block (every rendering of this conversation starts with them).
    int64_t system_tokens() const;
    // Per user + assistant exchange, the State position where its tokens begin (undo() cuts back to it).
    const std::vector<int64_t>& turn_starts() const;
    const SessionTurnStats& last_turn() const;
    int64_t last_computed() const { return last_turn().computed; }
    int64_t last_reused() const { return last_turn().reused; }

private:
    struct Impl;  // the conversation: evaluator, template, messages, State, turn boundaries (session.cpp)
    explicit Session(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace kvstash
