// Pieces shared by the CLI subcommands: default model location, file reading, option helpers.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "kvstash/kv_type.h"
#include "kvstash/model.h"

namespace kvstash::cli {

// $KVSTASH_MODEL, else the default model in the models folder set up by scripts/setup.sh.
std::string default_model_path();
// Adds -m/--model with the default above, and --quantize (a Hugging Face directory's weights quantized at
// load), to a subcommand.
void add_model_option(CLI::App& app, std::string& model_path);
// Model::load with the --quantize given on the command line (none by default), the load's work (repacking the
// weights) on n_threads threads (-t; 0 = all hardware threads), and its progress on stderr where that is a terminal.
std::shared_ptr<const Model> load_model(const std::string& path, int n_threads = 0);
// Adds -t/--threads (0 = all hardware threads).
void add_threads_option(CLI::App& app, int& n_threads);
// --device cpu|cuda and -ngl/--n-gpu-layers N (llama.cpp's; N > 0: the whole model on the GPU), applied
// by load_model before the model is read (engine/device.h): a usage error (exit 2) when kvstash was built
// without CUDA or no GPU is usable.
void add_device_options(CLI::App& app);
// Applies them now (load_model does it first thing; a server of several models, which loads lazily, at start).
void apply_device_flags();
// Whole file as bytes; throws kvstash::Error(io) naming the path. "-" reads standard input.
std::string read_text_file(const std::string& path);
// All of standard input, as bytes.
std::string read_standard_input();
// True when standard input is a pipe or a redirected file (not a terminal, not /dev/null).
bool stdin_is_piped();
// Throws Error(output) (exit 5) now when a state file could not be saved at `path` later (no such
// directory, no permission, not a regular file), so that no work is done for a result that would be lost.
void require_writable_output(const std::string& path);
// True when stderr is a terminal (progress lines are shown only then).
bool stderr_is_tty();
// Throws Error(invalid_argument) "<what> is not valid UTF-8 (byte N)" for malformed text.
void require_valid_utf8(std::string_view text, const std::string& what);
// A KV cache type, "f16" / "f32" -> KvType; throws Error(invalid_argument) otherwise.
KvType parse_cache_kv_type(const std::string& name);
// After loading the state file at `path`: a note on stderr when its KV is not bitwise what this process
// computes (other numerics, or q8_0), so that a user relying on bit-exactness knows to prefill again.
void warn_if_not_exact_here(const std::string& path);
// "a|b|c"
std::string join_names(const std::vector<std::string>& names);

}  // namespace kvstash::cli
