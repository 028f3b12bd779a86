#include "server/sequence.h"

#include <algorithm>
#include <numeric>

#include "engine/constrained_sample.h"
#include "kvstash/log_softmax.h"
#include "kvstash/tokenizer.h"

namespace kvstash::server {

TokenLogprob token_logprob(std::span<const float> logits, int32_t token, int top) {
    const double log_norm = log_sum_exp(logits);
    TokenLogprob out;
    out.token = token;
    out.logprob = static_cast<double>(logits[static_cast<size_t>(token)]) - log_norm;
    if (top > 0) {
        std::vector<int32_t> ids(logits.size());
        std::iota(ids.begin(), ids.end(), 0);
        const size_t k = std::min(static_cast<size_t>(top), ids.size());
        std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(),
                          [&](int32_t a, int32_t b) {
                              const float la = logits[static_cast<size_t>(a)], lb = logits[static_cast<size_t>(b)];
                              return la != lb ? la > lb : a < b;
                          });
        for (size_t i = 0; i < k; ++i)
            out.top.emplace_back(ids[i], static_cast<double>(logits[static_cast<size_t>(ids[i])]) - log_norm);
    }
    return out;
}

namespace {

void finish(Sequence& seq, const char* reason, std::string_view rest) {
    RequestChannel& channel = *seq.job->job->channel;
    if (!rest.empty()) {
        ChannelEvent piece;
        piece.choice = seq.choice;
        piece.text = std::string(rest);
        channel.push(std::move(piece));
    }
    ChannelEvent event;
    event.kind = ChannelEvent::Kind::finish;
    event.choice = seq.choice;
    event.finish_reason = reason;
    channel.push(std::move(event));
    seq.finished = true;
}

}  // namespace

void sample_step(Sequence& seq) { sample_step(seq, seq.state.last_logits(), seq.state.tokens()); }

void sample_step(Sequence& seq, std::span<const float> logits, std::span<const int32_t> history) {
    const GenerationJob& job = *seq.job->job;
    seq.next_token.reset();
    if (static_cast<int64_t>(history.size()) >= seq.state.n_ctx()) {
        finish(seq, "length", seq.stream->take_rest());
        return;
    }
    int32_t token;
    if (seq.constraint) {
        // As generate(): the grammar is complete and nothing may follow, so the choice ends here.
        if (seq.constraint->must_end()) {
            finish(seq, "stop", seq.stream->take_rest());
            return;
        }
        const auto allowed = sample_constrained(*seq.sampler, *seq.constraint, logits, history, seq.masked_logits);
        // No token can continue the grammar (it needs a character this vocabulary cannot spell): the
        // choice ends with what it has.
        if (!allowed) {
            finish(seq, "stop", seq.stream->take_rest());
            return;
        }
        token = *allowed;
    } else {
        token = seq.sampler->sample(logits, history);
    }
    if (seq.constraint) seq.constraint->accept(token);
    ++seq.generated;
    ++seq.job->usage.completion_tokens;
    const auto stop = seq.stream->push(token);
    // The logprob goes with every sampled token but an end-of-generation token that ends the choice.
    std::optional<TokenLogprob> logprob;
    if (job.top_logprobs >= 0 && stop != StopReason::end_of_generation) {
        logprob = token_logprob(logits, token, job.top_logprobs);
    }
    ChannelEvent piece;
    piece.choice = seq.choice;
    piece.logprob = std::move(logprob);
    if (stop) {
        piece.text = std::string(seq.stream->take_rest());
        if (!piece.text.empty() || piece.logprob) job.channel->push(std::move(piece));
        finish(seq, "stop", {});
        return;
    }
    const bool at_limit = seq.generated >= job.max_tokens;
    piece.text = std::string(at_limit ? seq.stream->take_rest() : seq.stream->take_ready());
    if (!piece.text.empty() || piece.logprob) job.channel->push(std::move(piece));
    if (at_limit) {
        finish(seq, "length", {});
        return;
    }
    seq.next_token = token;
}

}  // namespace kvstash::server
