// The state file writer: a State encoded into sections (docs/state-format.md) through a ByteSink, and
// save_state, which replaces the file atomically (base/atomic_file: temp file, fsync, rename, fsync dir).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backends/cpu/runtime/numerics.h"
#include "base/atomic_file.h"
#include "base/utf8.h"
#include "format/quantize.h"
#include "format/tensor_type.h"
#include "kv/kv_block_staging.h"
#include "kv/kv_tensor_type.h"
#include "kvstash/error.h"
#include "state/adapter_fingerprint.h"
#include "state/fingerprint.h"
#include "state/state_access.h"
#include "state/state_file_format.h"

namespace kvstash::state_file {
namespace {

constexpr int kZstdLevel = 3;
constexpr int kZstdWindowLog = 21;  // 2 MiB: what the reader's streaming decoder is allowed to need

struct ZstdCCtxFree {
    void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};
using ZstdCCtx = std::unique_ptr<ZSTD_CCtx, ZstdCCtxFree>;

ZstdCCtx make_cctx(uint64_t pledged_bytes) {
    ZstdCCtx cctx(ZSTD_createCCtx());
    if (!cctx) throw Error(ErrorCode::internal, "cannot create a zstd compression context");
    // Fixed parameters (no threads, no frame checksum: sections carry their own) make the output a
    // function of the input alone, so save -> load -> save is byte-identical.
    ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_compressionLevel, kZstdLevel);
    ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_windowLog, kZstdWindowLog);
    ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_checksumFlag, 0);
    ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_contentSizeFlag, 1);
    ZSTD_CCtx_setPledgedSrcSize(cctx.get(), pledged_bytes);
    return cctx;
}

// Streams input pieces into one zstd frame held in memory.
class Compressor {
public:
    explicit Compressor(uint64_t raw_bytes) : cctx_(make_cctx(raw_bytes)) {
        out_.resize(ZSTD_compressBound(raw_bytes));
    }
    void add(const uint8_t* data, size_t n) { run(data, n, ZSTD_e_continue); }
    std::vector<uint8_t> finish() {
        run(nullptr, 0, ZSTD_e_end);
        out_.resize(pos_);
        return std::move(out_);
    }

private:
    void run(const uint8_t* data, size_t n, ZSTD_EndDirective mode) {
        ZSTD_inBuffer in{data, n, 0};
        for (;;) {
            ZSTD_outBuffer out{out_.data(), out_.size(), pos_};
            const size_t left = ZSTD_compressStream2(cctx_.get(), &out, &in, mode);
            pos_ = out.pos;
            if (ZSTD_isError(left))
                throw Error(ErrorCode::internal, std::string("zstd compression failed: ") + ZSTD_getErrorName(left));
            if (mode == ZSTD_e_end ? left == 0 : in.pos == in.size) return;
            if (out.pos == out.size) out_.resize(out_.size() * 2);
        }
    }
    ZstdCCtx cctx_;
    std::vector<uint8_t> out_;
    size_t pos_ = 0;
};

// Compression is kept only when it saves bytes and stays within the ratio the reader accepts.
bool compression_pays(uint64_t raw_bytes, uint64_t compressed_bytes) {
    return compressed_bytes < raw_bytes && raw_bytes <= compressed_bytes * kMaxCompressionRatio;
}

// A section's table entry and, until it is written, its stored bytes.
struct Section : SectionEntry {
    std::vector<uint8_t> stored;  // empty for a KV section streamed from the cache
    bool streamed = false;
};

Section small_section(uint32_t type, std::vector<uint8_t> raw, bool compress) {
    Section s;
    s.type = type;
    s.raw_bytes = raw.size();
    s.stored = std::move(raw);
    if (compress && !s.stored.empty()) {
        Compressor c(s.raw_bytes);
        c.add(s.stored.data(), s.stored.size());
        std::vector<uint8_t> packed = c.finish();
        if (compression_pays(s.raw_bytes, packed.size())) {
            s.stored = std::move(packed);
            s.flags |= kFlagZstd;
        }
    }
    s.stored_bytes = s.stored.size();
    s.checksum = XXH3_64bits(s.stored.data(), s.stored.size());
    return s;
}

