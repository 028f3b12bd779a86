#include "kvstash/shared_flags.h"

#include "kvstash/common.h"
#include "kvstash/error.h"

namespace kvstash::cli {
namespace {

CLI::Option* add_file_option(CLI::App& cmd, std::string& file) {
    // No CLI::ExistingFile check: a missing file is bad input (exit 3, from the read), not bad usage (2).
    return cmd.add_option("-f,--file", file,
                          "read the text from a file ('-': standard input; text piped in without -p or -f is "
                          "read too)");
}

}  // namespace

PromptFlags add_prompt_flags(CLI::App& cmd, std::string& prompt, std::string& file) {
    PromptFlags flags{cmd.add_option("-p,--prompt", prompt, "text"), add_file_option(cmd, file)};
    flags.prompt->excludes(flags.file);
    return flags;
}

std::optional<std::string> piped_prompt() {
    if (!stdin_is_piped()) return std::nullopt;
    std::string text = read_standard_input();
    if (text.empty()) return std::nullopt;
    return text;
}

PromptFlags add_prompt_flags(CLI::App& cmd, std::vector<std::string>& prompts, std::string& file,
                             const std::string& prompt_help) {
    return PromptFlags{cmd.add_option("-p,--prompt", prompts, prompt_help), add_file_option(cmd, file)};
}

CLI::Option* add_ctx_option(CLI::App& cmd, int64_t& n_ctx, const std::string& help) {
    return cmd.add_option("-c,--ctx,--ctx-size", n_ctx, help)->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
}

CLI::Option* add_kv_type_option(CLI::App& cmd, const std::string& name, std::string& value,
                                std::initializer_list<KvType> types, const std::string& help) {
    std::vector<std::string> names;
    std::string list;
    for (const KvType type : types) {
        names.emplace_back(kv_type_name(type));
        if (!list.empty()) list += names.size() == types.size() ? " or " : ", ";
        list += names.back();
    }
    return cmd.add_option(name, value, help + ": " + list)->check(CLI::IsMember(names));
}

CLI::Option* add_chat_template_option(CLI::App& cmd, std::string& name) {
    return cmd
        .add_option("--chat-template", name,
                    "chat template to use instead of the model's: " + join_names(ChatTemplate::names()))
        ->check(CLI::IsMember(ChatTemplate::names()));
}

ChatTemplate chat_template_from_flag(const Model& model, const std::string& name) {
    if (!name.empty()) return ChatTemplate::named(name);
    try {
        return ChatTemplate::for_model(model);
    } catch (const Error& e) {
        throw Error(e.code(), std::string(e.what()) + "; pass --chat-template NAME");
    }
}

}  // namespace kvstash::cli
