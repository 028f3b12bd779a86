// The state file reader's internals, shared by state_file_layout.cpp (is the file well-formed: header,
// section table, meta) and state_file_read.cpp (its contents into a State). Not a public interface.
#pragma once

#include <zstd.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backends/cpu/runtime/numerics.h"
#include "kv/recurrent_state.h"
#include "kvstash/error.h"
#include "state/fingerprint.h"
#include "state/state_file_format.h"

namespace kvstash::state_file {

inline constexpr int kZstdWindowLogMax = 24;  // a hostile frame cannot make the decoder allocate a larger window

inline std::string hex64(uint64_t v) {
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string s = "0x";
    for (int shift = 60; shift >= 0; shift -= 4) s += kDigits[(v >> shift) & 15];
    return s;
}

struct Meta {
    ModelFingerprint fingerprint;       // the model's, or model + adapters' (base_fingerprint set)
    ModelFingerprint base_fingerprint;  // all zero: no adapters (always so in version 1)
    int64_t n_vocab = 0, n_layer = 0, n_embd_kv = 0, n_ctx = 0, n_tokens = 0;
    uint32_t cache_type = 0, kv_encoding = 0;
    std::string model_name;
    // Version 2 (a version 1 file: n_kv_layers = n_layer, n_evaluated = n_tokens, no recurrent state,
    // the default checkpoint options).
    int64_t n_kv_layers = 0, n_evaluated = 0;
    RecurrentShape recurrent;
    int64_t n_checkpoints = 0;
    int64_t checkpoint_interval = StateOptions{}.checkpoint_interval;
    uint64_t checkpoint_memory = StateOptions{}.checkpoint_memory;
    // Version 3 (0 before: no trimmed blocks).
    int64_t sliding_window = 0, n_global_kv_layers = 0, n_trimmed_blocks = 0;

    uint64_t recurrent_bytes() const { return static_cast<uint64_t>(recurrent.floats()) * sizeof(float); }
};

// The file's numerics section (backends/cpu/runtime/numerics.h): who computed the KV, and whether exactly.
struct FileNumerics {
    Numerics numerics;      // {0, unknown}: not recorded (a file from before numerics epochs)
    bool kv_exact = false;  // the writer's flag: the KV is bitwise what `numerics` computes
};

// Reads one file's bytes; every failure is an Error naming the file.
class Reader {
public:
    Reader(std::span<const uint8_t> file, std::string name) : file_(file), name_(std::move(name)) {}

    [[noreturn]] void fail(ErrorCode code, const std::string& why) const {
        throw Error(code, "state file '" + name_ + "': " + why);
    }
    [[noreturn]] void corrupt(const std::string& why) const { fail(ErrorCode::bad_format, why); }
    const std::string& name() const { return name_; }
    std::span<const uint8_t> bytes(const SectionEntry& s) const { return file_.subspan(s.offset, s.stored_bytes); }

    void parse_layout();
    const SectionEntry* find(uint32_t type) const {
        for (const SectionEntry& s : sections_) {
            if (s.type == type) return &s;
        }
        return nullptr;
    }
    const std::vector<SectionEntry>& sections() const { return sections_; }
    uint32_t version() const { return version_; }

    void verify_checksum(const SectionEntry& s) const {
        const uint64_t actual = XXH3_64bits(file_.data() + s.offset, s.stored_bytes);
        if (actual != s.checksum) checksum_mismatch(s, actual);
    }
    [[noreturn]] void checksum_mismatch(const SectionEntry& s, uint64_t actual) const {
        corrupt("checksum mismatch in section '" + section_name(s.type) + "' (stored " + hex64(s.checksum) +
                ", computed " + hex64(actual) + "): the file is corrupt");
    }
    // A small section's raw bytes (checksum verified, decompressed if needed).
    std::vector<uint8_t> read_section(const SectionEntry& s) const;
    Meta read_meta() const;
    FileNumerics read_numerics() const;

private:
    void parse_entries(uint64_t table_offset, uint32_t count);
    void check_coverage(uint64_t table_offset, uint64_t table_bytes) const;

    std::span<const uint8_t> file_;
    std::string name_;
    uint32_t version_ = 0;
    std::vector<SectionEntry> sections_;
};

struct ZstdDCtxFree {
    void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
};

// Decompresses one zstd frame into caller buffers, piece by piece, never producing more than asked.
class ZstdStream {
public:
    ZstdStream(const Reader& reader, const SectionEntry& s) : reader_(reader), section_(s), dctx_(ZSTD_createDCtx()) {
        if (!dctx_) throw Error(ErrorCode::internal, "cannot create a zstd decompression context");
        ZSTD_DCtx_setParameter(dctx_.get(), ZSTD_d_windowLogMax, kZstdWindowLogMax);
        const auto bytes = reader.bytes(s);
        in_ = {bytes.data(), bytes.size(), 0};
    }
    void read(uint8_t* dst, size_t n) {
        ZSTD_outBuffer out{dst, n, 0};
        while (out.pos < n) {
            const size_t in_before = in_.pos, out_before = out.pos;
            const size_t ret = ZSTD_decompressStream(dctx_.get(), &out, &in_);
            if (ZSTD_isError(ret)) fail(std::string("zstd: ") + ZSTD_getErrorName(ret));
            frame_done_ = ret == 0;
            if (out.pos < n && (ret == 0 || (in_.pos == in_before && out.pos == out_before))) {
                fail("decompresses to fewer bytes than the " + std::to_string(section_.raw_bytes) + " declared");
            }
        }
    }
    // The frame must end exactly here, with all of the stored bytes consumed.
    void finish() {
        while (!frame_done_) {
            uint8_t extra = 0;
            ZSTD_outBuffer out{&extra, 1, 0};
            const size_t in_before = in_.pos;
            const size_t ret = ZSTD_decompressStream(dctx_.get(), &out, &in_);
            if (ZSTD_isError(ret)) fail(std::string("zstd: ") + ZSTD_getErrorName(ret));
            if (out.pos > 0)
                fail("decompresses to more than the " + std::to_string(section_.raw_bytes) + " bytes declared");
            frame_done_ = ret == 0;
            if (!frame_done_ && in_.pos == in_before) fail("the zstd frame is truncated");
        }
        if (in_.pos != in_.size) fail("has data after its zstd frame");
    }

private:
    [[noreturn]] void fail(const std::string& why) const {
        reader_.corrupt("section '" + section_name(section_.type) + "' " + why);
    }
    const Reader& reader_;
    const SectionEntry& section_;
    std::unique_ptr<ZSTD_DCtx, ZstdDCtxFree> dctx_;
    ZSTD_inBuffer in_{};
    bool frame_done_ = false;  // the last call ended the frame (zstd returned 0)
};

}  // namespace kvstash::state_file
