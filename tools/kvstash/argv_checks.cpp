#include "kvstash/argv_checks.h"

#include <algorithm>
#include <array>
#include <utility>

namespace kvstash::cli {
namespace {

size_t edit_distance(std::string_view a, std::string_view b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
        size_t diagonal = row[0];
        row[0] = i;
        for (size_t j = 1; j <= b.size(); ++j) {
            const size_t up = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
            diagonal = up;
        }
    }
    return row[b.size()];
}

// llama.cpp flags with no counterpart here, and why.
// Without this entry CLI11 would read "-fa" as "-f a" (the prompt from a file named "a").
constexpr std::string_view kFlashAttention =
    "kvstash's attention always reads the cache in key chunks with a running softmax, never the whole score "
    "matrix (what llama.cpp's flash attention does), so there is nothing to turn on or off; drop it";
constexpr std::array<std::pair<std::string_view, std::string_view>, 3> kRefused{{
    {"-ctk", "the KV cache type is --kv-type (f16, f32 or q8_0; one type for K and V)"},
    {"-fa", kFlashAttention},
    {"--flash-attn", kFlashAttention},
}};

}  // namespace

std::optional<std::string> closest_name(std::string_view word, const std::vector<std::string>& names) {
    std::optional<std::string> best;
    size_t best_distance = 3;  // at most 2 edits
    for (const std::string& name : names) {
        const size_t d = edit_distance(word, name);
        if (d < best_distance && 2 * d < std::max<size_t>(word.size(), 2)) {
            best_distance = d;
            best = name;
        }
    }
    return best;
}

std::optional<std::string> check_argv(const std::vector<std::string>& args,
                                      const std::vector<std::string>& subcommands) {
    for (const std::string& arg : args) {
        if (arg == "--") break;  // what follows is text, not flags
        const std::string_view name = std::string_view(arg).substr(0, arg.find('='));
        for (const auto& [flag, why] : kRefused) {
            if (name == flag) {
                std::string message = "'";  // built by appends: GCC 12 warns (-Wrestrict) on "..." + string here
                message.append(flag).append("' is a llama.cpp flag kvstash does not take: ").append(why);
                return message;
            }
        }
    }
    // The first word that is not a flag must be a subcommand (the root takes no positional arguments).
    if (args.empty() || args[0].empty() || args[0][0] == '-') return std::nullopt;
    if (std::find(subcommands.begin(), subcommands.end(), args[0]) != subcommands.end()) return std::nullopt;
    std::string message = "unknown command '" + args[0] + "'";
    if (const auto near = closest_name(args[0], subcommands)) message += "; did you mean '" + *near + "'?";
    message += " (commands: ";
    for (size_t i = 0; i < subcommands.size(); ++i) message += (i ? ", " : "") + subcommands[i];
    return message + "; run 'kvstash --help')";
}

std::vector<std::string> normalize_argv(const std::vector<std::string>& args) {
    std::vector<std::string> out;
    out.reserve(args.size());
    bool text = false;
    for (const std::string& arg : args) {
        if (arg == "--") text = true;
        // CLI11 takes one-letter names after a single dash only: llama.cpp's -ngl becomes its long form.
        if (!text && (arg == "-ngl" || arg.rfind("-ngl=", 0) == 0)) {
            out.push_back("--n-gpu-layers" + arg.substr(4));
        } else {
            out.push_back(arg);
        }
    }
    return out;
}

}  // namespace kvstash::cli
