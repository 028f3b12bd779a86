// A unit of work handed from an HTTP handler to the scheduler: evaluate a prompt (after a prefix-cache
// lookup, or after a named state), then either generate n choices or hand the prefilled state back.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvstash/adapter.h"
#include "kvstash/grammar.h"
#include "kvstash/sampler.h"
#include "kvstash/state.h"
#include "server/channel.h"
#include "server/job_speculation.h"

namespace kvstash::server {

struct GenerationJob {
    enum class Kind { complete, prefill };
    Kind kind = Kind::complete;
    std::vector<int32_t> prompt;  // tokens to evaluate: the whole prompt, or what follows `base`
    std::optional<State> base;    // a fork of a named state to continue from (no prefix-cache lookup then)
    std::shared_ptr<const AdapterSet> adapters;  // "adapter": the set to compute under (null: none)
    int n = 1;                                   // choices; choice i samples with seed + i
    SamplerParams sampling;
    int64_t max_tokens = 16;
    std::vector<std::string> stop;
    int top_logprobs = -1;  // < 0: no logprobs; else the number of alternatives per token
    // Constrained output (response_format json_object / json_schema, grammar): each choice gets its own
    // GrammarConstraint over `grammar_vocabulary`. Null: unconstrained.
    std::shared_ptr<const Grammar> grammar;
    std::shared_ptr<const GrammarVocabulary> grammar_vocabulary;
    // Non-empty text: the grammar is lazy, off until this trigger appears (tool_choice "auto").
    GrammarTrigger grammar_trigger;
    // With tools (tool_choice other than none): how the replies' calls are read (server/openai_response.h).
    ToolCallFormat tool_call_format = ToolCallFormat::none;
    JobSpeculation speculation;
    std::shared_ptr<RequestChannel> channel = std::make_shared<RequestChannel>();
};

}  // namespace kvstash::server
