// Test helper: everything a scheduler job's channel delivers, collected until it is done.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kvstash/state.h"
#include "server/sequence.h"

namespace kvstash::server {

struct Served {
    std::map<int, std::string> text;
    std::map<int, std::vector<double>> logprobs;
    std::map<int, std::string> finish;
    Usage usage;
    std::shared_ptr<State> state;
    std::string error;
};

inline Served collect(RequestChannel& channel) {
    Served out;
    std::vector<ChannelEvent> events;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
    while (std::chrono::steady_clock::now() < deadline) {
        events.clear();
        channel.wait(events, std::chrono::milliseconds(200));
        for (ChannelEvent& e : events) {
            switch (e.kind) {
                case ChannelEvent::Kind::piece:
                    out.text[e.choice] += e.text;
                    if (e.logprob) out.logprobs[e.choice].push_back(e.logprob->logprob);
                    break;
                case ChannelEvent::Kind::finish: out.finish[e.choice] = e.finish_reason; break;
                case ChannelEvent::Kind::done:
                    out.usage = e.usage;
                    out.state = e.state;
                    return out;
                case ChannelEvent::Kind::error: out.error = e.message; return out;
            }
        }
    }
    out.error = "timed out";
    return out;
}

}  // namespace kvstash::server
