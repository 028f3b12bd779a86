// Model fingerprints: a canonical byte stream of the model's tensors and computation-relevant metadata,
// hashed with XXH3-128, and a process-wide cache keyed by file identity.
#include "state/fingerprint.h"
#include "state/fingerprint_cache.h"

#include <sys/stat.h>
#include <xxhash.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>
#include <tuple>
#include <vector>

#include "format/gguf.h"
#include "kvstash/error.h"
#include "model/model_access.h"

namespace kvstash {
namespace {

// Feeds little-endian fields into an XXH3-128 streaming state.
class Hasher {
public:
    Hasher() : state_(XXH3_createState()) {
        if (state_ == nullptr || XXH3_128bits_reset(state_) == XXH_ERROR) {
            throw Error(ErrorCode::internal, "cannot initialise the XXH3 hash state");
        }
    }
    ~Hasher() { XXH3_freeState(state_); }
    Hasher(const Hasher&) = delete;
    Hasher& operator=(const Hasher&) = delete;

    void bytes(const void* data, size_t n) { XXH3_128bits_update(state_, data, n); }
    void u32(uint32_t v) { bytes(&v, 4); }
    void u64(uint64_t v) { bytes(&v, 8); }
    void string(std::string_view s) {
        u64(s.size());
        bytes(s.data(), s.size());
    }

    ModelFingerprint digest() const {
        XXH128_canonical_t canonical;
        XXH128_canonicalFromHash(&canonical, XXH3_128bits_digest(state_));
        ModelFingerprint fp;
        std::copy(std::begin(canonical.digest), std::end(canonical.digest), fp.bytes.begin());
        return fp;
    }

private:
    XXH3_state_t* state_;
};

bool is_integer(gguf::ValueType t) {
    using V = gguf::ValueType;
    return t == V::UINT8 || t == V::INT8 || t == V::UINT16 || t == V::INT16 || t == V::UINT32 || t == V::INT32 ||
           t == V::UINT64 || t == V::INT64 || t == V::BOOL;
}

void hash_value(Hasher& h, const gguf::Value& v) {
    h.u32(static_cast<uint32_t>(v.type));
    if (is_integer(v.type)) {
        h.u64(v.uinteger);
    } else if (v.type == gguf::ValueType::FLOAT32 || v.type == gguf::ValueType::FLOAT64) {
        h.bytes(&v.real, 8);
    } else if (v.type == gguf::ValueType::STRING) {
        h.string(v.string);
    } else if (v.type == gguf::ValueType::ARRAY) {
        h.u32(static_cast<uint32_t>(v.array_type));
        h.u64(v.array.size());
        for (const gguf::Value& element : v.array) hash_value(h, element);
    }
}

// The metadata that changes what the model computes or how text maps to tokens.
bool is_fingerprinted_key(std::string_view key, std::string_view arch) {
    if (key == "general.architecture") return true;
    if (key.starts_with("tokenizer.ggml.")) return true;
    return !arch.empty() && key.size() > arch.size() && key.starts_with(arch) && key[arch.size()] == '.';
}

// A model directory (model/hf_dir.h) as one identity: XXH3-64 of every regular file's name, device, inode, size and
// mtime in name order (device field all ones, so it cannot equal a real file's); its size is the bytes of its
// safetensors files, which must still be `loaded_bytes` (what Model::load mapped), else nullopt (not cached).
std::optional<FileIdentity> directory_identity(const std::string& dir, uint64_t loaded_bytes) {
    std::error_code ec;
    std::vector<std::filesystem::path> files;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
        if (entry.is_regular_file(ec)) files.push_back(entry.path());
    }
    if (ec) return std::nullopt;
    std::sort(files.begin(), files.end());
    XXH3_state_t* state = XXH3_createState();
    if (!state) return std::nullopt;
    XXH3_64bits_reset(state);
    uint64_t safetensors_bytes = 0;
    int64_t newest = 0;
    for (const auto& f : files) {
        struct stat st {};
        if (::stat(f.c_str(), &st) != 0) {
            XXH3_freeState(state);
            return std::nullopt;
        }
        const std::string name = f.filename().string();
        const int64_t mtime = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
        const uint64_t fields[] = {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino),
                                   static_cast<uint64_t>(st.st_size), static_cast<uint64_t>(mtime), name.size()};
        XXH3_64bits_update(state, fields, sizeof(fields));
        XXH3_64bits_update(state, name.data(), name.size());
        if (name.ends_with(".safetensors")) safetensors_bytes += static_cast<uint64_t>(st.st_size);
        newest = std::max(newest, mtime);
    }
    const uint64_t digest = XXH3_64bits_digest(state);
    XXH3_freeState(state);
    if (safetensors_bytes != loaded_bytes) return std::nullopt;
    return FileIdentity{~uint64_t{0}, digest, safetensors_bytes, newest};
}

}  // namespace