// Leading KV blocks the file stores trimmed (version 3): those no position after the evaluated ones reads
// through a sliding layer; at least the ones already trimmed in memory. None while tokens wait to be
// evaluated again (the KV then holds no block a continuation needs).
int64_t file_trimmed_blocks(const State& s) {
    const KvCache& kv = StateAccess::kv(s);
    const int64_t window = StateAccess::sliding_window(s);
    if (window <= 0 || !kv.has_sliding_layers() || kv.n_tokens() < s.n_tokens()) return 0;
    return std::max(kv.n_trimmed_blocks(), std::max<int64_t>(kv.n_tokens() - window + 1, 0) / kv_block_tokens);
}

std::vector<uint8_t> encode_meta(const State& s, const ModelInfo& c, const ModelFingerprint& fp,
                                 const ModelFingerprint& base, uint32_t encoding) {
    // At most kMaxModelNameBytes, cut at a UTF-8 character boundary.
    const std::string name = c.name.substr(
        0, utf8::character_start_at_or_before(c.name, std::min<size_t>(c.name.size(), kMaxModelNameBytes)));
    std::vector<uint8_t> m(kMetaFixedBytesV2 + name.size(), 0);
    std::copy(fp.bytes.begin(), fp.bytes.end(), m.begin() + meta::fingerprint);
    if (fp != base) std::copy(base.bytes.begin(), base.bytes.end(), m.begin() + meta::base_fingerprint);
    store_le<int64_t>(&m[meta::n_vocab], c.n_vocab);
    store_le<int64_t>(&m[meta::n_layer], c.n_layer);
    store_le<int64_t>(&m[meta::n_embd_kv], c.n_embd_kv());
    store_le<int64_t>(&m[meta::n_ctx], s.n_ctx());
    store_le<int64_t>(&m[meta::n_tokens], s.n_tokens());
    store_le<uint32_t>(&m[meta::kv_block_tokens], static_cast<uint32_t>(kv_block_tokens));
    store_le<uint32_t>(&m[meta::cache_type], static_cast<uint32_t>(StateAccess::kv(s).type()));
    store_le<uint32_t>(&m[meta::kv_encoding], encoding);
    store_le<uint32_t>(&m[meta::name_bytes], static_cast<uint32_t>(name.size()));
    const RecurrentShape& shape = StateAccess::recurrent(s).shape();
    const StateOptions& options = StateAccess::options(s);
    store_le<int64_t>(&m[meta::n_kv_layers], StateAccess::kv(s).n_layer());
    store_le<int64_t>(&m[meta::n_evaluated], StateAccess::n_evaluated(s));
    store_le<int64_t>(&m[meta::n_recurrent_layers], shape.n_layer);
    store_le<int64_t>(&m[meta::conv_floats], shape.conv_floats);
    store_le<int64_t>(&m[meta::scan_floats], shape.scan_floats);
    store_le<int64_t>(&m[meta::n_checkpoints], static_cast<int64_t>(StateAccess::checkpoints(s).size()));
    store_le<int64_t>(&m[meta::checkpoint_interval], options.checkpoint_interval);
    store_le<uint64_t>(&m[meta::checkpoint_memory], options.checkpoint_memory);
    if (StateAccess::sliding_window(s) > 0) {  // version 3
        store_le<int64_t>(&m[meta::sliding_window], StateAccess::sliding_window(s));
        store_le<int64_t>(&m[meta::n_global_kv_layers], StateAccess::kv(s).n_global_layers());
        store_le<int64_t>(&m[meta::n_trimmed_blocks], file_trimmed_blocks(s));
    }
    std::memcpy(m.data() + kMetaFixedBytesV2, name.data(), name.size());
    return m;
}

std::vector<uint8_t> float_bytes(std::span<const float> f) {
    std::vector<uint8_t> b(f.size_bytes());
    if (!b.empty()) std::memcpy(b.data(), f.data(), b.size());
    return b;
}

