// Pieces of the state file format shared by the writer (state_file_write.cpp) and the reader
// (state_file_read.cpp): section names, KV row sizes and the sampler-state rules both enforce.
#include <xxhash.h>

#include <cmath>
#include <string>

#include "kvstash/error.h"
#include "state/state_file_format.h"

namespace kvstash::state_file {

uint64_t align_up(uint64_t n, uint64_t alignment) { return (n + alignment - 1) / alignment * alignment; }

std::string section_name(uint32_t type) {
    switch (type) {
        case kSectionMeta: return "meta";
        case kSectionTokens: return "tokens";
        case kSectionKv: return "kv";
        case kSectionLogits: return "logits";
        case kSectionSampler: return "sampler";
        case kSectionRecurrent: return "recurrent";
        case kSectionCheckpoints: return "checkpoints";
        case kSectionSession: return "session";
        case kSectionNumerics: return "numerics";
        default: {
            static constexpr char kDigits[] = "0123456789abcdef";
            std::string hex = "type 0x";
            for (int shift = 28; shift >= 0; shift -= 4) hex += kDigits[(type >> shift) & 15];
            return hex;
        }
    }
}

uint64_t kv_row_bytes(uint32_t encoding, int64_t n_embd_kv) {
    const auto n = static_cast<uint64_t>(n_embd_kv);
    switch (encoding) {
        case 0: return 4 * n;               // f32
        case 1: return 2 * n;               // f16
        case 8: return (n + 31) / 32 * 34;  // q8_0
        default: return 0;
    }
}

void validate_sampler_state(const SamplerState& sampler, int64_t n_vocab, ErrorCode code, const std::string& what) {
    const SamplerParams& p = sampler.params;
    auto fail = [&](const std::string& why) { throw Error(code, what + ": " + why); };
    if (!std::isfinite(p.temperature)) fail("sampler temperature is not finite");
    if (!(p.top_p >= 0.0f && p.top_p <= 1.0f)) fail("sampler top_p " + std::to_string(p.top_p) + " is outside [0, 1]");
    if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) fail("sampler min_p " + std::to_string(p.min_p) + " is outside [0, 1]");
    if (!(std::isfinite(p.repeat_penalty) && p.repeat_penalty > 0.0f))
        fail("sampler repeat_penalty must be finite and > 0");
    if (p.repeat_last_n < -1) fail("sampler repeat_last_n " + std::to_string(p.repeat_last_n) + " is below -1");
    if (!std::isfinite(p.presence_penalty) || !std::isfinite(p.frequency_penalty)) {
        fail("sampler presence/frequency penalties must be finite");
    }
    if (p.logit_bias.size() > static_cast<uint64_t>(n_vocab)) {
        fail("sampler has " + std::to_string(p.logit_bias.size()) + " logit_bias entries, more than the " +
             std::to_string(n_vocab) + " tokens of the vocabulary");
    }
    for (const auto& [id, bias] : p.logit_bias) {
        if (id < 0 || id >= n_vocab) {
            fail("sampler logit_bias token id " + std::to_string(id) + " is outside [0, " + std::to_string(n_vocab) +
                 ")");
        }
        if (std::isnan(bias) || bias == INFINITY)
            fail("sampler logit_bias for token " + std::to_string(id) + " is NaN or +inf");
    }
    if (sampler.rng[0] == 0 && sampler.rng[1] == 0 && sampler.rng[2] == 0 && sampler.rng[3] == 0) {
        fail("sampler RNG state is all zero (not taken from a Sampler)");
    }
}

void rewrite_checksums(std::span<uint8_t> file) {
    if (file.size() < kHeaderBytes) return;
    uint8_t* p = file.data();
    const uint64_t count = load_le<uint32_t>(p + header::section_count);
    const uint64_t table = load_le<uint64_t>(p + header::section_table_offset);
    if (count <= kMaxSections && table <= file.size() && count * kSectionEntryBytes <= file.size() - table) {
        for (uint64_t i = 0; i < count; ++i) {
            uint8_t* e = p + table + i * kSectionEntryBytes;
            const uint64_t offset = load_le<uint64_t>(e + entry::offset),
                           n = load_le<uint64_t>(e + entry::stored_bytes);
            if (offset <= file.size() && n <= file.size() - offset)
                store_le<uint64_t>(e + entry::checksum, XXH3_64bits(p + offset, n));
        }
        store_le<uint64_t>(p + header::table_checksum, XXH3_64bits(p + table, count * kSectionEntryBytes));
    }
    store_le<uint64_t>(p + header::header_checksum, XXH3_64bits(p, header::header_checksum));
}

}  // namespace kvstash::state_file
