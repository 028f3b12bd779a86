// A preset's system prompt prefilled when its model loads: one chat request of the system message alone runs
// through the model's own /v1/chat/completions handler (1 token, greedy), and the scheduler keeps its prompt
// in the prefix cache, so the first request on the preset reuses the system prompt's whole 32-token blocks
// (usage.prompt_tokens_details.cached_tokens > 0 from the first request).
#pragma once

#include <string>

#include "server/model_registry.h"

namespace kvstash::server {

// Empty when warm (or nothing to warm: no system prompt), else why not (the preset still serves, cold).
std::string warm_preset(LoadedModel& loaded, const Preset& preset);

}  // namespace kvstash::server
