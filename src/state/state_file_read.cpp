// The state file reader: a file whose layout state_file_layout.cpp has validated (magic, version,
// header, section table, meta) is checked against the model (fingerprint, shapes), then each section's
// checksum and contents are checked as they are decoded into a State. Allocations are sized only from
// declared sizes already checked against the model's shapes and the bytes actually present.
#include <sys/mman.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "format/mmap_file.h"
#include "format/tensor_type.h"
#include "kv/kv_block_hash.h"
#include "kv/kv_block_staging.h"
#include "kv/kv_tensor_type.h"
#include "kvstash/adapter.h"
#include "kvstash/error.h"
#include "model/model_access.h"
#include "state/adapter_fingerprint.h"
#include "state/fingerprint.h"
#include "state/state_access.h"
#include "state/state_file_reader.h"

namespace kvstash::state_file {
namespace {

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
        r.corrupt("section 'sampler' declares " + std::to_string(n_bias) + " logit_bias entries in " +
                  std::to_string(b.size()) + " bytes");
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
// copy from the mapping into each block half, hashed on the way: each half (368,640 B for SmolLM2) is
// hashed, then copied while it is still in L2, so the file's bytes come from memory once. The block
// halves come from KvBlockPool, not zero-filled and, on a repeated load, recycled (no page faults);
// the hash runs on xxHash's AVX-512 path where there is one. What is left is mostly the kernel's
// page-table work for the mapping, then the reads and the stores into the blocks (docs/benchmarks-history.md,
// "Saved states"). Smaller pieces (4-64 KiB, hashed and copied in L1) and MADV_POPULATE_READ of the
// section measured no faster.
void decode_kv(const Reader& r, const SectionEntry& s, const Meta& m, KvCache& kv) {
    const int64_t n_blocks = (m.n_evaluated + kv_block_tokens - 1) / kv_block_tokens;
    const uint64_t enc_row = kv_row_bytes(m.kv_encoding, m.n_embd_kv);
    const uint64_t whole_part_bytes = static_cast<uint64_t>(m.n_kv_layers) * kv_block_tokens * enc_row;
    const uint64_t trimmed_part_bytes = static_cast<uint64_t>(m.n_global_kv_layers) * kv_block_tokens * enc_row;
    const bool same_type = m.kv_encoding == m.cache_type;
    KvBlockHash hash;  // XXH3-64, on xxHash's AVX-512 path where the CPU has one
    std::unique_ptr<ZstdStream> zstd;
    if (s.compressed()) {
        r.verify_checksum(s);  // before feeding the bytes to the decompressor
        zstd = std::make_unique<ZstdStream>(r, s);
    }
    const uint8_t* src = r.bytes(s).data();
    std::vector<uint8_t> scratch(zstd && !same_type ? whole_part_bytes : 0);
    KvBlockStaging staging;  // host bytes that become the block's (in place in host memory)
    std::vector<float> row_f32(static_cast<size_t>((m.n_embd_kv + 31) / 32 * 32));

    for (int64_t b = 0; b < n_blocks; ++b) {
        // Block by block: memory follows the bytes actually decoded, not only the declared size. Trimmed
        // blocks (version 3) come first and hold the global layers only.
        const bool trimmed = b < m.n_trimmed_blocks;
        if (trimmed) {
            kv.grow_trimmed((b + 1) * kv_block_tokens);
        } else {
            kv.grow(std::min(m.n_evaluated, (b + 1) * kv_block_tokens));
        }
        const uint64_t part_bytes = trimmed ? trimmed_part_bytes : whole_part_bytes;
        const int64_t part_layers = trimmed ? m.n_global_kv_layers : m.n_kv_layers;
        for (int half = 0; half < 2 && part_bytes > 0; ++half) {  // no KV layers (Mamba): nothing stored
            uint8_t* dst = staging.write(kv.writable_block(b), half == 0 ? KvHalf::keys : KvHalf::values).data();
            const uint8_t* encoded = nullptr;
            if (zstd) {
                zstd->read(same_type ? dst : scratch.data(), part_bytes);
                encoded = scratch.data();
            } else {
                hash.update(src, part_bytes);
                if (same_type) std::memcpy(dst, src, part_bytes);
                encoded = src;
                src += part_bytes;
            }
            // q8_0 rows -> the cache's f16/f32 rows.
            for (int64_t row = 0; !same_type && row < part_layers * kv_block_tokens; ++row) {
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
            staging.commit();
        }
    }
    if (zstd) {
        zstd->finish();
    } else if (const uint64_t actual = hash.digest(); actual != s.checksum) {
        r.checksum_mismatch(s, actual);
    }
}

// Reads a section's raw bytes piece by piece into caller buffers (checksum verified first), so that
// the recurrent states land in their RecurrentStates without a second copy of the section.
class SectionReader {
public:
    SectionReader(const Reader& r, const SectionEntry& s) : src_(r.bytes(s).data()) {
        r.verify_checksum(s);
        if (s.compressed()) zstd_ = std::make_unique<ZstdStream>(r, s);
    }
    void read(void* dst, size_t n) {
        if (n == 0) return;
        if (zstd_) {
            zstd_->read(static_cast<uint8_t*>(dst), n);
        } else {
            std::memcpy(dst, src_, n);
            src_ += n;
        }
    }
    void finish() {
        if (zstd_) zstd_->finish();
    }

private:
    const uint8_t* src_;
    std::unique_ptr<ZstdStream> zstd_;
};

// The 'recurrent' and 'checkpoints' sections (sizes checked against the meta, shape against the model).
RecurrentState decode_recurrent(const Reader& r, const Meta& m) {
    RecurrentState state(m.recurrent);
    SectionReader in(r, *r.find(kSectionRecurrent));
    const std::span<float> f = state.writable_floats();
    in.read(f.data(), f.size_bytes());
    in.finish();
    return state;
}

std::vector<RecurrentCheckpoint> decode_checkpoints(const Reader& r, const Meta& m) {
    std::vector<RecurrentCheckpoint> out;
    const SectionEntry* s = r.find(kSectionCheckpoints);
    if (s == nullptr) return out;
    SectionReader in(r, *s);
    std::vector<int64_t> positions(static_cast<size_t>(m.n_checkpoints));
    in.read(positions.data(), positions.size() * sizeof(int64_t));
    for (size_t i = 0; i < positions.size(); ++i) {
        // The State's invariant: ascending, in [1, n_evaluated].
        const int64_t lo = i == 0 ? 1 : positions[i - 1] + 1;
        if (positions[i] < lo || positions[i] > m.n_evaluated) {
            r.corrupt("checkpoint " + std::to_string(i) + " is at position " + std::to_string(positions[i]) +
                      ", outside [" + std::to_string(lo) + ", " + std::to_string(m.n_evaluated) +
                      "] (checkpoints ascend and lie within the evaluated tokens)");
        }
    }
    out.reserve(positions.size());
    for (int64_t pos : positions) {
        RecurrentState state(m.recurrent);
        const std::span<float> f = state.writable_floats();
        in.read(f.data(), f.size_bytes());
        out.push_back({pos, std::move(state)});
    }
    in.finish();
    return out;
}

}  // namespace

State decode_state(const Model& model, std::span<const uint8_t> file, const std::string& display_name,
                   std::optional<std::string>* session, std::shared_ptr<const AdapterSet> adapters) {
    Reader r(file, display_name);
    r.parse_layout();
    const Meta m = r.read_meta();

    const ModelFingerprint base = cached_model_fingerprint(model);
    const ModelFingerprint fp = combined_fingerprint(model, adapters.get());
    const bool saved_with_adapters = m.base_fingerprint != ModelFingerprint{};
    const ModelFingerprint saved_base = saved_with_adapters ? m.base_fingerprint : m.fingerprint;
    if (m.fingerprint != fp && saved_base == base) {
        // The right model, other adapters: the KV was computed with other weights.
        const bool with_adapters = adapters != nullptr && !adapters->empty();
        r.fail(ErrorCode::invalid_argument,
               std::string("it was saved ") +
                   (saved_with_adapters ? "under adapters (model + adapters fingerprint " + m.fingerprint.hex() + ")"
                                        : "without adapters") +
                   ", but is being loaded " +
                   (with_adapters ? "under " + adapters->describe() + " (fingerprint " + fp.hex() + ")"
                                  : "without adapters") +
                   "; its KV was computed with other weights: load it under the adapters it was saved with");
    }
    if (m.fingerprint != fp) {
        r.fail(ErrorCode::invalid_argument,
               "it was saved from model '" + m.model_name + "' (fingerprint " + m.fingerprint.hex() + "), not from '" +
                   model.path() + "' (fingerprint " + fp.hex() + "); load it with the model it was saved from");
    }
    const ModelInfo& c = model.info();
    const RecurrentShape shape = ModelAccess::impl(model).config.recurrent_shape();
    auto shapes = [](int64_t n_vocab, int64_t n_layer, int64_t n_kv_layers, int64_t n_embd_kv,
                     const RecurrentShape& rs) {
        return "n_vocab " + std::to_string(n_vocab) + ", n_layer " + std::to_string(n_layer) + ", n_kv_layers " +
               std::to_string(n_kv_layers) + ", n_embd_kv " + std::to_string(n_embd_kv) + ", recurrent layers " +
               std::to_string(rs.n_layer) + " × (conv " + std::to_string(rs.conv_floats) + " + scan " +
               std::to_string(rs.scan_floats) + " floats)";
    };
    if (m.n_vocab != c.n_vocab || m.n_layer != c.n_layer || m.n_kv_layers != c.n_kv_layers ||
        m.n_embd_kv != c.n_embd_kv() || m.recurrent != shape) {
        r.corrupt("its shapes (" + shapes(m.n_vocab, m.n_layer, m.n_kv_layers, m.n_embd_kv, m.recurrent) +
                  ") do not match its model's (" + shapes(c.n_vocab, c.n_layer, c.n_kv_layers, c.n_embd_kv(), shape) +
                  ") although the fingerprints agree");
    }

    StateOptions options;
    options.kv_type = kv_type_of(static_cast<TensorType>(m.cache_type));
    options.n_ctx = m.n_ctx;
    options.checkpoint_interval = m.checkpoint_interval;
    options.checkpoint_memory = m.checkpoint_memory;
    options.adapters = std::move(adapters);
    State state(model, options);
    // Version 3: the sliding-window layers must be the model's (the trimmed blocks' layout follows them).
    const int64_t window = StateAccess::sliding_window(state);
    const int64_t n_global = StateAccess::kv(state).n_global_layers();
    if (r.version() >= 3 && (m.sliding_window != window || m.n_global_kv_layers != n_global)) {
        r.corrupt("its sliding window (" + std::to_string(m.sliding_window) + " positions, " +
                  std::to_string(m.n_global_kv_layers) + " global KV layers) is not its model's (" +
                  std::to_string(window) + ", " + std::to_string(n_global) + ")");
    }

    const std::vector<uint8_t> token_bytes = r.read_section(*r.find(kSectionTokens));
    std::vector<int32_t> tokens(static_cast<size_t>(m.n_tokens));
    if (!token_bytes.empty()) std::memcpy(tokens.data(), token_bytes.data(), token_bytes.size());
    for (size_t i = 0; i < tokens.size(); ++i) {
        if (tokens[i] < 0 || tokens[i] >= c.n_vocab) {
            r.corrupt("token " + std::to_string(tokens[i]) + " at position " + std::to_string(i) +
                      " is outside the vocabulary of " + std::to_string(c.n_vocab));
        }
    }
    std::vector<float> last_logits;
    if (const SectionEntry* logits = r.find(kSectionLogits)) {
        const std::vector<uint8_t> b = r.read_section(*logits);
        last_logits.resize(static_cast<size_t>(c.n_vocab));
        std::memcpy(last_logits.data(), b.data(), b.size());
    }
    std::optional<SamplerState> sampler_state;
    if (const SectionEntry* sampler = r.find(kSectionSampler))
        sampler_state = decode_sampler(r, r.read_section(*sampler), c.n_vocab);
    decode_kv(r, *r.find(kSectionKv), m, StateAccess::kv_to_restore(state));
    RecurrentState recurrent;
    std::vector<RecurrentCheckpoint> checkpoints;
    if (m.recurrent.n_layer > 0) {
        recurrent = decode_recurrent(r, m);
        checkpoints = decode_checkpoints(r, m);
    }
    // The KV is what recomputing here would give only when stored exactly (not as q8_0) by a writer with
    // this process's numerics that marked it exact (the recurrent state is always stored exactly, but was
    // computed by the same numerics).
    const FileNumerics numerics = r.read_numerics();
    const bool exact = m.kv_encoding == m.cache_type && numerics.kv_exact && numerics.numerics == current_numerics();
    StateAccess::restore(state, std::move(tokens), std::move(last_logits), std::move(sampler_state), exact,
                         std::move(recurrent), std::move(checkpoints));
    if (session != nullptr) {
        session->reset();
        if (const SectionEntry* sec = r.find(kSectionSession)) {
            const std::vector<uint8_t> b = r.read_section(*sec);
            session->emplace(b.begin(), b.end());
        }
    }
    return state;
}

StateFileInfo inspect_state_bytes(std::span<const uint8_t> file, const std::string& display_name, Checksums checksums) {
    Reader r(file, display_name);
    r.parse_layout();
    const Meta m = r.read_meta();
    StateFileInfo info;
    info.format_version = r.version();
    info.model_fingerprint = m.fingerprint.hex();
    if (m.base_fingerprint != ModelFingerprint{}) info.base_model_fingerprint = m.base_fingerprint.hex();
    info.model_name = m.model_name;
    info.n_tokens = m.n_tokens;
    info.n_ctx = m.n_ctx;
    // parse_layout admits the cache type (f16 / f32) or q8_0 only.
    info.kv_type = kv_type_of(static_cast<TensorType>(m.kv_encoding));
    info.lossy_kv = m.kv_encoding != m.cache_type;
    const FileNumerics numerics = r.read_numerics();
    info.numerics = describe(numerics.numerics);
    info.exact_here = !info.lossy_kv && numerics.kv_exact && numerics.numerics == current_numerics();
    info.has_logits = r.find(kSectionLogits) != nullptr;
    info.has_sampler = r.find(kSectionSampler) != nullptr;
    info.has_session = r.find(kSectionSession) != nullptr;
    info.file_bytes = file.size();
    info.kv_bytes = r.find(kSectionKv)->stored_bytes;
    info.n_evaluated = m.n_evaluated;
    info.n_recurrent_layers = m.recurrent.n_layer;
    info.recurrent_state_bytes = m.recurrent_bytes();
    info.sliding_window = m.sliding_window;
    if (m.n_trimmed_blocks > 0) info.truncate_floor = m.n_trimmed_blocks * kv_block_tokens + m.sliding_window - 1;
    if (const SectionEntry* s = r.find(kSectionRecurrent)) info.recurrent_stored_bytes += s->stored_bytes;
    if (const SectionEntry* s = r.find(kSectionCheckpoints)) info.recurrent_stored_bytes += s->stored_bytes;
    for (const SectionEntry& s : r.sections()) info.compressed = info.compressed || s.compressed();
    if (checksums == Checksums::verify) {
        info.checksums_ok = true;
        for (const SectionEntry& s : r.sections()) {
            try {
                r.verify_checksum(s);
            } catch (const Error& e) {
                info.checksums_ok = false;
                if (info.checksum_error.empty()) info.checksum_error = e.what();
            }
        }
    }
    if (const SectionEntry* s = r.find(kSectionCheckpoints);
        s != nullptr && (info.checksums_ok || checksums == Checksums::skip)) {
        // The positions lead the section: read (and, compressed, decompress) only them.
        info.checkpoint_positions.resize(static_cast<size_t>(m.n_checkpoints));
        const auto n = info.checkpoint_positions.size() * sizeof(int64_t);
        if (s->compressed()) {
            ZstdStream z(r, *s);
            z.read(reinterpret_cast<uint8_t*>(info.checkpoint_positions.data()), n);
        } else {
            std::memcpy(info.checkpoint_positions.data(), r.bytes(*s).data(), n);
        }
    }
    return info;
}

}  // namespace kvstash::state_file

namespace kvstash {

State load_state(const Model& model, const std::string& path) { return load_state(model, path, nullptr); }

State load_state(const Model& model, const std::string& path, std::optional<std::string>* session) {
    const MappedFile map = MappedFile::open(path);
    if (map.size() > 0) {
        // One sequential pass: ask for read-ahead.
        ::madvise(const_cast<uint8_t*>(map.data()), map.size(), MADV_SEQUENTIAL);
    }
    return state_file::decode_state(model, {map.data(), map.size()}, path, session);
}

State load_state(const Model& model, const std::string& path, const LoadOptions& options,
                 std::optional<std::string>* session) {
    const MappedFile map = MappedFile::open(path);
    if (map.size() > 0) ::madvise(const_cast<uint8_t*>(map.data()), map.size(), MADV_SEQUENTIAL);
    return state_file::decode_state(model, {map.data(), map.size()}, path, session, options.adapters);
}

std::string process_numerics() { return describe(current_numerics()); }

StateFileInfo inspect_state_file(const std::string& path, Checksums checksums) {
    const MappedFile map = MappedFile::open(path);
    return state_file::inspect_state_bytes({map.data(), map.size()}, path, checksums);
}

}  // namespace kvstash
