// Checks on the raw command line that CLI11 cannot phrase well: an unknown subcommand (named, with the
// closest known one suggested) and llama.cpp flags that have no meaning here (-fa: its attention is always
// chunked with a running softmax), each refused with a message that says what to do instead; llama.cpp's
// -ngl N, which CLI11 cannot name (one letter after a single dash), spelled --n-gpu-layers for it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvstash::cli {

// The known name closest to `word` by edit distance, if close enough to be a likely typo (at most 2 edits,
// and fewer than half its letters).
std::optional<std::string> closest_name(std::string_view word, const std::vector<std::string>& names);

// A usage error message for argv (without argv[0]), or nullopt when it passes. `subcommands` are the
// names the root app knows.
std::optional<std::string> check_argv(const std::vector<std::string>& args,
                                      const std::vector<std::string>& subcommands);

// args with "-ngl" / "-ngl=N" as "--n-gpu-layers" (words after "--" untouched).
std::vector<std::string> normalize_argv(const std::vector<std::string>& args);

}  // namespace kvstash::cli
