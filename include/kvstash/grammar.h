// Constrained output: a grammar that decides which tokens may be sampled next, so that the text
// generated always matches it (llama.cpp's GBNF syntax; JSON Schema is converted to GBNF).
//
//   auto grammar = kvstash::Grammar::from_gbnf("root ::= \"yes\" | \"no\"");  // or from_json_schema(...)
//   auto vocabulary = kvstash::GrammarVocabulary::build(model->tokenizer());   // once per model, shareable
//   kvstash::GenerateOptions options;
//   options.constraint = std::make_shared<kvstash::GrammarConstraint>(grammar, vocabulary);
//   kvstash::generate(evaluator, state, sampler, options);
//
// A token may come next iff all its bytes can be matched (its last UTF-8 character may be unfinished
// if some completion can match); the end-of-generation tokens iff the text so far is complete. Control
// tokens never match text. generate() sets the logits of the other tokens to -INFINITY before the
// sampler's own steps (sampler.h) and stops when the grammar is complete and nothing may follow.
// See docs/constrained-output.md.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "kvstash/chat.h"
#include "kvstash/error.h"

namespace kvstash {

class Tokenizer;
namespace grammar {
struct ParsedGrammar;
class TokenTrie;
class GrammarMatcher;
}  // namespace grammar

// A tool a model may call: its name and its parameters' JSON Schema as JSON text (a tool that takes no
// parameters: {"type": "object", "properties": {}}, which allows only {}).
struct ToolSchema {
    std::string name;
    std::string parameters;
};

// Lazy constraint (tool_choice "auto"): the output is free until `text` appears in it (at_start: only as
// the start of the output, after optional whitespace), then it follows the grammar from the trigger's
// first character on. Qwen 2.5: "<tool_call>" anywhere; Llama 3.1: "{\"name\"" at the start.
struct GrammarTrigger {
    std::string text;
    bool at_start = false;
};
// The trigger of a tool-call format (none: an empty text).
GrammarTrigger tool_call_trigger(ToolCallFormat format);

// When a generation under a grammar ends by itself: when nothing may follow (GBNF grammars: the
// grammar decides), or as soon as the text is complete and only whitespace may follow (JSON documents,
// from_json_schema and json_object: the root value is complete, and trailing whitespace, which means
// nothing, must not count against max_tokens).
enum class GrammarEnd { nothing_may_follow, only_whitespace_may_follow };

// What compiling one grammar or JSON Schema may cost (docs/constrained-output.md, "Limits"): the
// defaults are `kvstash serve`'s (--max-grammar-elements, --max-grammar-depth, --max-schema-nodes,
// --max-schema-depth), and a deadline (--prepare-timeout) after which compilation stops.
struct GrammarLimits {
    // Elements (8 bytes each) once repetitions are written out: {m,n} copies its item, nested ones multiply.
    uint64_t max_elements = uint64_t{1} << 20;
    int max_group_depth = 256;        // ( ) groups nested (the parser recurses once per level)
    int64_t max_schema_nodes = 5000;  // subschemas (properties, items, anyOf entries) of a JSON Schema
    int max_schema_depth = 128;       // subschemas nested, $ref chains included (the converter recurses)
    // Compilation throws PreparationExpired once this has passed (checked once per schema node, grammar
    // rule and repetition): a request's preparation counts against its deadline.
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();

    // Throws PreparationExpired when the deadline has passed.
    void check_deadline() const;
};

// Preparing a request (compiling its grammar, tokenizing its prompt) ran past GrammarLimits::deadline.
// An Error(out_of_range) that callers may tell apart: the request itself may be fine, the time was not.
class PreparationExpired : public Error {
public:
    explicit PreparationExpired(const std::string& message) : Error(ErrorCode::out_of_range, message) {}
};

// A parsed grammar: immutable, shared by every generation that uses it.
class Grammar {
public:
    // Throws Error(invalid_argument) for a syntax error ("grammar: line L, column C: ..."), an undefined
    // rule, no `root` rule, or left recursion.
    // Past `limits`: Error(invalid_argument) naming the limit, or PreparationExpired.
    static std::shared_ptr<const Grammar> from_gbnf(std::string_view gbnf, const GrammarLimits& limits = {});
    // A JSON Schema (the subset in docs/constrained-output.md) as JSON text. Throws
    // Error(invalid_argument) for invalid JSON or a schema that contradicts itself, Error(unsupported)
    // naming the keywords it does not support.
    static std::shared_ptr<const Grammar> from_json_schema(std::string_view schema_json,
                                                           const GrammarLimits& limits = {});
    // Any JSON object (OpenAI's response_format {"type": "json_object"}).
    static std::shared_ptr<const Grammar> json_object();
    // The text of tool calls in `format` (not none) to one of `tools`, arguments valid under the tool's
    // parameters schema; one call, or one or more with `parallel`. Throws as from_json_schema, naming
    // the tool (docs/constrained-output.md, "Tool calling").
    static std::shared_ptr<const Grammar> for_tool_calls(ToolCallFormat format, std::span<const ToolSchema> tools,
                                                         bool parallel, const GrammarLimits& limits = {});

