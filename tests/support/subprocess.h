// Runs a program to completion, capturing its exit code, stdout and stderr (for end-to-end tests).
#pragma once

#include <string>
#include <vector>

namespace kvstash::test {

struct ProcessResult {
    int exit_code = -1;  // -1 when killed by a signal (then `signal` is set)
    int signal = 0;
    std::string out;
    std::string err;
};

ProcessResult run_process(const std::vector<std::string>& argv, const std::string& stdin_text = "");

// run_process({cli_path(), args...})
ProcessResult run_cli(const std::vector<std::string>& args, const std::string& stdin_text = "");

}  // namespace kvstash::test