// The 'checkpoints' section: every position (i64), then every state's floats in the same order, so that
// `state info` reads the positions without the states.
std::vector<uint8_t> encode_checkpoints(const std::vector<RecurrentCheckpoint>& checkpoints, uint64_t state_bytes) {
    std::vector<uint8_t> b(checkpoints.size() * (8 + state_bytes));
    uint8_t* at = b.data();
    for (const RecurrentCheckpoint& c : checkpoints) {
        store_le<int64_t>(at, c.pos);
        at += 8;
    }
    for (const RecurrentCheckpoint& c : checkpoints) {
        const std::span<const float> f = c.state.floats();
        if (!f.empty()) std::memcpy(at, f.data(), f.size_bytes());
        at += state_bytes;
    }
    return b;
}

std::vector<uint8_t> encode_sampler(const SamplerState& st) {
    const SamplerParams& p = st.params;
    std::vector<uint8_t> b(kSamplerFixedBytes + kLogitBiasEntryBytes * p.logit_bias.size(), 0);
    store_le<float>(&b[sampler::temperature], p.temperature);
    store_le<int32_t>(&b[sampler::top_k], p.top_k);
    store_le<float>(&b[sampler::top_p], p.top_p);
    store_le<float>(&b[sampler::min_p], p.min_p);
    store_le<float>(&b[sampler::repeat_penalty], p.repeat_penalty);
    store_le<int32_t>(&b[sampler::repeat_last_n], p.repeat_last_n);
    store_le<float>(&b[sampler::presence_penalty], p.presence_penalty);
    store_le<float>(&b[sampler::frequency_penalty], p.frequency_penalty);
    store_le<uint64_t>(&b[sampler::seed], p.seed);
    for (int i = 0; i < 4; ++i) store_le<uint64_t>(&b[sampler::rng + 8 * i], st.rng[static_cast<size_t>(i)]);
    store_le<uint32_t>(&b[sampler::n_logit_bias], static_cast<uint32_t>(p.logit_bias.size()));
    uint8_t* e = b.data() + kSamplerFixedBytes;
    for (const auto& [id, bias] : p.logit_bias) {
        store_le<int32_t>(e, id);
        store_le<float>(e + 4, bias);
        e += kLogitBiasEntryBytes;
    }
    return b;
}

// Calls `emit` with the KV section's bytes in order: per block, the K part then the V part, each
// [n_layer][kv_block_tokens][row] in `encoding` (the first n_trimmed blocks: the global layers only);
// rows past n_tokens are zero.
void for_each_kv_part(const KvCache& kv, uint32_t encoding, int64_t n_trimmed,
                      const std::function<void(const uint8_t*, size_t)>& emit) {
    const int64_t n_layer = kv.n_layer(), n_embd = kv.n_embd_kv(), n_tokens = kv.n_tokens();
    const uint64_t cache_row = kv.row_bytes();
    const uint64_t out_row = kv_row_bytes(encoding, n_embd);
    const bool same_type = encoding == static_cast<uint32_t>(kv.type());
    KvBlockStaging staging;  // block bytes as host bytes
    std::vector<uint8_t> scratch;
    std::vector<float> row_f32(static_cast<size_t>((n_embd + 31) / 32 * 32), 0.0f);  // zero tail = q8_0 padding
    // The cache's layer index (within a whole block) of each layer a trimmed block stores.
    std::vector<int64_t> global_layers;
    for (int64_t layer = 0; layer < n_layer; ++layer) {
        if (kv.is_global_layer(layer)) global_layers.push_back(layer);
    }

    for (int64_t b = 0; b < kv.n_blocks(); ++b) {
        const int64_t used = std::min<int64_t>(kv_block_tokens, n_tokens - b * kv_block_tokens);
        const bool trimmed_out = b < n_trimmed;       // stored trimmed
        const bool trimmed_in = kv.block_trimmed(b);  // held trimmed (then also stored so)
        const int64_t out_layers = trimmed_out ? kv.n_global_layers() : n_layer;
        const uint64_t part_bytes = static_cast<uint64_t>(out_layers) * kv_block_tokens * out_row;
        for (const KvHalf half : {KvHalf::keys, KvHalf::values}) {
            const uint8_t* part = staging.read(kv.block(b), half).data();
            if (same_type && used == kv_block_tokens && trimmed_out == trimmed_in) {
                emit(part, part_bytes);  // straight from the cache: no copy
                continue;
            }
            scratch.assign(part_bytes, 0);
            for (int64_t out_layer = 0; out_layer < out_layers; ++out_layer) {
                // Source layer within the held block's layout.
                const int64_t layer =
                    trimmed_out && !trimmed_in ? global_layers[static_cast<size_t>(out_layer)] : out_layer;
                for (int64_t r = 0; r < used; ++r) {
                    const uint64_t in_row = static_cast<uint64_t>(layer) * kv_block_tokens + static_cast<uint64_t>(r);
                    const uint64_t row = static_cast<uint64_t>(out_layer) * kv_block_tokens + static_cast<uint64_t>(r);
                    const uint8_t* src = part + in_row * cache_row;
                    uint8_t* dst = scratch.data() + row * out_row;
                    if (same_type) {
                        std::memcpy(dst, src, cache_row);
                    } else {
                        dequantize_row(kv.type(), src, row_f32.data(), n_embd);
                        quantize_row_q8_0(row_f32.data(), dst, static_cast<int64_t>(row_f32.size()));
                    }
                }
            }
            emit(scratch.data(), part_bytes);
        }
    }
}