    const std::string& gbnf() const { return gbnf_; }  // the GBNF text (converted, for a schema)
    const std::shared_ptr<const grammar::ParsedGrammar>& parsed() const { return parsed_; }
    GrammarEnd end() const { return end_; }

    Grammar(std::string gbnf, std::shared_ptr<const grammar::ParsedGrammar> parsed,
            GrammarEnd end = GrammarEnd::nothing_may_follow);

private:
    std::string gbnf_;
    std::shared_ptr<const grammar::ParsedGrammar> parsed_;
    GrammarEnd end_ = GrammarEnd::nothing_may_follow;
};

// A tokenizer's vocabulary indexed for grammar matching (a byte trie of the token pieces): build once
// per model and share; immutable.
class GrammarVocabulary {
public:
    static std::shared_ptr<const GrammarVocabulary> build(const Tokenizer& tokenizer);
    explicit GrammarVocabulary(std::shared_ptr<const grammar::TokenTrie> trie);
    const std::shared_ptr<const grammar::TokenTrie>& trie() const { return trie_; }

private:
    std::shared_ptr<const grammar::TokenTrie> trie_;
};

// One generation's position in a grammar. Not thread-safe; one per sequence (fork a choice: a new one).
class GrammarConstraint {
public:
    GrammarConstraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const GrammarVocabulary> vocabulary);
    // Lazy: no token is masked until the trigger appears in the accepted tokens' text; then the grammar
    // is fed the text from the trigger on (if it rejects that text the constraint stays off for good) and
    // constrains every later token. Before that, can_end() is true and must_end() false.
    GrammarConstraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const GrammarVocabulary> vocabulary,
                      GrammarTrigger trigger);
    ~GrammarConstraint();
    GrammarConstraint(GrammarConstraint&&) noexcept;
    GrammarConstraint& operator=(GrammarConstraint&&) noexcept;

    // Sets logits[i] to -INFINITY for every token i that may not come next (ids past the vocabulary
    // included). The mask of a state seen before is cached. Returns false when no token at all may come
    // next (the grammar needs a character no token of this vocabulary can spell here).
    bool mask(std::span<float> logits);
    bool allows(int32_t token);  // one token's verdict, by stepping its bytes (no mask computed)
    // Whether mask() would find this state's mask cached (here or in the process-wide cache): then it
    // costs a copy, not a walk of the vocabulary.
    bool mask_is_cached();
    // Moves past a token. Throws Error(invalid_argument) when it may not come next.
    void accept(int32_t token);
    // Moves past text (e.g. an assistant prefix already in the prompt); false and no change when the
    // grammar rejects it.
    bool accept_text(std::string_view text);
    bool can_end() const;  // the text so far is complete
    // Complete, and nothing may follow (only an end-of-generation token), or, for a grammar whose end()
    // is only_whitespace_may_follow, only whitespace: the generation ends here.
    bool must_end() const;
    bool active() const { return active_; }  // false: a lazy constraint before its trigger (or given up)

private:
    void watch_for_trigger(int32_t token);

    std::unique_ptr<grammar::GrammarMatcher> matcher_;
    GrammarEnd end_ = GrammarEnd::nothing_may_follow;
    std::shared_ptr<const GrammarVocabulary> vocabulary_;
    GrammarTrigger trigger_;
    bool active_ = true;
    bool given_up_ = false;
    std::string pending_;  // lazy: the text so far (at_start), or its last trigger.size() - 1 bytes
};

// The process-wide cache of token masks shared by the generations that use the same grammar on the same
// vocabulary (docs/constrained-output.md, "Performance"): least recently used masks are evicted past
// `capacity` bytes (default 64 MiB; 0 disables it). Thread-safe.
struct GrammarMaskCacheStats {
    size_t bytes = 0;
    size_t entries = 0;
    size_t capacity = 0;
};
GrammarMaskCacheStats grammar_mask_cache_stats();
void set_grammar_mask_cache_capacity(size_t bytes);
void clear_grammar_mask_cache();

}  // namespace kvstash
