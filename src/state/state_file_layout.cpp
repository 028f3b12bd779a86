// State file layout validation: magic, version, header, section table (bounds, overlaps, flags, types,
// zero padding) and the meta section, which fixes the size every other section must have. Nothing is
// trusted before it is checked; every failure is an Error naming the file and what is wrong.
#include <xxhash.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>
#include <vector>

#include "format/tensor_type.h"
#include "kv/kv_cache.h"
#include "kvstash/error.h"
#include "state/state_file_reader.h"

namespace kvstash::state_file {

void Reader::parse_layout() {
    const uint8_t* p = file_.data();
    const uint64_t size = file_.size();
    if (size < sizeof(kMagic) || std::memcmp(p, kMagic, sizeof(kMagic)) != 0) {
        corrupt("not a kvstash state file (no \"KVSTATE\" magic at the start of its " + std::to_string(size) +
                " bytes)");
    }
    if (size < kHeaderBytes) corrupt("truncated: " + std::to_string(size) + " bytes, shorter than the 64-byte header");
    version_ = load_le<uint32_t>(p + header::format_version);
    if (version_ > kFormatVersion) {
        fail(ErrorCode::unsupported, "format version " + std::to_string(version_) +
                                         " is newer than this kvstash reads (" +
                                         std::to_string(kOldestReadableVersion) + " to " +
                                         std::to_string(kFormatVersion) + "); load it with a newer kvstash");
    }
    if (version_ < kOldestReadableVersion) corrupt("format version " + std::to_string(version_) + " does not exist");
    const uint32_t header_bytes = load_le<uint32_t>(p + header::header_bytes);
    if (header_bytes != kHeaderBytes) {
        corrupt("header size " + std::to_string(header_bytes) + " is not the 64 bytes of format version " +
                std::to_string(version_));
    }
    const uint64_t header_sum = XXH3_64bits(p, header::header_checksum);
    if (header_sum != load_le<uint64_t>(p + header::header_checksum))
        corrupt("header checksum mismatch: the file is corrupt");
    if (const uint32_t flags = load_le<uint32_t>(p + header::flags); flags != 0) {
        fail(ErrorCode::unsupported,
             "file flags " + hex64(flags) + " are unknown to this kvstash (format versions 1 to 3 define none)");
    }
    if (load_le<uint32_t>(p + header::reserved) != 0) corrupt("reserved header field is not zero");
    const uint64_t declared = load_le<uint64_t>(p + header::file_bytes);
    if (declared != size) {
        corrupt(size < declared ? "truncated: " + std::to_string(size) + " bytes of the " + std::to_string(declared) +
                                      " its header declares"
                                : std::to_string(size) + " bytes, but its header declares " + std::to_string(declared) +
                                      " (trailing data)");
    }
    const uint32_t count = load_le<uint32_t>(p + header::section_count);
    if (count == 0 || count > kMaxSections) corrupt("section count " + std::to_string(count) + " is not in [1, 64]");
    if (load_le<uint32_t>(p + header::section_entry_bytes) != kSectionEntryBytes) {
        corrupt("section entry size " + std::to_string(load_le<uint32_t>(p + header::section_entry_bytes)) +
                " is not 64");
    }
    const uint64_t table_offset = load_le<uint64_t>(p + header::section_table_offset);
    const uint64_t table_bytes = uint64_t{count} * kSectionEntryBytes;
    if (table_offset < kHeaderBytes || table_offset % 8 != 0 || table_offset > size ||
        table_bytes > size - table_offset) {
        corrupt("section table (offset " + std::to_string(table_offset) + ", " + std::to_string(table_bytes) +
                " bytes) is not inside the file after the header");
    }
    if (XXH3_64bits(p + table_offset, table_bytes) != load_le<uint64_t>(p + header::table_checksum)) {
        corrupt("section table checksum mismatch: the file is corrupt");
    }
    parse_entries(table_offset, count);
    check_coverage(table_offset, table_bytes);
    for (uint32_t required : {kSectionMeta, kSectionTokens, kSectionKv}) {
        if (find(required) == nullptr) corrupt("required section '" + section_name(required) + "' is missing");
    }
}

void Reader::parse_entries(uint64_t table_offset, uint32_t count) {
    const uint64_t size = file_.size();
    for (uint32_t i = 0; i < count; ++i) {
        const uint8_t* e = file_.data() + table_offset + uint64_t{i} * kSectionEntryBytes;
        const SectionEntry s = load_section_entry(e);
        const std::string what = "section '" + section_name(s.type) + "' (entry " + std::to_string(i) + ")";
        if (std::any_of(e + entry::reserved, e + kSectionEntryBytes, [](uint8_t b) { return b != 0; })) {
            corrupt(what + " has non-zero reserved bytes");
        }
        if (s.type == 0 || (s.type > kLastRequiredSectionType && (s.type & kSectionAncillary) == 0)) {
            fail(ErrorCode::unsupported, what +
                                             " has a type unknown to this kvstash and required to read the file "
                                             "(written by a newer kvstash?)");
        }
        if ((s.flags & ~kKnownSectionFlags) != 0) {
            fail(ErrorCode::unsupported,
                 what + " uses flags " + hex64(s.flags & ~kKnownSectionFlags) + " unknown to this kvstash");
        }
        if (s.offset % kSectionAlignment != 0)
            corrupt(what + " offset " + std::to_string(s.offset) + " is not a multiple of 64");
        if (s.offset > size || s.stored_bytes > size - s.offset) {
            corrupt(what + " (offset " + std::to_string(s.offset) + ", " + std::to_string(s.stored_bytes) +
                    " bytes) extends past the end of the file (" + std::to_string(size) + " bytes)");
        }
        if (!s.compressed() && s.raw_bytes != s.stored_bytes) {
            corrupt(what + " is not compressed but declares " + std::to_string(s.raw_bytes) + " raw bytes for " +
                    std::to_string(s.stored_bytes) + " stored");
        }
        if (s.compressed() && (s.stored_bytes == 0 ||
                               s.raw_bytes > static_cast<unsigned __int128>(s.stored_bytes) * kMaxCompressionRatio)) {
            corrupt(what + " declares " + std::to_string(s.raw_bytes) + " bytes from " +
                    std::to_string(s.stored_bytes) + " compressed: more than the 256:1 a state file may use");
        }
        if (version_ < 2 && (s.type == kSectionRecurrent || s.type == kSectionCheckpoints))
            corrupt(what + " is a version 2 section in a version " + std::to_string(version_) + " file");
        if (find(s.type) != nullptr) corrupt(what + " appears twice");
        sections_.push_back(s);
    }
}

// Header, table and sections may not overlap, and every byte outside them must be zero.
void Reader::check_coverage(uint64_t table_offset, uint64_t table_bytes) const {
    struct Range {
        uint64_t begin, end;
        std::string what;
    };
    std::vector<Range> ranges{{0, kHeaderBytes, "the header"},
                              {table_offset, table_offset + table_bytes, "the section table"}};
    for (const SectionEntry& s : sections_) {
        if (s.stored_bytes > 0)
            ranges.push_back({s.offset, s.offset + s.stored_bytes, "section '" + section_name(s.type) + "'"});
    }
    std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
    uint64_t covered = 0;
    for (size_t i = 0; i < ranges.size(); ++i) {
        if (i > 0 && ranges[i].begin < ranges[i - 1].end)
            corrupt(ranges[i - 1].what + " and " + ranges[i].what + " overlap");
        for (uint64_t at = covered; at < ranges[i].begin; ++at) {
            if (file_[at] != 0) corrupt("non-zero byte at offset " + std::to_string(at) + ", outside every section");
        }
        covered = ranges[i].end;
    }
    for (uint64_t at = covered; at < file_.size(); ++at) {
        if (file_[at] != 0) corrupt("non-zero byte at offset " + std::to_string(at) + ", outside every section");
    }
}

std::vector<uint8_t> Reader::read_section(const SectionEntry& s) const {
    verify_checksum(s);
    const auto stored = bytes(s);
    if (!s.compressed()) return {stored.begin(), stored.end()};
    // Grown as the frame really produces bytes (at most doubling), so that a size the frame does not
    // deliver costs no allocation.
    std::vector<uint8_t> raw;
    ZstdStream z(*this, s);
    while (raw.size() < s.raw_bytes) {
        const size_t done = raw.size();
        raw.resize(std::min<uint64_t>(s.raw_bytes, std::max<uint64_t>(2 * done, uint64_t{1} << 16)));
        z.read(raw.data() + done, raw.size() - done);
    }
    z.finish();
    return raw;
}

FileNumerics Reader::read_numerics() const {
    FileNumerics out;
    const SectionEntry* s = find(kSectionNumerics);
    if (s == nullptr) return out;
    const std::vector<uint8_t> b = read_section(*s);  // kNumericsBytes (parse_layout checked)
    const uint32_t path = load_le<uint32_t>(&b[4]);
    const uint32_t flags = load_le<uint32_t>(&b[8]);
    if ((flags & ~kNumericsKvExact) != 0 || load_le<uint32_t>(&b[12]) != 0) {
        corrupt("section 'numerics' has flags " + hex64(flags) + " or reserved bytes unknown to this kvstash");
    }
    out.numerics.epoch = load_le<uint32_t>(&b[0]);
    // A path this build does not know (a newer kvstash's) is as good as unknown: not this process's.
    const bool known = path <= static_cast<uint32_t>(NumericsPath::cpu) || path >= kCudaNumericsPathBase;
    out.numerics.path = known ? static_cast<NumericsPath>(path) : NumericsPath::unknown;
    out.kv_exact = (flags & kNumericsKvExact) != 0;
    return out;
}

Meta Reader::read_meta() const {
    const SectionEntry& s = *find(kSectionMeta);
    const uint64_t fixed = meta_fixed_bytes(version_);
    if (s.raw_bytes < fixed || s.raw_bytes > fixed + kMaxModelNameBytes) {
        corrupt("section 'meta' has " + std::to_string(s.raw_bytes) + " bytes; version " + std::to_string(version_) +
                " needs " + std::to_string(fixed) + " plus at most 256");
    }
    const std::vector<uint8_t> b = read_section(s);
    Meta m;
    std::copy(b.begin(), b.begin() + 16, m.fingerprint.bytes.begin());
    m.n_vocab = load_le<int64_t>(&b[meta::n_vocab]);
    m.n_layer = load_le<int64_t>(&b[meta::n_layer]);
    m.n_embd_kv = load_le<int64_t>(&b[meta::n_embd_kv]);
    m.n_ctx = load_le<int64_t>(&b[meta::n_ctx]);
    m.n_tokens = load_le<int64_t>(&b[meta::n_tokens]);
    m.cache_type = load_le<uint32_t>(&b[meta::cache_type]);
    m.kv_encoding = load_le<uint32_t>(&b[meta::kv_encoding]);
    const uint32_t block_tokens = load_le<uint32_t>(&b[meta::kv_block_tokens]);
    const uint32_t name_bytes = load_le<uint32_t>(&b[meta::name_bytes]);
    if (name_bytes != b.size() - fixed) {
        corrupt("section 'meta' declares a " + std::to_string(name_bytes) + "-byte model name in " +
                std::to_string(b.size() - fixed) + " bytes");
    }
    m.model_name.assign(reinterpret_cast<const char*>(b.data()) + fixed, name_bytes);
    // Reserved bytes must be zero: version 1 from reserved_v1 on; version 2 [reserved_v2, base_fingerprint)
    // (version 3's fields) and the tail; version 3 the tail.
    const auto nonzero = [&b](size_t begin, size_t end) {
        return std::any_of(b.begin() + static_cast<std::ptrdiff_t>(begin), b.begin() + static_cast<std::ptrdiff_t>(end),
                           [](uint8_t x) { return x != 0; });
    };
    const bool reserved_set =
        version_ == 1   ? nonzero(meta::reserved_v1, fixed)
        : version_ == 2 ? nonzero(meta::reserved_v2, meta::base_fingerprint) || nonzero(meta::reserved_tail, fixed)
                        : nonzero(meta::reserved_tail, fixed);
    if (reserved_set) corrupt("section 'meta' has non-zero reserved bytes");
    if (version_ != 1) {
        std::copy(b.begin() + meta::base_fingerprint, b.begin() + meta::base_fingerprint + 16,
                  m.base_fingerprint.bytes.begin());
    }
    if (version_ == 1) {
        m.n_kv_layers = m.n_layer;
        m.n_evaluated = m.n_tokens;
    } else {
        m.n_kv_layers = load_le<int64_t>(&b[meta::n_kv_layers]);
        m.n_evaluated = load_le<int64_t>(&b[meta::n_evaluated]);
        m.recurrent.n_layer = load_le<int64_t>(&b[meta::n_recurrent_layers]);
        m.recurrent.conv_floats = load_le<int64_t>(&b[meta::conv_floats]);
        m.recurrent.scan_floats = load_le<int64_t>(&b[meta::scan_floats]);
        m.n_checkpoints = load_le<int64_t>(&b[meta::n_checkpoints]);
        m.checkpoint_interval = load_le<int64_t>(&b[meta::checkpoint_interval]);
        m.checkpoint_memory = load_le<uint64_t>(&b[meta::checkpoint_memory]);
    }
    if (version_ >= 3) {
        m.sliding_window = load_le<int64_t>(&b[meta::sliding_window]);
        m.n_global_kv_layers = load_le<int64_t>(&b[meta::n_global_kv_layers]);
        m.n_trimmed_blocks = load_le<int64_t>(&b[meta::n_trimmed_blocks]);
    }
    if (block_tokens != kv_block_tokens) {
        fail(ErrorCode::unsupported, "KV blocks of " + std::to_string(block_tokens) + " positions; this kvstash uses " +
                                         std::to_string(kv_block_tokens));
    }
    if (m.cache_type != 0 && m.cache_type != 1 && m.cache_type != static_cast<uint32_t>(TensorType::Q8_0))
        corrupt("KV cache type " + std::to_string(m.cache_type) + " is not f32 (0), f16 (1) or q8_0 (8)");
    if (m.kv_encoding != m.cache_type && m.kv_encoding != static_cast<uint32_t>(TensorType::Q8_0)) {
        corrupt("KV stored as type " + std::to_string(m.kv_encoding) + " for a " + tensor_type_name(m.cache_type) +
                " cache (allowed: the cache type or q8_0)");
    }
    auto in_range = [&](const char* field, int64_t v, int64_t lo, int64_t hi) {
        if (v < lo || v > hi) {
            corrupt(std::string(field) + " " + std::to_string(v) + " is outside [" + std::to_string(lo) + ", " +
                    std::to_string(hi) + "]");
        }
    };
    in_range("n_vocab", m.n_vocab, 1, INT32_MAX);
    in_range("n_layer", m.n_layer, 1, 1 << 16);
    in_range("n_kv_layers", m.n_kv_layers, 0, m.n_layer);
    in_range("n_recurrent_layers", m.recurrent.n_layer, 0, m.n_layer);
    // A model without attention layers (Mamba) has no KV width.
    in_range("n_embd_kv", m.n_embd_kv, m.n_kv_layers > 0 ? 1 : 0, 1 << 24);
    in_range("n_ctx", m.n_ctx, 1, INT32_MAX);
    in_range("n_tokens", m.n_tokens, 0, m.n_ctx);
    // Only a recurrent state (a truncate restored an earlier checkpoint) or a sliding-window one (a
    // truncate before its trimmed window) can lag behind its tokens.
    in_range("n_evaluated", m.n_evaluated, m.recurrent.n_layer > 0 || m.sliding_window > 0 ? 0 : m.n_tokens,
             m.n_tokens);
    if (version_ >= 3) {
        in_range("sliding_window", m.sliding_window, 1, INT32_MAX);
        in_range("n_global_kv_layers", m.n_global_kv_layers, 0, m.n_kv_layers);
        // Trimmed blocks never hold what a continuation after n_evaluated reads through a sliding layer.
        const int64_t most = m.n_evaluated < m.n_tokens
                                 ? 0
                                 : std::max<int64_t>(m.n_evaluated - m.sliding_window + 1, 0) / kv_block_tokens;
        in_range("n_trimmed_blocks", m.n_trimmed_blocks, 0, most);
    }
    const int64_t max_floats = m.recurrent.n_layer > 0 ? int64_t{1} << 40 : 0;
    in_range("conv_floats", m.recurrent.conv_floats, 0, max_floats);
    in_range("scan_floats", m.recurrent.scan_floats, 0, max_floats);
    // Checkpoints sit at distinct positions in [1, n_evaluated].
    in_range("n_checkpoints", m.n_checkpoints, 0, m.recurrent.n_layer > 0 ? m.n_evaluated : 0);
    in_range("checkpoint_interval", m.checkpoint_interval, 0, INT64_MAX);
    if (m.recurrent.n_layer > 0 && find(kSectionRecurrent) == nullptr)
        corrupt("required section 'recurrent' is missing (the file has recurrent layers)");
    if (m.recurrent.n_layer == 0 && find(kSectionRecurrent) != nullptr)
        corrupt("section 'recurrent' is present, but the meta section declares no recurrent layers");
    if ((m.n_checkpoints > 0) != (find(kSectionCheckpoints) != nullptr)) {
        corrupt("section 'checkpoints' is " + std::string(m.n_checkpoints > 0 ? "missing" : "present") +
                ", but the meta section declares " + std::to_string(m.n_checkpoints) + " checkpoints");
    }

    // Every other section's size follows from these shapes.
    auto expect_raw = [&](uint32_t type, uint64_t bytes) {
        const SectionEntry* sec = find(type);
        if (sec != nullptr && sec->raw_bytes != bytes) {
            corrupt("section '" + section_name(type) + "' holds " + std::to_string(sec->raw_bytes) +
                    " bytes; the meta section's shapes need " + std::to_string(bytes));
        }
    };
    const auto n_blocks = static_cast<uint64_t>((m.n_evaluated + kv_block_tokens - 1) / kv_block_tokens);
    const uint64_t layer_bytes = 2 * kv_block_tokens * kv_row_bytes(m.kv_encoding, m.n_embd_kv);  // K and V
    const auto n_trimmed = static_cast<uint64_t>(m.n_trimmed_blocks);
    unsigned __int128 kv_bytes =
        static_cast<unsigned __int128>(n_blocks - n_trimmed) * static_cast<uint64_t>(m.n_kv_layers) * layer_bytes +
        static_cast<unsigned __int128>(n_trimmed) * static_cast<uint64_t>(m.n_global_kv_layers) * layer_bytes;
    if (kv_bytes > UINT64_MAX) corrupt("KV size overflows 64 bits");
    expect_raw(kSectionKv, static_cast<uint64_t>(kv_bytes));
    // recurrent.floats() < 2^57 (n_layer <= 2^16, floats per layer < 2^41): no overflow in 128 bits.
    const auto state_bytes = static_cast<unsigned __int128>(m.recurrent.floats()) * sizeof(float);
    const unsigned __int128 checkpoint_bytes = static_cast<unsigned __int128>(m.n_checkpoints) * (8 + state_bytes);
    if (checkpoint_bytes > UINT64_MAX) corrupt("checkpoint size overflows 64 bits");
    expect_raw(kSectionRecurrent, static_cast<uint64_t>(state_bytes));
    expect_raw(kSectionCheckpoints, static_cast<uint64_t>(checkpoint_bytes));
    expect_raw(kSectionTokens, 4 * static_cast<uint64_t>(m.n_tokens));
    expect_raw(kSectionLogits, 4 * static_cast<uint64_t>(m.n_vocab));
    if (const SectionEntry* sampler = find(kSectionSampler);
        sampler != nullptr &&
        (sampler->raw_bytes < kSamplerFixedBytes ||
         sampler->raw_bytes > kSamplerFixedBytes + kLogitBiasEntryBytes * static_cast<uint64_t>(m.n_vocab))) {
        corrupt("section 'sampler' has " + std::to_string(sampler->raw_bytes) + " bytes, outside what " +
                std::to_string(m.n_vocab) + " tokens allow");
    }
    if (const SectionEntry* numerics = find(kSectionNumerics);
        numerics != nullptr && numerics->raw_bytes != kNumericsBytes) {
        corrupt("section 'numerics' has " + std::to_string(numerics->raw_bytes) + " bytes, not " +
                std::to_string(kNumericsBytes));
    }
    if (const SectionEntry* session = find(kSectionSession);
        session != nullptr && session->raw_bytes > kMaxSessionBytes) {
        corrupt("section 'session' declares " + std::to_string(session->raw_bytes) + " bytes, more than the " +
                std::to_string(kMaxSessionBytes) + " allowed");
    }
    return m;
}

}  // namespace kvstash::state_file
