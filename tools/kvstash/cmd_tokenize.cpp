#include <iostream>
#include <memory>

#include "kvstash/commands.h"
#include "kvstash/common.h"
#include "kvstash/model.h"
#include "kvstash/shared_flags.h"
#include "kvstash/tokenizer.h"

namespace kvstash::cli {

void register_tokenize(CLI::App& root, Action& action) {
    struct Options {
        std::string model_path, prompt, file;
    };
    auto o = std::make_shared<Options>();
    auto* cmd = root.add_subcommand("tokenize", "Print the token ids of a text, one line, space-separated");
    add_model_option(*cmd, o->model_path);
    const PromptFlags text = add_prompt_flags(*cmd, o->prompt, o->file);
    cmd->callback([&action, o, text] {
        if (!text.given()) {
            std::optional<std::string> piped = piped_prompt();
            if (!piped) throw CLI::RequiredError("one of -p/--prompt, -f/--file or text on standard input");
            o->prompt = std::move(*piped);
        }
        action = [o] {
            auto model = load_model(o->model_path);
            const std::string text = o->file.empty() ? o->prompt : read_text_file(o->file);
            const auto ids = model->tokenizer().encode(text, AddSpecial::yes, ParseSpecial::yes);
            for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? " " : "") << ids[i];
            std::cout << "\n";
            return 0;
        };
    });
}

}  // namespace kvstash::cli
