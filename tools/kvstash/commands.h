// Each subcommand registers itself on the root app and sets `action` when it is the one chosen.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace kvstash::cli {

using Action = std::function<int()>;

void register_info(CLI::App& root, Action& action);
void register_perplexity(CLI::App& root, Action& action);
void register_generate(CLI::App& root, Action& action);
void register_tokenize(CLI::App& root, Action& action);
void register_chat(CLI::App& root, Action& action);
void register_prefill(CLI::App& root, Action& action);
void register_state(CLI::App& root, Action& action);
void register_serve(CLI::App& root, Action& action);
void register_pull(CLI::App& root, Action& action);
void register_list(CLI::App& root, Action& action);
void register_rm(CLI::App& root, Action& action);
void register_ps(CLI::App& root, Action& action);  // kvstash ps: a running server's loaded models

}  // namespace kvstash::cli