// The KV section: compressed into memory, or (raw) described here and streamed by write_kv_raw.
Section kv_section(const KvCache& kv, uint32_t encoding, int64_t n_trimmed, bool compress) {
    Section s;
    s.type = kSectionKv;
    const uint64_t layer_bytes = 2 * kv_block_tokens * kv_row_bytes(encoding, kv.n_embd_kv());  // K and V
    s.raw_bytes = static_cast<uint64_t>(kv.n_blocks() - n_trimmed) * static_cast<uint64_t>(kv.n_layer()) * layer_bytes +
                  static_cast<uint64_t>(n_trimmed) * static_cast<uint64_t>(kv.n_global_layers()) * layer_bytes;
    if (compress && s.raw_bytes > 0) {
        Compressor c(s.raw_bytes);
        for_each_kv_part(kv, encoding, n_trimmed, [&](const uint8_t* p, size_t n) { c.add(p, n); });
        std::vector<uint8_t> packed = c.finish();
        if (compression_pays(s.raw_bytes, packed.size())) {
            s.flags |= kFlagZstd;
            s.stored = std::move(packed);
            s.stored_bytes = s.stored.size();
            s.checksum = XXH3_64bits(s.stored.data(), s.stored.size());
            return s;
        }
    }
    s.streamed = true;
    s.stored_bytes = s.raw_bytes;
    return s;
}

uint64_t write_kv_raw(const KvCache& kv, uint32_t encoding, int64_t n_trimmed, uint64_t offset, ByteSink& sink) {
    std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> hash(XXH3_createState(), &XXH3_freeState);
    if (!hash || XXH3_64bits_reset(hash.get()) == XXH_ERROR) throw Error(ErrorCode::internal, "cannot initialise XXH3");
    for_each_kv_part(kv, encoding, n_trimmed, [&](const uint8_t* p, size_t n) {
        XXH3_64bits_update(hash.get(), p, n);
        sink.write_at(offset, p, n);
        offset += n;
    });
    return XXH3_64bits_digest(hash.get());
}

class MemorySink final : public ByteSink {
public:
    void write_at(uint64_t offset, const uint8_t* data, size_t n) override {
        if (bytes.size() < offset + n) bytes.resize(offset + n);
        if (n > 0) std::memcpy(bytes.data() + offset, data, n);
    }
    void finish(uint64_t total) override { bytes.resize(total); }
    std::vector<uint8_t> bytes;
};

[[noreturn]] void throw_write_error(const std::string& path, const std::string& what, int saved_errno) {
    throw Error(ErrorCode::output, "cannot save state file '" + path + "': " + what + ": " +
                                       std::strerror(saved_errno) + "; any previous file at that path is unchanged");
}

