// The options several subcommands declare alike, declared here once: -p/--prompt with -f/--file (the
// text to read), --ctx (the State's context) and --chat-template (with the advice the CLI adds when the
// model's own template cannot be used). The cache flags are in cache_flags.h, the sampling flags in
// sampling_options.h, -m and -t in common.h. `perplexity --ctx` is another concept under the same
// name (tokens per scored chunk, at least 2) and stays with its command.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "kvstash/chat.h"
#include "kvstash/kv_type.h"
#include "kvstash/model.h"

namespace kvstash::cli {

struct PromptFlags {
    CLI::Option* prompt = nullptr;
    CLI::Option* file = nullptr;
    bool given() const { return prompt->count() > 0 || file->count() > 0; }
};

// -p/--prompt TEXT or -f/--file PATH (an existing file), not both. The caller decides whether one is
// required (see PromptFlags::given).
PromptFlags add_prompt_flags(CLI::App& cmd, std::string& prompt, std::string& file);
// The text piped to standard input, for a command given neither -p nor -f (`echo hi | kvstash generate`):
// nullopt when standard input is a terminal or /dev/null, or holds nothing.
std::optional<std::string> piped_prompt();
// generate's form: -p repeatable (`prompt_help` says what several mean); -f adds the file's text as
// one more prompt.
PromptFlags add_prompt_flags(CLI::App& cmd, std::vector<std::string>& prompts, std::string& file,
                             const std::string& prompt_help);

// --ctx N: context size in tokens, 0 = the model's training context. Returns the option for
// command-specific additions (e.g. capture_default_str).
CLI::Option* add_ctx_option(CLI::App& cmd, int64_t& n_ctx,
                            const std::string& help = "context size in tokens (0 = the model's)");

// `name` (e.g. "--kv-type") taking one of `types` by its kv_type_name; the help is `help` followed by the
// accepted names ("...: f16 or f32").
CLI::Option* add_kv_type_option(CLI::App& cmd, const std::string& name, std::string& value,
                                std::initializer_list<KvType> types, const std::string& help);

// --chat-template NAME, one of ChatTemplate::names().
CLI::Option* add_chat_template_option(CLI::App& cmd, std::string& name);
// The template --chat-template names, else the model's own; when the model's cannot be used, the
// library's error (same code) with the CLI's advice: pass --chat-template NAME.
ChatTemplate chat_template_from_flag(const Model& model, const std::string& name);

}  // namespace kvstash::cli
