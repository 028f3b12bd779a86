// kvstash command-line interface. stdout carries only results; diagnostics and progress go to stderr.
//
// Exit codes: 0 success, 1 internal error, 2 bad usage (flags, values), 3 bad input (missing,
// malformed, unsupported or special file), 4 input too long for the context, 5 cannot write an output
// (full disk, no permission, read-only or special target; any previous file there is unchanged).
#include <iostream>

#include "kvstash/commands.h"
#include "kvstash/error.h"

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

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{
        "kvstash: a model's state after reading some text is a value you can keep.\n"
        "Runs Llama-family GGUF models on the CPU with bit-exact, batch-invariant logits."};
    app.footer(
        "Exit codes: 0 ok, 1 internal error, 2 bad usage, 3 bad input file, 4 input too long for the context,\n"
        "5 cannot write an output file (full disk, no permission).\n"
        "Run 'kvstash SUBCOMMAND --help' for the options of each subcommand.");
    app.require_subcommand(1);
    kvstash::cli::Action action;
    kvstash::cli::register_info(app, action);
    kvstash::cli::register_tokenize(app, action);
    kvstash::cli::register_generate(app, action);
    kvstash::cli::register_chat(app, action);
    kvstash::cli::register_prefill(app, action);
    kvstash::cli::register_state(app, action);
    kvstash::cli::register_perplexity(app, action);
    kvstash::cli::register_serve(app, action);
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
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
