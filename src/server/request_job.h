// From a parsed request (server/openai_request.h) to a GenerationJob for the scheduler: the prompt is
// rendered with the chat template and tokenized here, in the handler thread; the named state is forked;
// the token ids and lengths are checked against the model and the context. Errors are ApiErrors: 400 for
// what the request asks (a token id outside the vocabulary, a prompt longer than the context), 404 for an
// unknown state, 500 when a state cannot be loaded.
#pragma once

#include <memory>

#include "server/job.h"
#include "server/openai_request.h"
#include "server/server_context.h"

namespace kvstash::server {

// The adapter set a request that names none runs under: ServerOptions::default_adapter's (a preset's), or null.
std::shared_ptr<const AdapterSet> default_adapters(const ServerContext& ctx);

// The parser's limits from the server's options.
RequestLimits request_limits(const ServerContext& ctx);

std::unique_ptr<GenerationJob> build_completion_job(const CompletionRequest& request, ServerContext& ctx);
// A prefill job: evaluates the prompt and hands the state back.
std::unique_ptr<GenerationJob> build_prefill_job(const PrefillRequest& request, ServerContext& ctx);

}  // namespace kvstash::server
