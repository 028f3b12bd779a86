// The state file reader. Everything is validated before it is trusted, in this order: magic, version,
// header (size, checksum, flags, file length), section table (checksum, bounds, overlaps, flags, types,
// zero padding), the meta section (checksum, shapes, sizes every other section must have), the model
// fingerprint and shapes, then each section's checksum and contents. Allocations are sized only from
// declared sizes already checked against the model's shapes and the bytes actually present.
#include <sys/mman.h>
#include <xxhash.h>
#include <zstd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "format/mmap_file.h"
#include "format/tensor_type.h"
#include "kvstash/error.h"
#include "model/config.h"
#include "state/fingerprint.h"
#include "state/state_file_format.h"
#include "state/state_impl.h"

namespace kvstash::state_file {
namespace {

constexpr int kZstdWindowLogMax = 24;  // a hostile frame cannot make the decoder allocate a larger window

std::string hex64(uint64_t v) {
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string s = "0x";
    for (int shift = 60; shift >= 0; shift -= 4) s += kDigits[(v >> shift) & 15];
    return s;
}

struct SectionRef {
    uint32_t type = 0;
    uint32_t flags = 0;
    uint64_t offset = 0;
    uint64_t stored_bytes = 0;
    uint64_t raw_bytes = 0;
    uint64_t checksum = 0;
    bool compressed() const { return (flags & kFlagZstd) != 0; }
};

struct Meta {
    ModelFingerprint fingerprint;
    int64_t n_vocab = 0, n_layer = 0, n_embd_kv = 0, n_ctx = 0, n_tokens = 0;
    uint32_t cache_type = 0, kv_encoding = 0;
    std::string model_name;
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
    std::span<const uint8_t> bytes(const SectionRef& s) const { return file_.subspan(s.offset, s.stored_bytes); }

    void parse_layout();
    const SectionRef* find(uint32_t type) const {
        for (const SectionRef& s : sections_) {
            if (s.type == type) return &s;
        }
        return nullptr;
    }
    const std::vector<SectionRef>& sections() const { return sections_; }
    uint32_t version() const { return version_; }

    void verify_checksum(const SectionRef& s) const {
        const uint64_t actual = XXH3_64bits(file_.data() + s.offset, s.stored_bytes);
        if (actual != s.checksum) checksum_mismatch(s, actual);
    }
    [[noreturn]] void checksum_mismatch(const SectionRef& s, uint64_t actual) const {
        corrupt("checksum mismatch in section '" + section_name(s.type) + "' (stored " + hex64(s.checksum) +
                ", computed " + hex64(actual) + "): the file is corrupt");
    }
    // A small section's raw bytes (checksum verified, decompressed if needed).
    std::vector<uint8_t> read_section(const SectionRef& s) const;
    Meta read_meta() const;

private:
    void parse_entries(uint64_t table_offset, uint32_t count);
    void check_coverage(uint64_t table_offset, uint64_t table_bytes) const;

