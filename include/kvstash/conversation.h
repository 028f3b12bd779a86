// Thin conveniences over State + Evaluator + generate() for the two commonest uses:
//
//   // Read a long prefix once, then continue it many ways (each continuation forks the prefix).
//   kvstash::State book = kvstash::process_prefix(evaluator, text);
//   auto a = kvstash::generate_with_prefix(evaluator, book, " Question one?", sampler, options);
//   auto b = kvstash::generate_with_prefix(evaluator, book, " Question two?", sampler, options);
//
//   // A chat whose system prompt is computed once and whose earlier turns are never recomputed
//   // (Conversation is Session: see session.h).
//   kvstash::Conversation chat(evaluator, kvstash::ChatTemplate::for_model(*model), "You are terse.");
//   chat.reply("Hi!", sampler, options, [](int32_t, std::string_view piece) { std::cout << piece; return true; });
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kvstash/chat.h"
#include "kvstash/generate.h"
#include "kvstash/model.h"
#include "kvstash/session.h"

namespace kvstash {

// Tokenizes `text` (with BOS if the vocabulary asks for one; special-token text is parsed) and
// evaluates it into a new State.
State process_prefix(Evaluator& evaluator, std::string_view text, StateOptions options = {});

// Forks `prefix`, appends `continuation` (no BOS), and generates. `prefix` is left untouched.
GenerateResult generate_with_prefix(Evaluator& evaluator, const State& prefix, std::string_view continuation,
                                    Sampler& sampler, const GenerateOptions& options,
                                    const TokenCallback& on_text = {});

// A multi-turn chat over one State: the system prompt is evaluated once, each reply() evaluates only the
// new turn. Kept under its first name; see session.h (undo, save/resume, sharing through a PrefixCache).
using Conversation = Session;

}  // namespace kvstash
