// kvstash command-line interface. stdout carries only results; diagnostics and progress go to stderr.
//
// Exit codes: 0 success, 1 internal error, 2 bad usage (flags, values, unknown command), 3 bad input
// (missing, malformed, unsupported or special file), 4 input too long for the context, 5 cannot write an
// output (full disk, no permission, read-only or special target; any previous file there is unchanged),
// 6 cannot listen on the server's address (port in use, no permission).
#include <iostream>
#include <string>
#include <vector>

#include "kvstash/argv_checks.h"
#include "kvstash/commands.h"
#include "kvstash/error.h"
#include "kvstash/instruction_sets.h"
#include "kvstash_git_commit.h"  // generated at build time (cmake/git_commit.cmake)

namespace {

int exit_code_for(kvstash::ErrorCode code) {
    switch (code) {
        case kvstash::ErrorCode::invalid_argument: return 2;
        case kvstash::ErrorCode::io:
        case kvstash::ErrorCode::bad_format:
        case kvstash::ErrorCode::unsupported: return 3;
        case kvstash::ErrorCode::out_of_range: return 4;
        case kvstash::ErrorCode::internal: return 1;
        case kvstash::ErrorCode::output: return 5;
    }
    return 1;
}

// "kvstash 0.1.0 (commit 0123abcd4567, kernels avx2; available: scalar avx2)". A bad KVSTASH_ISA is
// reported in the text: --version answers whatever the environment says.
std::string version_text() {
    std::string kernels;
    try {
        const kvstash::InstructionSets sets = kvstash::instruction_sets();
        std::string isas;
        for (const std::string& isa : sets.available) isas += (isas.empty() ? "" : " ") + isa;
        kernels = "kernels " + sets.active + "; available: " + isas;
    } catch (const kvstash::Error& e) {
        kernels = std::string("no kernels: ") + e.what();
    }
    return std::string("kvstash ") + KVSTASH_VERSION + " (commit " + KVSTASH_GIT_COMMIT + ", " + kernels + ")";
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{
        "kvstash: a model's state after reading some text is a value you can keep.\n"
        "Runs Llama-family GGUF models on the CPU (or, built with CUDA, --device cuda) with bit-exact, "
        "batch-invariant logits."};
    app.footer(
        "Exit codes: 0 ok, 1 internal error, 2 bad usage, 3 bad input file (missing, malformed, unsupported),\n"
        "4 input too long for the context, 5 cannot write an output file (full disk, no permission),\n"
        "6 cannot listen on the server's address (port in use).\n"
        "Run 'kvstash SUBCOMMAND --help' for the options of each subcommand.");
    app.set_version_flag("--version", version_text, "print the version, git commit and kernel ISA, and exit");
    app.require_subcommand(1);
    // Every usage error starts as the library's errors do, whichever check found it (CLI11's own messages
    // come bare); subcommands inherit this when they are added.
    app.failure_message([](const CLI::App*, const CLI::Error& e) {
        return std::string("kvstash: error: ") + e.what() + "\nRun 'kvstash --help' or 'kvstash COMMAND --help'.\n";
    });
    kvstash::cli::Action action;
    kvstash::cli::register_info(app, action);
    kvstash::cli::register_tokenize(app, action);
    kvstash::cli::register_generate(app, action);
    kvstash::cli::register_chat(app, action);
    kvstash::cli::register_prefill(app, action);
    kvstash::cli::register_state(app, action);
    kvstash::cli::register_perplexity(app, action);
    kvstash::cli::register_serve(app, action);
    kvstash::cli::register_pull(app, action);
    kvstash::cli::register_list(app, action);
    kvstash::cli::register_rm(app, action);
    kvstash::cli::register_ps(app, action);
    std::vector<std::string> subcommands;
    for (const CLI::App* sub : app.get_subcommands({})) subcommands.push_back(sub->get_name());
    if (const auto problem = kvstash::cli::check_argv(std::vector<std::string>(argv + 1, argv + argc), subcommands)) {
        std::cerr << "kvstash: error: " << *problem << "\n";
        return 2;
    }
    // -ngl spelled so that CLI11 takes it (argv_checks.h); argv[0] kept.
    std::vector<std::string> words = kvstash::cli::normalize_argv(std::vector<std::string>(argv + 1, argv + argc));
    words.insert(words.begin(), argv[0]);
    std::vector<char*> normalized;
    for (std::string& w : words) normalized.push_back(w.data());
    try {
        app.parse(static_cast<int>(normalized.size()), normalized.data());
    } catch (const CLI::Success& e) {  // --help, --help-all, --version
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        app.exit(e);
        return 2;
    }
    try {
        return action();
    } catch (const kvstash::Error& e) {
        std::cerr << "kvstash: error: " << e.what() << "\n";
        return exit_code_for(e.code());
    } catch (const std::bad_alloc&) {
        std::cerr << "kvstash: error: out of memory\n";
        return 1;
    } catch (const std::exception& e) {
        std::cerr << "kvstash: internal error: " << e.what() << "\n";
        return 1;
    }
}
