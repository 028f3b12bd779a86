// State files: a State saved to disk and loaded back — in this process or another, on this machine or
// another — continuing bit-exactly (with the default kv_type = same).
//
//   kvstash::save_state(state, "book.kvs");                 // atomic: temp file + fsync + rename
//   kvstash::State restored = kvstash::load_state(*model, "book.kvs");
//
// A file is bound to its model by a fingerprint of the weights and tokenizer (not by a name): loading
// it with another model — even one with identical shapes — is refused. The format is versioned and
// documented in docs/state-format.md. For models with recurrent layers (Mamba, hybrids) the file also
// holds the recurrent state (exact f32, whatever file_kv_type says), its checkpoints and any tokens
// still waiting to be evaluated again after a truncate (format version 2).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvstash/model.h"
#include "kvstash/state.h"

namespace kvstash {

class AdapterSet;  // kvstash/adapter.h

struct SaveOptions {
    // The KV section's type in the file: empty or the State's own type (f16, f32 or q8_0): continuation is
    // bit-exact; KvType::q8_0 for an f16/f32 cache: 8-bit blocks, about half of f16: smaller, but
    // continuation is NOT bit-exact any more. Any other type is Error(invalid_argument).
    std::optional<KvType> file_kv_type = std::nullopt;
    bool compress = false;  // zstd per section
};

// Throws Error(io) naming the path on any write failure (disk full included); the previous file at
// `path`, if any, is then left intact.
void save_state(const State& state, const std::string& path, const SaveOptions& options = {});
// The same, with `session` (non-empty, at most 256 MiB) saved beside the state as the ancillary
// 'session' section: Session::save puts a chat's messages and turn boundaries there (UTF-8 JSON).
// Readers that do not ask for it (load_state, `kvstash generate --state`) skip it, so a session file
// is also a plain state file.
void save_state(const State& state, const std::string& path, const SaveOptions& options, std::string_view session);

// Throws Error(bad_format) for a file that is not a state file, is truncated or fails a checksum (the
// message names the section); Error(invalid_argument) when it belongs to another model (message names
// both fingerprints); Error(unsupported) for a newer format version or an unknown option; Error(io) when
// the file cannot be opened or mapped. A file saved with file_kv_type = q8_0 loads into the State's own
// f16/f32 cache type, with values within the q8_0 step of the originals. A State restores the file's
// cache type (a q8_0 cache's file gives a q8_0 State, exactly: docs/kv-cache.md).
State load_state(const Model& model, const std::string& path);
// The same, and the file's 'session' section (checksum verified): nullopt when it has none.
State load_state(const Model& model, const std::string& path, std::optional<std::string>* session);

struct LoadOptions {
    // The adapter set the state is to continue under (kvstash/adapter.h); null = none. A file saved
    // under another set (or under adapters when this is none, or none when this is a set) is refused
    // with Error(invalid_argument): "... was saved under adapters ..." (docs/adapters.md).
    std::shared_ptr<const AdapterSet> adapters = nullptr;
};
// load_state under adapters: the State gets options.adapters.
State load_state(const Model& model, const std::string& path, const LoadOptions& options,
                 std::optional<std::string>* session = nullptr);

struct StateFileInfo {
    uint32_t format_version = 0;
    std::string model_fingerprint;       // hex; the model + adapters fingerprint when saved under adapters
    std::string base_model_fingerprint;  // hex of the model alone when saved under adapters; else empty
    std::string model_name;              // informational (general.name at save time)
    int64_t n_tokens = 0;
    int64_t n_ctx = 0;
    KvType kv_type = KvType::f16;  // KV as stored: f16, f32 or q8_0
    bool lossy_kv = false;         // stored as q8_0: loads into f16/f32, continuation close but NOT bit-exact
    // The numerics that computed the KV ("epoch 1, avx2": the kernels' epoch and path, docs/state-format.md;
    // "unknown (...)" for files saved before they were recorded), and whether the KV is bitwise what this
    // process computes for its tokens (same numerics, stored exactly). When not, the state loads and
    // continues closely, but not bit-identically with recomputing here, and the prefix cache never takes it.
    std::string numerics;
    bool exact_here = false;
    bool compressed = false;
    bool has_logits = false;
    bool has_sampler = false;
    bool has_session = false;  // a chat session (messages) is saved beside the state
    uint64_t file_bytes = 0;
    uint64_t kv_bytes = 0;  // KV payload as stored
    // Format version 2: tokens whose KV / recurrent state the file holds (< n_tokens when the state was
    // saved after a truncate of a recurrent model: the rest are evaluated again by the next eval).
    int64_t n_evaluated = 0;
    int64_t n_recurrent_layers = 0;
    uint64_t recurrent_state_bytes = 0;         // one recurrent state (f32), 0 without recurrent layers
    uint64_t recurrent_stored_bytes = 0;        // the recurrent state and checkpoints as stored
    std::vector<int64_t> checkpoint_positions;  // ascending (read unless a checksum failed)
    // Format version 3 (sliding-window layers, Gemma 3): the model's window, and the loaded State's
    // State::truncate_floor(): truncating to fewer tokens evaluates everything again from position 0.
    int64_t sliding_window = 0;
    int64_t truncate_floor = 0;
    bool checksums_ok = false;   // only meaningful when verified
    std::string checksum_error;  // when verified and !checksums_ok: the first section that failed
};

// What inspect_state_file reads beyond the header and the meta section.
enum class Checksums {
    skip,    // only the header, the section table and the meta section (fast; checksums_ok stays false)
    verify,  // also every section's checksum
};
// Reads the header, section table and meta section (and, with Checksums::verify, every section's
// checksum) without needing the model. Throws as load_state for a malformed file; a failed section
// checksum under verify is reported in checksums_ok / checksum_error instead.
StateFileInfo inspect_state_file(const std::string& path, Checksums checksums);

// The numerics this process computes with, as StateFileInfo::numerics names them ("epoch 1, avx2").
std::string process_numerics();

// The model's fingerprint as stored in state files (hex). Computed once per model file and cached by
// file identity (device, inode, size, mtime) in memory.
std::string model_fingerprint(const Model& model);

}  // namespace kvstash
