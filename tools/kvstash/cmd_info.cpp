#include <iostream>
#include <memory>

#include "kvstash/commands.h"
#include "kvstash/common.h"
#include "kvstash/model.h"

namespace kvstash::cli {

void register_info(CLI::App& root, Action& action) {
    auto* cmd = root.add_subcommand("info", "Print a summary of a model's metadata");
    auto model_path = std::make_shared<std::string>();
    add_model_option(*cmd, *model_path);
    cmd->callback([&action, model_path] {
        action = [model_path] {
            auto model = load_model(*model_path);
            std::cout << model->describe();
            return 0;
        };
    });
}

}  // namespace kvstash::cli