std::string ModelFingerprint::hex() const {
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string s;
    s.reserve(32);
    for (uint8_t b : bytes) {
        s += kDigits[b >> 4];
        s += kDigits[b & 15];
    }
    return s;
}

ModelFingerprint compute_model_fingerprint(const gguf::File& file) {
    Hasher h;
    h.string("kvstash model fingerprint v1");

    // Tensors in name order, so that the order of tensors in the file does not matter.
    std::vector<const gguf::TensorInfo*> tensors;
    tensors.reserve(file.tensors().size());
    for (const gguf::TensorInfo& t : file.tensors()) tensors.push_back(&t);
    std::sort(tensors.begin(), tensors.end(), [](auto* a, auto* b) { return a->name < b->name; });
    h.u64(tensors.size());
    for (const gguf::TensorInfo* t : tensors) {
        h.string(t->name);
        h.u32(t->raw_type);
        h.u32(static_cast<uint32_t>(t->dims.size()));
        for (int64_t d : t->dims) h.u64(static_cast<uint64_t>(d));
        h.u64(t->n_bytes);
        h.bytes(file.tensor_data(*t), t->n_bytes);
    }

    const std::string arch = file.get_string("general.architecture").value_or("");
    std::vector<const std::pair<std::string, gguf::Value>*> keys;
    for (const auto& kv : file.metadata()) {
        if (is_fingerprinted_key(kv.first, arch)) keys.push_back(&kv);
    }
    std::sort(keys.begin(), keys.end(), [](auto* a, auto* b) { return a->first < b->first; });
    h.u64(keys.size());
    for (const auto* kv : keys) {
        h.string(kv->first);
        hash_value(h, kv->second);
    }
    return h.digest();
}

ModelFingerprint cached_model_fingerprint(const Model& model) {
    const gguf::File& file = *ModelAccess::impl(model).file;
    struct stat st {};
    // Identity of the file at the model's path now (of the set of files, for a model directory). A file
    // replaced since Model::load (different size) is hashed from the mapping and not cached.
    std::optional<FileIdentity> maybe_id;
    if (::stat(file.path().c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
        maybe_id = directory_identity(file.path(), file.size());
    } else if (::stat(file.path().c_str(), &st) == 0 && static_cast<uint64_t>(st.st_size) == file.size()) {
        maybe_id = FileIdentity{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino),
                                static_cast<uint64_t>(st.st_size),
                                static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec};
    }
    if (!maybe_id) return compute_model_fingerprint(file);
    const FileIdentity id = *maybe_id;

    static std::mutex mutex;
    static std::map<FileIdentity, ModelFingerprint> cache;
    {
        std::lock_guard lock(mutex);
        if (auto it = cache.find(id); it != cache.end()) return it->second;
    }
    // Then the on-disk cache shared by processes; then hash. Hashed outside the lock: two threads may
    // both hash the same new file once; both get one answer.
    ModelFingerprint fp;
    if (const auto hex = fingerprint_cache_lookup(id)) {
        for (size_t i = 0; i < fp.bytes.size(); ++i)
            fp.bytes[i] = static_cast<uint8_t>(std::stoi(hex->substr(2 * i, 2), nullptr, 16));
    } else {
        fp = compute_model_fingerprint(file);
        fingerprint_cache_store(id, fp.hex());
    }
    std::lock_guard lock(mutex);
    cache.emplace(id, fp);
    return fp;
}

std::string model_fingerprint(const Model& model) { return cached_model_fingerprint(model).hex(); }

}  // namespace kvstash
