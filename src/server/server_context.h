// What every route handler needs: the model, the scheduler that owns evaluation, the named states and
// the counters. Built once by HttpServer; handlers only read the pointers.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "kvstash/chat.h"
#include "kvstash/grammar.h"
#include "kvstash/model.h"
#include "server/metrics.h"
#include "server/named_states.h"
#include "server/scheduler.h"
#include "server/server_options.h"
#include "server/state_store.h"  // the default NamedStates (tests build it directly)

namespace kvstash::server {

struct ServerContext {
    std::shared_ptr<const Model> model;
    ServerOptions options;
    std::string model_id;                       // the model file's name without .gguf
    std::optional<ChatTemplate> chat_template;  // none: /v1/chat/completions answers 400 with why
    std::string chat_template_error;
    Metrics metrics;
    std::unique_ptr<NamedStates> states;   // StateStore, or RedisStateStore with --state-store
    std::unique_ptr<Scheduler> scheduler;  // last: its thread uses the members above

    // The vocabulary's byte trie for constrained output, built by the first request that needs it.
    std::shared_ptr<const GrammarVocabulary> grammar_vocabulary() {
        std::call_once(grammar_vocabulary_once_,
                       [this] { grammar_vocabulary_ = GrammarVocabulary::build(model->tokenizer()); });
        return grammar_vocabulary_;
    }

private:
    std::once_flag grammar_vocabulary_once_;
    std::shared_ptr<const GrammarVocabulary> grammar_vocabulary_;
};

}  // namespace kvstash::server
