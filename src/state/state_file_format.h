// The state file layout (docs/state-format.md is the byte-by-byte specification) and the internal entry
// points shared by the writer, the reader, the tests and the fuzzer.
//
// A file is a 64-byte header, a table of 64-byte section entries, then the sections, each starting at a
// multiple of 64 bytes; every other byte is zero. Integers are little-endian; floats are IEEE-754 bit
// patterns. Every section carries an XXH3-64 checksum of its stored bytes and may be zstd-compressed.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvstash/model.h"
#include "kvstash/state.h"
#include "kvstash/state_file.h"

namespace kvstash::state_file {

static_assert(std::endian::native == std::endian::little,
              "state files are read and written in place: little-endian hosts only");

inline constexpr char kMagic[8] = {'K', 'V', 'S', 'T', 'A', 'T', 'E', '\0'};
// Version 2 (recurrent state, checkpoints, evaluated count; docs/state-format.md) is what this build
// writes for models without sliding-window layers: one writer path, and every file says how many tokens
// it holds evaluated. Version 3 (models with sliding-window layers, Gemma 3) adds the trimmed KV blocks:
// the leading blocks that no position after the file's last one reads through a sliding layer store
// the global layers only (meta::n_trimmed_blocks), and the evaluated count may lag behind the tokens
// (a State truncated past its trimmed window evaluates again from 0). Version 1 files (no recurrent
// layers) and version 2 files are still read.
inline constexpr uint32_t kFormatVersion = 3;                // the newest this build writes and reads
inline constexpr uint32_t kFormatVersionWithoutSliding = 2;  // what it writes for other models
inline constexpr uint32_t kOldestReadableVersion = 1;
inline constexpr uint64_t kHeaderBytes = 64;
inline constexpr uint64_t kSectionEntryBytes = 64;
inline constexpr uint64_t kSectionAlignment = 64;  // section offsets are multiples of this
inline constexpr uint32_t kMaxSections = 64;
// A compressed section may not expand by more than this on decompression: it bounds what a small
// hostile file can make the reader allocate (writers store a section raw rather than exceed it).
inline constexpr uint64_t kMaxCompressionRatio = 256;
inline constexpr uint32_t kMaxModelNameBytes = 256;

// Header field offsets.
namespace header {
inline constexpr size_t magic = 0;                  // char[8]
inline constexpr size_t format_version = 8;         // u32
inline constexpr size_t header_bytes = 12;          // u32
inline constexpr size_t flags = 16;                 // u32, none defined (versions 1 and 2)
inline constexpr size_t section_count = 20;         // u32
inline constexpr size_t section_entry_bytes = 24;   // u32
inline constexpr size_t reserved = 28;              // u32, zero
inline constexpr size_t section_table_offset = 32;  // u64
inline constexpr size_t file_bytes = 40;            // u64
inline constexpr size_t table_checksum = 48;        // u64 XXH3-64 of the section table
inline constexpr size_t header_checksum = 56;       // u64 XXH3-64 of bytes [0, 56)
}  // namespace header

// Section entry field offsets (each entry kSectionEntryBytes long; bytes 40..63 are reserved, zero).
namespace entry {
inline constexpr size_t type = 0;           // u32 SectionType
inline constexpr size_t flags = 4;          // u32 SectionFlag bits
inline constexpr size_t offset = 8;         // u64 from the start of the file
inline constexpr size_t stored_bytes = 16;  // u64 bytes in the file
inline constexpr size_t raw_bytes = 24;     // u64 bytes after decompression (== stored_bytes when raw)
inline constexpr size_t checksum = 32;      // u64 XXH3-64 (seed 0) of the stored bytes
inline constexpr size_t reserved = 40;
}  // namespace entry

// Types with kSectionAncillary set may be skipped by a reader that does not know them; an unknown type
// without it makes the file unsupported.
enum SectionType : uint32_t {
    kSectionMeta = 1,     // model binding and shapes (required)
    kSectionTokens = 2,   // n_tokens × i32 (required)
    kSectionKv = 3,       // the KV cache in blocks (required)
    kSectionLogits = 4,   // n_vocab × f32 of the last position (optional)
    kSectionSampler = 5,  // sampler parameters and RNG (optional)
    // Version 2:
    kSectionRecurrent = 6,    // recurrent state after n_evaluated tokens, f32 (iff recurrent layers)
    kSectionCheckpoints = 7,  // n_checkpoints × i64 pos, then n_checkpoints states, f32 (iff n_checkpoints > 0)
};
inline constexpr uint32_t kLastRequiredSectionType = kSectionCheckpoints;
inline constexpr uint32_t kSectionAncillary = 0x8000'0000u;
// Ancillary sections this kvstash writes (readers that do not know them skip them).
inline constexpr uint32_t kSectionSession = kSectionAncillary | 1u;  // a chat session's messages, UTF-8 JSON
// The numerics that computed the KV (backends/cpu/runtime/numerics.h), kNumericsBytes: u32 epoch, u32 NumericsPath,
// u32 flags (kNumericsKvExact: the KV is bitwise what those numerics compute for the tokens), u32 zero.
// Written by every save since numerics epoch 1; absent in older files (numerics unknown). Ancillary so
// that older readers still read newer files.
inline constexpr uint32_t kSectionNumerics = kSectionAncillary | 2u;
inline constexpr uint64_t kNumericsBytes = 16;
inline constexpr uint32_t kNumericsKvExact = 1u << 0;
// Bound on the session section's raw size: it holds the messages of one context's worth of tokens.
inline constexpr uint64_t kMaxSessionBytes = uint64_t{256} << 20;

enum SectionFlag : uint32_t {
    kFlagZstd = 1u << 0,  // stored bytes are one or more zstd frames
};
inline constexpr uint32_t kKnownSectionFlags = kFlagZstd;

// Meta section field offsets: a fixed part (kMetaFixedBytesV1 / V2 by format version), then name_bytes
// of general.name. Version 2 keeps version 1's fields and adds the ones below `reserved`.
namespace meta {
inline constexpr size_t fingerprint = 0;       // 16 bytes, XXH3-128 canonical (big-endian)
inline constexpr size_t n_vocab = 16;          // i64
inline constexpr size_t n_layer = 24;          // i64
inline constexpr size_t n_embd_kv = 32;        // i64
inline constexpr size_t n_ctx = 40;            // i64
inline constexpr size_t n_tokens = 48;         // i64
inline constexpr size_t kv_block_tokens = 56;  // u32 (32)
inline constexpr size_t cache_type = 60;       // u32 ggml type of the State's cache: 0 f32, 1 f16
inline constexpr size_t kv_encoding = 64;      // u32 ggml type of the stored rows: 0 f32, 1 f16, 8 q8_0
inline constexpr size_t name_bytes = 68;       // u32
inline constexpr size_t reserved_v1 = 72;      // version 1: 56 bytes, zero
// Version 2 only:
inline constexpr size_t n_kv_layers = 72;           // i64 layers in the KV section (attention layers)
inline constexpr size_t n_evaluated = 80;           // i64 tokens the KV / recurrent state hold (<= n_tokens)
inline constexpr size_t n_recurrent_layers = 88;    // i64
inline constexpr size_t conv_floats = 96;           // i64 per recurrent layer
inline constexpr size_t scan_floats = 104;          // i64 per recurrent layer
inline constexpr size_t n_checkpoints = 112;        // i64
inline constexpr size_t checkpoint_interval = 120;  // i64 StateOptions::checkpoint_interval
inline constexpr size_t checkpoint_memory = 128;    // u64 StateOptions::checkpoint_memory
// Version 2: zero from here to base_fingerprint. Version 3 only (in version 2's reserved bytes; the
// fixed part keeps its 192 bytes):
inline constexpr size_t reserved_v2 = 136;
inline constexpr size_t sliding_window = 136;      // i64 the model's window (> 0)
inline constexpr size_t n_global_kv_layers = 144;  // i64 KV layers that are not sliding-window layers
// i64 leading KV blocks stored trimmed: K and V each [n_global_kv_layers][kv_block_tokens][row], the
// global layers in layer order. At most (n_evaluated - sliding_window + 1) / kv_block_tokens (so the
// state continues after n_evaluated), and 0 when n_evaluated < n_tokens.
inline constexpr size_t n_trimmed_blocks = 152;
// Versions 2 and 3: the model's own fingerprint when the State was computed under adapters (then
// `fingerprint` above is the combined model + adapter-set one, docs/adapters.md); zero without adapters.
inline constexpr size_t base_fingerprint = 160;  // 16 bytes
inline constexpr size_t reserved_tail = 176;     // 16 bytes, zero (versions 2 and 3)
}  // namespace meta
inline constexpr uint64_t kMetaFixedBytesV1 = 128;
inline constexpr uint64_t kMetaFixedBytesV2 = 192;  // versions 2 and 3
inline constexpr uint64_t meta_fixed_bytes(uint32_t version) {
    return version == 1 ? kMetaFixedBytesV1 : kMetaFixedBytesV2;
}

// Sampler section field offsets: a fixed part, then n_logit_bias × {i32 id, f32 bias}.
namespace sampler {
inline constexpr size_t temperature = 0;         // f32
inline constexpr size_t top_k = 4;               // i32
inline constexpr size_t top_p = 8;               // f32
inline constexpr size_t min_p = 12;              // f32
inline constexpr size_t repeat_penalty = 16;     // f32
inline constexpr size_t repeat_last_n = 20;      // i32
inline constexpr size_t presence_penalty = 24;   // f32
inline constexpr size_t frequency_penalty = 28;  // f32
inline constexpr size_t seed = 32;               // u64
inline constexpr size_t rng = 40;                // u64[4] xoshiro256** state
inline constexpr size_t n_logit_bias = 72;       // u32
inline constexpr size_t reserved = 76;           // u32, zero
}  // namespace sampler
inline constexpr uint64_t kSamplerFixedBytes = 80;
inline constexpr uint64_t kLogitBiasEntryBytes = 8;

template <typename T>
T load_le(const uint8_t* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
}
template <typename T>
void store_le(uint8_t* p, T v) {
    std::memcpy(p, &v, sizeof(T));
}

// One entry of the section table, as the writer fills it and the reader finds it: kSectionEntryBytes on
// disk, fields at the entry:: offsets, bytes from entry::reserved on zero.
struct SectionEntry {
    uint32_t type = 0;   // SectionType (or an ancillary type)
    uint32_t flags = 0;  // SectionFlag bits
    uint64_t offset = 0;
    uint64_t stored_bytes = 0;
    uint64_t raw_bytes = 0;
    uint64_t checksum = 0;
    bool compressed() const { return (flags & kFlagZstd) != 0; }
};

// Writes `s` into the kSectionEntryBytes at `e` (the reserved bytes are left as they are: zero).
inline void store_section_entry(uint8_t* e, const SectionEntry& s) {
    store_le<uint32_t>(e + entry::type, s.type);
    store_le<uint32_t>(e + entry::flags, s.flags);
    store_le<uint64_t>(e + entry::offset, s.offset);
    store_le<uint64_t>(e + entry::stored_bytes, s.stored_bytes);
    store_le<uint64_t>(e + entry::raw_bytes, s.raw_bytes);
    store_le<uint64_t>(e + entry::checksum, s.checksum);
}

inline SectionEntry load_section_entry(const uint8_t* e) {
    SectionEntry s;
    s.type = load_le<uint32_t>(e + entry::type);
    s.flags = load_le<uint32_t>(e + entry::flags);
    s.offset = load_le<uint64_t>(e + entry::offset);
    s.stored_bytes = load_le<uint64_t>(e + entry::stored_bytes);
    s.raw_bytes = load_le<uint64_t>(e + entry::raw_bytes);
    s.checksum = load_le<uint64_t>(e + entry::checksum);
    return s;
}

uint64_t align_up(uint64_t n, uint64_t alignment);
std::string section_name(uint32_t type);  // "meta", "kv", ... or "type 0x80000007"

// Bytes of one stored KV row of n_embd_kv elements: f16/f32 as is; q8_0 in ceil(n / 32) blocks of 34
// bytes, the last block zero-padded.
uint64_t kv_row_bytes(uint32_t encoding, int64_t n_embd_kv);

// Throws Error(code) with `what` if the sampler state is not one a Sampler accepts (see sampler.h) or
// has more logit_bias entries than n_vocab or one outside [0, n_vocab).
void validate_sampler_state(const SamplerState& sampler, int64_t n_vocab, ErrorCode code, const std::string& what);

// Destination of an encoded file: bytes at absolute offsets (in increasing order, never overlapping);
// finish() fixes the total length (gaps read as zero).
class ByteSink {
public:
    virtual ~ByteSink() = default;
    virtual void write_at(uint64_t offset, const uint8_t* data, size_t n) = 0;
    virtual void finish(uint64_t total_bytes) = 0;
};

// The writer: encodes `state` into `sink`. Throws Error(invalid_argument) for a state that cannot be
// saved (no model, a sampler the reader would refuse); sink errors propagate.
// A non-empty `session` is written as the ancillary 'session' section.
void encode_state(const State& state, const SaveOptions& options, ByteSink& sink, std::string_view session = {});
std::vector<uint8_t> encode_state_to_memory(const State& state, const SaveOptions& options = {});

// Recomputes every checksum of an encoded file in place (each section's, then the table's and the
// header's), for tests and the fuzzer that edit files on purpose. Parts outside the file are skipped.
void rewrite_checksums(std::span<uint8_t> file);

// The reader over bytes already in memory (a mapped file, or the fuzzer's input); `display_name` is
// used in error messages.
// With `session`, also returns the 'session' section's bytes (nullopt when the file has none).
// `adapters`: the set the State is to be computed under (null = none); the file must have been saved under
// the same one.
State decode_state(const Model& model, std::span<const uint8_t> file, const std::string& display_name,
                   std::optional<std::string>* session = nullptr, std::shared_ptr<const AdapterSet> adapters = {});
StateFileInfo inspect_state_bytes(std::span<const uint8_t> file, const std::string& display_name, Checksums checksums);

}  // namespace kvstash::state_file