    std::span<const uint8_t> file_;
    std::string name_;
    uint32_t version_ = 0;
    std::vector<SectionRef> sections_;
};

void Reader::parse_layout() {
    const uint8_t* p = file_.data();
    const uint64_t size = file_.size();
    if (size < sizeof(kMagic) || std::memcmp(p, kMagic, sizeof(kMagic)) != 0) {
        corrupt("not a kvstash state file (no \"KVSTATE\" magic at the start of its " + std::to_string(size) + " bytes)");
    }
    if (size < kHeaderBytes) corrupt("truncated: " + std::to_string(size) + " bytes, shorter than the 64-byte header");
    version_ = load_le<uint32_t>(p + header::format_version);
    if (version_ > kFormatVersion) {
        fail(ErrorCode::unsupported, "format version " + std::to_string(version_) + " is newer than this kvstash reads (" +
                                         std::to_string(kOldestReadableVersion) + " to " + std::to_string(kFormatVersion) +
                                         "); load it with a newer kvstash");
    }
    if (version_ < kOldestReadableVersion) corrupt("format version " + std::to_string(version_) + " does not exist");
    const uint32_t header_bytes = load_le<uint32_t>(p + header::header_bytes);
    if (header_bytes != kHeaderBytes) {
        corrupt("header size " + std::to_string(header_bytes) + " is not the 64 bytes of format version 1");
    }
    const uint64_t header_sum = XXH3_64bits(p, header::header_checksum);
    if (header_sum != load_le<uint64_t>(p + header::header_checksum)) corrupt("header checksum mismatch: the file is corrupt");
    if (const uint32_t flags = load_le<uint32_t>(p + header::flags); flags != 0) {
        fail(ErrorCode::unsupported, "file flags " + hex64(flags) + " are unknown to this kvstash (format version 1 defines none)");
    }
    if (load_le<uint32_t>(p + header::reserved) != 0) corrupt("reserved header field is not zero");
    const uint64_t declared = load_le<uint64_t>(p + header::file_bytes);
    if (declared != size) {
        corrupt(size < declared ? "truncated: " + std::to_string(size) + " bytes of the " + std::to_string(declared) + " its header declares"
                                : std::to_string(size) + " bytes, but its header declares " + std::to_string(declared) +
                                      " (trailing data)");
    }
    const uint32_t count = load_le<uint32_t>(p + header::section_count);
    if (count == 0 || count > kMaxSections) corrupt("section count " + std::to_string(count) + " is not in [1, 64]");
    if (load_le<uint32_t>(p + header::section_entry_bytes) != kSectionEntryBytes) {
        corrupt("section entry size " + std::to_string(load_le<uint32_t>(p + header::section_entry_bytes)) + " is not 64");
    }
    const uint64_t table_offset = load_le<uint64_t>(p + header::section_table_offset);
    const uint64_t table_bytes = uint64_t{count} * kSectionEntryBytes;
    if (table_offset < kHeaderBytes || table_offset % 8 != 0 || table_offset > size || table_bytes > size - table_offset) {
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
        SectionRef s;
        s.type = load_le<uint32_t>(e + entry::type);
        s.flags = load_le<uint32_t>(e + entry::flags);
        s.offset = load_le<uint64_t>(e + entry::offset);
        s.stored_bytes = load_le<uint64_t>(e + entry::stored_bytes);
        s.raw_bytes = load_le<uint64_t>(e + entry::raw_bytes);
        s.checksum = load_le<uint64_t>(e + entry::checksum);
        const std::string what = "section '" + section_name(s.type) + "' (entry " + std::to_string(i) + ")";
        if (std::any_of(e + entry::reserved, e + kSectionEntryBytes, [](uint8_t b) { return b != 0; })) {
            corrupt(what + " has non-zero reserved bytes");
        }
        if (s.type == 0 || (s.type > kSectionSampler && (s.type & kSectionAncillary) == 0)) {
            fail(ErrorCode::unsupported, what + " has a type unknown to this kvstash and required to read the file "
                                                "(written by a newer kvstash?)");
        }
        if ((s.flags & ~kKnownSectionFlags) != 0) {
            fail(ErrorCode::unsupported, what + " uses flags " + hex64(s.flags & ~kKnownSectionFlags) + " unknown to this kvstash");
        }
        if (s.offset % kSectionAlignment != 0) corrupt(what + " offset " + std::to_string(s.offset) + " is not a multiple of 64");
        if (s.offset > size || s.stored_bytes > size - s.offset) {
            corrupt(what + " (offset " + std::to_string(s.offset) + ", " + std::to_string(s.stored_bytes) +
                    " bytes) extends past the end of the file (" + std::to_string(size) + " bytes)");
        }
        if (!s.compressed() && s.raw_bytes != s.stored_bytes) {
            corrupt(what + " is not compressed but declares " + std::to_string(s.raw_bytes) + " raw bytes for " +
                    std::to_string(s.stored_bytes) + " stored");
        }
        if (s.compressed() && (s.stored_bytes == 0 || s.raw_bytes > static_cast<unsigned __int128>(s.stored_bytes) * kMaxCompressionRatio)) {
            corrupt(what + " declares " + std::to_string(s.raw_bytes) + " bytes from " + std::to_string(s.stored_bytes) +
                    " compressed: more than the 256:1 a state file may use");
        }
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
    std::vector<Range> ranges{{0, kHeaderBytes, "the header"}, {table_offset, table_offset + table_bytes, "the section table"}};
    for (const SectionRef& s : sections_) {
        if (s.stored_bytes > 0) ranges.push_back({s.offset, s.offset + s.stored_bytes, "section '" + section_name(s.type) + "'"});
    }
    std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
    uint64_t covered = 0;
    for (size_t i = 0; i < ranges.size(); ++i) {
        if (i > 0 && ranges[i].begin < ranges[i - 1].end) corrupt(ranges[i - 1].what + " and " + ranges[i].what + " overlap");
        for (uint64_t at = covered; at < ranges[i].begin; ++at) {
            if (file_[at] != 0) corrupt("non-zero byte at offset " + std::to_string(at) + ", outside every section");
        }
        covered = ranges[i].end;
    }
    for (uint64_t at = covered; at < file_.size(); ++at) {
        if (file_[at] != 0) corrupt("non-zero byte at offset " + std::to_string(at) + ", outside every section");
    }
}

struct ZstdDCtxFree {
    void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
};

// Decompresses one zstd frame into caller buffers, piece by piece, never producing more than asked.
class ZstdStream {
public:
    ZstdStream(const Reader& reader, const SectionRef& s) : reader_(reader), section_(s), dctx_(ZSTD_createDCtx()) {
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
            if (out.pos > 0) fail("decompresses to more than the " + std::to_string(section_.raw_bytes) + " bytes declared");
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
    const SectionRef& section_;
    std::unique_ptr<ZSTD_DCtx, ZstdDCtxFree> dctx_;
    ZSTD_inBuffer in_{};
    bool frame_done_ = false;  // the last call ended the frame (zstd returned 0)
};

std::vector<uint8_t> Reader::read_section(const SectionRef& s) const {
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

Meta Reader::read_meta() const {
    const SectionRef& s = *find(kSectionMeta);
    if (s.raw_bytes < kMetaFixedBytes || s.raw_bytes > kMetaFixedBytes + kMaxModelNameBytes) {
        corrupt("section 'meta' has " + std::to_string(s.raw_bytes) + " bytes; version 1 needs 128 plus at most 256");
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
    if (name_bytes != b.size() - kMetaFixedBytes) {
        corrupt("section 'meta' declares a " + std::to_string(name_bytes) + "-byte model name in " +
                std::to_string(b.size() - kMetaFixedBytes) + " bytes");
    }
    m.model_name.assign(reinterpret_cast<const char*>(b.data()) + kMetaFixedBytes, name_bytes);
    if (std::any_of(b.begin() + meta::reserved, b.begin() + kMetaFixedBytes, [](uint8_t x) { return x != 0; })) {
        corrupt("section 'meta' has non-zero reserved bytes");
    }
    if (block_tokens != kv_block_tokens) {
        fail(ErrorCode::unsupported, "KV blocks of " + std::to_string(block_tokens) + " positions; this kvstash uses " +
                                         std::to_string(kv_block_tokens));
    }
    if (m.cache_type != 0 && m.cache_type != 1) corrupt("KV cache type " + std::to_string(m.cache_type) + " is not f32 (0) or f16 (1)");
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
    in_range("n_embd_kv", m.n_embd_kv, 1, 1 << 24);
    in_range("n_ctx", m.n_ctx, 1, INT32_MAX);
    in_range("n_tokens", m.n_tokens, 0, m.n_ctx);

    // Every other section's size follows from these shapes.
    auto expect_raw = [&](uint32_t type, uint64_t bytes) {
        const SectionRef* sec = find(type);
        if (sec != nullptr && sec->raw_bytes != bytes) {
            corrupt("section '" + section_name(type) + "' holds " + std::to_string(sec->raw_bytes) + " bytes; the meta section's shapes need " +
                    std::to_string(bytes));
        }
    };
    const auto n_blocks = static_cast<uint64_t>((m.n_tokens + kv_block_tokens - 1) / kv_block_tokens);
    unsigned __int128 kv_bytes = static_cast<unsigned __int128>(n_blocks) * 2 * static_cast<uint64_t>(m.n_layer) *
                                 kv_block_tokens * kv_row_bytes(m.kv_encoding, m.n_embd_kv);
    if (kv_bytes > UINT64_MAX) corrupt("KV size overflows 64 bits");
    expect_raw(kSectionKv, static_cast<uint64_t>(kv_bytes));
    expect_raw(kSectionTokens, 4 * static_cast<uint64_t>(m.n_tokens));
    expect_raw(kSectionLogits, 4 * static_cast<uint64_t>(m.n_vocab));
    if (const SectionRef* sampler = find(kSectionSampler);
        sampler != nullptr && (sampler->raw_bytes < kSamplerFixedBytes ||
                               sampler->raw_bytes > kSamplerFixedBytes + kLogitBiasEntryBytes * static_cast<uint64_t>(m.n_vocab))) {
        corrupt("section 'sampler' has " + std::to_string(sampler->raw_bytes) + " bytes, outside what " +
                std::to_string(m.n_vocab) + " tokens allow");
    }
    return m;
}

SamplerState decode_sampler(const Reader& r, const std::vector<uint8_t>& b, int64_t n_vocab) {
    SamplerState st;
    SamplerParams& p = st.params;
    p.temperature = load_le<float>(&b[sampler::temperature]);
    p.top_k = load_le<int32_t>(&b[sampler::top_k]);
    p.top_p = load_le<float>(&b[sampler::top_p]);
    p.min_p = load_le<float>(&b[sampler::min_p]);
    p.repeat_penalty = load_le<float>(&b[sampler::repeat_penalty]);
    p.repeat_last_n = load_le<int32_t>(&b[sampler::repeat_last_n]);
    p.presence_penalty = load_le<float>(&b[sampler::presence_penalty]);
    p.frequency_penalty = load_le<float>(&b[sampler::frequency_penalty]);
    p.seed = load_le<uint64_t>(&b[sampler::seed]);
    for (size_t i = 0; i < 4; ++i) st.rng[i] = load_le<uint64_t>(&b[sampler::rng + 8 * i]);
    const uint32_t n_bias = load_le<uint32_t>(&b[sampler::n_logit_bias]);
    if (load_le<uint32_t>(&b[sampler::reserved]) != 0) r.corrupt("section 'sampler' has non-zero reserved bytes");
    if (b.size() != kSamplerFixedBytes + kLogitBiasEntryBytes * uint64_t{n_bias}) {
        r.corrupt("section 'sampler' declares " + std::to_string(n_bias) + " logit_bias entries in " + std::to_string(b.size()) + " bytes");
    }
    p.logit_bias.resize(n_bias);
    for (uint32_t i = 0; i < n_bias; ++i) {
        const uint8_t* e = b.data() + kSamplerFixedBytes + kLogitBiasEntryBytes * i;
        p.logit_bias[i] = {load_le<int32_t>(e), load_le<float>(e + 4)};
    }
    validate_sampler_state(st, n_vocab, ErrorCode::bad_format, "state file '" + r.name() + "'");
    return st;
}

// Fills the State's KV cache from the 'kv' section. Uncompressed and in the cache's type, this is one
// copy from the mapping into each block half, hashed on the way (the bytes are in cache for the copy).
void decode_kv(const Reader& r, const SectionRef& s, const Meta& m, KvCache& kv) {
    const int64_t n_blocks = (m.n_tokens + kv_block_tokens - 1) / kv_block_tokens;
    const uint64_t enc_row = kv_row_bytes(m.kv_encoding, m.n_embd_kv);
    const uint64_t part_bytes = static_cast<uint64_t>(m.n_layer) * kv_block_tokens * enc_row;
    const bool same_type = m.kv_encoding == m.cache_type;
    std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> hash(XXH3_createState(), &XXH3_freeState);
    if (!hash || XXH3_64bits_reset(hash.get()) == XXH_ERROR) throw Error(ErrorCode::internal, "cannot initialise XXH3");
    std::unique_ptr<ZstdStream> zstd;
    if (s.compressed()) {
        r.verify_checksum(s);  // before feeding the bytes to the decompressor
        zstd = std::make_unique<ZstdStream>(r, s);
    }
    const uint8_t* src = r.bytes(s).data();
    std::vector<uint8_t> scratch(zstd && !same_type ? part_bytes : 0);
    std::vector<float> row_f32(static_cast<size_t>((m.n_embd_kv + 31) / 32 * 32));

    for (int64_t b = 0; b < n_blocks; ++b) {
        // Block by block: memory follows the bytes actually decoded, not only the declared size.
        kv.grow(std::min(m.n_tokens, (b + 1) * kv_block_tokens));
        for (int half = 0; half < 2; ++half) {
            uint8_t* dst = half == 0 ? kv.writable_block_k(b) : kv.writable_block_v(b);
            const uint8_t* encoded = nullptr;
            if (zstd) {
                zstd->read(same_type ? dst : scratch.data(), part_bytes);
                encoded = scratch.data();
            } else {
                XXH3_64bits_update(hash.get(), src, part_bytes);
                if (same_type) std::memcpy(dst, src, part_bytes);
                encoded = src;
                src += part_bytes;
            }
            if (same_type) continue;
            // q8_0 rows -> the cache's f16/f32 rows.
            for (int64_t row = 0; row < m.n_layer * kv_block_tokens; ++row) {
                dequantize_row(TensorType::Q8_0, encoded + static_cast<uint64_t>(row) * enc_row, row_f32.data(),
                               static_cast<int64_t>(row_f32.size()));
                uint8_t* out = dst + static_cast<uint64_t>(row) * kv.row_bytes();
                if (kv.type() == TensorType::F32) {
                    std::memcpy(out, row_f32.data(), static_cast<size_t>(m.n_embd_kv) * 4);
                } else {
                    for (int64_t i = 0; i < m.n_embd_kv; ++i) {
                        const uint16_t h = fp32_to_fp16(row_f32[static_cast<size_t>(i)]);
                        std::memcpy(out + 2 * i, &h, 2);
                    }
                }
            }
        }
    }
    if (zstd) {
        zstd->finish();
    } else if (const uint64_t actual = XXH3_64bits_digest(hash.get()); actual != s.checksum) {
        r.checksum_mismatch(s, actual);
    }
}

}  // namespace

State decode_state(const Model& model, std::span<const uint8_t> file, const std::string& display_name) {
    Reader r(file, display_name);
    r.parse_layout();
    const Meta m = r.read_meta();

    const ModelFingerprint fp = cached_model_fingerprint(model);
    if (m.fingerprint != fp) {
        r.fail(ErrorCode::invalid_argument, "it was saved from model '" + m.model_name + "' (fingerprint " + m.fingerprint.hex() +
                                                "), not from '" + model.path() + "' (fingerprint " + fp.hex() +
                                                "); load it with the model it was saved from");
    }
    const ModelConfig& c = model.config();
    if (m.n_vocab != c.n_vocab || m.n_layer != c.n_layer || m.n_embd_kv != c.n_embd_kv()) {
        r.corrupt("its shapes (n_vocab " + std::to_string(m.n_vocab) + ", n_layer " + std::to_string(m.n_layer) + ", n_embd_kv " +
                  std::to_string(m.n_embd_kv) + ") do not match its model's (" + std::to_string(c.n_vocab) + ", " +
                  std::to_string(c.n_layer) + ", " + std::to_string(c.n_embd_kv()) + ") although the fingerprints agree");
    }

    StateOptions options;
    options.kv_type = m.cache_type == 1 ? KvType::f16 : KvType::f32;
    options.n_ctx = m.n_ctx;
    State state(model, options);
    State::Impl& s = state.impl();

    const std::vector<uint8_t> tokens = r.read_section(*r.find(kSectionTokens));
    s.tokens.resize(static_cast<size_t>(m.n_tokens));
    if (!tokens.empty()) std::memcpy(s.tokens.data(), tokens.data(), tokens.size());
    for (size_t i = 0; i < s.tokens.size(); ++i) {
        if (s.tokens[i] < 0 || s.tokens[i] >= c.n_vocab) {
            r.corrupt("token " + std::to_string(s.tokens[i]) + " at position " + std::to_string(i) + " is outside the vocabulary of " +
                      std::to_string(c.n_vocab));
        }
    }
    if (const SectionRef* logits = r.find(kSectionLogits)) {
        const std::vector<uint8_t> b = r.read_section(*logits);
        s.last_logits.resize(static_cast<size_t>(c.n_vocab));
        std::memcpy(s.last_logits.data(), b.data(), b.size());
    }
    if (const SectionRef* sampler = r.find(kSectionSampler)) s.sampler = decode_sampler(r, r.read_section(*sampler), c.n_vocab);
    decode_kv(r, *r.find(kSectionKv), m, s.kv);
    return state;
}

StateFileInfo inspect_state_bytes(std::span<const uint8_t> file, const std::string& display_name, bool verify_checksums) {
    Reader r(file, display_name);
    r.parse_layout();
    const Meta m = r.read_meta();
    StateFileInfo info;
    info.format_version = r.version();
    info.model_fingerprint = m.fingerprint.hex();
    info.model_name = m.model_name;
    info.n_tokens = m.n_tokens;
    info.n_ctx = m.n_ctx;
    info.kv_type = tensor_type_name(m.kv_encoding);
    info.lossy_kv = m.kv_encoding != m.cache_type;
    info.has_logits = r.find(kSectionLogits) != nullptr;
    info.has_sampler = r.find(kSectionSampler) != nullptr;
    info.file_bytes = file.size();
    info.kv_bytes = r.find(kSectionKv)->stored_bytes;
    for (const SectionRef& s : r.sections()) info.compressed = info.compressed || s.compressed();
    if (verify_checksums) {
        info.checksums_ok = true;
        for (const SectionRef& s : r.sections()) {
            try {
                r.verify_checksum(s);
            } catch (const Error& e) {
                info.checksums_ok = false;
                if (info.checksum_error.empty()) info.checksum_error = e.what();
            }
        }
    }
    return info;
}

}  // namespace kvstash::state_file

namespace kvstash {

State load_state(const Model& model, const std::string& path) {
    const MappedFile map = MappedFile::open(path);
    if (map.size() > 0) {
        // One sequential pass: ask for read-ahead.
        ::madvise(const_cast<uint8_t*>(map.data()), map.size(), MADV_SEQUENTIAL);
    }
    return state_file::decode_state(model, {map.data(), map.size()}, path);
}

StateFileInfo inspect_state_file(const std::string& path, bool verify_checksums) {
    const MappedFile map = MappedFile::open(path);
    return state_file::inspect_state_bytes({map.data(), map.size()}, path, verify_checksums);
}

}  // namespace kvstash