class FileSink final : public ByteSink {
public:
    FileSink(int fd, std::string path, std::string temp_path)
        : fd_(fd), path_(std::move(path)), temp_(std::move(temp_path)) {}
    void write_at(uint64_t offset, const uint8_t* data, size_t n) override {
        while (n > 0) {
            const ssize_t w = ::pwrite(fd_, data, n, static_cast<off_t>(offset));
            if (w < 0) {
                if (errno == EINTR) continue;
                throw_write_error(path_, "writing '" + temp_ + "'", errno);
            }
            if (w == 0) throw_write_error(path_, "writing '" + temp_ + "'", ENOSPC);
            data += w;
            n -= static_cast<size_t>(w);
            offset += static_cast<uint64_t>(w);
        }
    }
    void finish(uint64_t total) override {
        if (::ftruncate(fd_, static_cast<off_t>(total)) != 0) throw_write_error(path_, "sizing '" + temp_ + "'", errno);
    }

private:
    int fd_;
    std::string path_, temp_;
};

}  // namespace

void encode_state(const State& state, const SaveOptions& options, ByteSink& sink, std::string_view session) {
    const Model* model = StateAccess::model(state);
    const KvCache& kv = StateAccess::kv(state);
    const std::span<const float> last_logits = state.last_logits();
    if (model == nullptr)
        throw Error(ErrorCode::invalid_argument, "cannot save a state that has no model (moved from?)");
    const ModelInfo& c = model->info();
    const std::string what = "cannot save the state of model '" + model->path() + "'";
    const RecurrentState& recurrent = StateAccess::recurrent(state);
    // Only a recurrent or a sliding-window state lags behind its tokens (after a truncate; the rest are
    // evaluated again).
    const bool may_lag = !recurrent.empty() || StateAccess::sliding_window(state) > 0;
    if (may_lag ? state.n_tokens() < kv.n_tokens() : state.n_tokens() != kv.n_tokens()) {
        throw Error(ErrorCode::internal, what + ": it holds " + std::to_string(state.n_tokens()) + " tokens but " +
                                             std::to_string(kv.n_tokens()) + " KV positions");
    }
    if (!last_logits.empty() && static_cast<int64_t>(last_logits.size()) != c.n_vocab) {
        throw Error(ErrorCode::internal, what + ": its logits have " + std::to_string(last_logits.size()) +
                                             " entries for a vocabulary of " + std::to_string(c.n_vocab));
    }
    if (const SamplerState* sampler = state.sampler_state())
        validate_sampler_state(*sampler, c.n_vocab, ErrorCode::invalid_argument, what);

    const KvType file_kv_type = options.file_kv_type.value_or(kv.kv_type());
    if (file_kv_type != kv.kv_type() && file_kv_type != KvType::q8_0) {
        // (A q8_0 cache is stored only as itself: q8_0.)
        const std::string own(kv_type_name(kv.kv_type()));
        throw Error(ErrorCode::invalid_argument,
                    what + ": its " + own + " KV can be stored as " + own +
                        (kv.kv_type() == KvType::q8_0 ? std::string() : std::string(" or q8_0")) + ", not " +
                        std::string(kv_type_name(file_kv_type)));
    }
    const auto encoding = static_cast<uint32_t>(tensor_type_of(file_kv_type));
    const ModelFingerprint base = cached_model_fingerprint(*model);
    const ModelFingerprint fp = state_fingerprint(*model, state);  // == base without adapters

    std::vector<Section> sections;
    sections.push_back(small_section(kSectionMeta, encode_meta(state, c, fp, base, encoding), options.compress));
    std::vector<uint8_t> tokens(state.tokens().size() * 4);
    if (!tokens.empty()) std::memcpy(tokens.data(), state.tokens().data(), tokens.size());
    sections.push_back(small_section(kSectionTokens, std::move(tokens), options.compress));
    if (!last_logits.empty()) {
        std::vector<uint8_t> logits(last_logits.size() * 4);
        std::memcpy(logits.data(), last_logits.data(), logits.size());
        sections.push_back(small_section(kSectionLogits, std::move(logits), options.compress));
    }
    if (const SamplerState* sampler = state.sampler_state())
        sections.push_back(small_section(kSectionSampler, encode_sampler(*sampler), options.compress));
    if (!session.empty()) {
        if (session.size() > kMaxSessionBytes) {
            throw Error(ErrorCode::invalid_argument, what + ": its session data (" + std::to_string(session.size()) +
                                                         " bytes) exceeds the " + std::to_string(kMaxSessionBytes) +
                                                         " a state file allows");
        }
        sections.push_back(
            small_section(kSectionSession, std::vector<uint8_t>(session.begin(), session.end()), options.compress));
    }
    {
        // What computed the KV; exact only when it is bitwise what these numerics give (not decoded from
        // q8_0 or another build's numerics, and stored in the cache's own type).
        const Numerics numerics = current_numerics();
        const bool exact = StateAccess::kv_exact(state) && file_kv_type == kv.kv_type();
        std::vector<uint8_t> b(kNumericsBytes, 0);
        store_le<uint32_t>(&b[0], numerics.epoch);
        store_le<uint32_t>(&b[4], static_cast<uint32_t>(numerics.path));
        store_le<uint32_t>(&b[8], exact ? kNumericsKvExact : 0u);
        sections.push_back(small_section(kSectionNumerics, std::move(b), false));
    }
    // The recurrent state and checkpoints: always f32 as in memory (the KV encoding does not apply).
    if (!recurrent.empty()) {
        sections.push_back(small_section(kSectionRecurrent, float_bytes(recurrent.floats()), options.compress));
        const auto& checkpoints = StateAccess::checkpoints(state);
        if (!checkpoints.empty()) {
            sections.push_back(small_section(kSectionCheckpoints, encode_checkpoints(checkpoints, recurrent.bytes()),
                                             options.compress));
        }
    }
    const int64_t n_trimmed = file_trimmed_blocks(state);
    sections.push_back(kv_section(kv, encoding, n_trimmed, options.compress));  // last: the big one

    uint64_t end = align_up(kHeaderBytes + kSectionEntryBytes * sections.size(), kSectionAlignment);
    uint64_t file_bytes = end;
    for (Section& sec : sections) {
        sec.offset = align_up(end, kSectionAlignment);
        end = sec.offset + sec.stored_bytes;
        file_bytes = std::max(file_bytes, end);
    }
    for (Section& sec : sections) {
        if (sec.streamed) {
            sec.checksum = write_kv_raw(kv, encoding, n_trimmed, sec.offset, sink);
        } else {
            sink.write_at(sec.offset, sec.stored.data(), sec.stored.size());
        }
    }

    // Header and table last: they carry the checksums.
    std::vector<uint8_t> head(kHeaderBytes + kSectionEntryBytes * sections.size(), 0);
    for (size_t i = 0; i < sections.size(); ++i) {
        store_section_entry(head.data() + kHeaderBytes + kSectionEntryBytes * i, sections[i]);
    }
    std::memcpy(head.data() + header::magic, kMagic, sizeof(kMagic));
    store_le<uint32_t>(&head[header::format_version],
                       StateAccess::sliding_window(state) > 0 ? kFormatVersion : kFormatVersionWithoutSliding);
    store_le<uint32_t>(&head[header::header_bytes], static_cast<uint32_t>(kHeaderBytes));
    store_le<uint32_t>(&head[header::section_count], static_cast<uint32_t>(sections.size()));
    store_le<uint32_t>(&head[header::section_entry_bytes], static_cast<uint32_t>(kSectionEntryBytes));
    store_le<uint64_t>(&head[header::section_table_offset], kHeaderBytes);
    store_le<uint64_t>(&head[header::file_bytes], file_bytes);
    store_le<uint64_t>(&head[header::table_checksum],
                       XXH3_64bits(head.data() + kHeaderBytes, head.size() - kHeaderBytes));
    store_le<uint64_t>(&head[header::header_checksum], XXH3_64bits(head.data(), header::header_checksum));
    sink.write_at(0, head.data(), head.size());
    sink.finish(file_bytes);
}

std::vector<uint8_t> encode_state_to_memory(const State& state, const SaveOptions& options) {
    MemorySink sink;
    encode_state(state, options, sink);
    return std::move(sink.bytes);
}

}  // namespace kvstash::state_file

namespace kvstash {

void save_state(const State& state, const std::string& path, const SaveOptions& options) {
    save_state(state, path, options, {});
}

void save_state(const State& state, const std::string& path, const SaveOptions& options, std::string_view session) {
    atomic_file::write(path,
                       [&](int fd, const std::string& temp) {
                           state_file::FileSink sink(fd, path, temp);
                           state_file::encode_state(state, options, sink, session);
                       },
                       {atomic_file::Durability::file_and_directory, "state file"});
}

}  // namespace kvstash
