#include "state/adapter_fingerprint.h"

#include <xxhash.h>

#include <cstring>

#include "model/adapter_weights.h"

namespace kvstash {

ModelFingerprint combined_fingerprint(const Model& model, const AdapterSet* adapters) {
    const ModelFingerprint base = cached_model_fingerprint(model);
    if (adapters == nullptr || adapters->empty()) return base;
    static const char kDomain[] = "kvstash.model+adapters.v1";
    const auto& set = AdapterAccess::impl(*adapters).fingerprint;
    uint8_t input[sizeof kDomain + 32];
    std::memcpy(input, kDomain, sizeof kDomain);
    std::memcpy(input + sizeof kDomain, base.bytes.data(), 16);
    std::memcpy(input + sizeof kDomain + 16, set.data(), 16);
    XXH128_canonical_t canonical;
    XXH128_canonicalFromHash(&canonical, XXH3_128bits(input, sizeof input));
    ModelFingerprint fp;
    std::memcpy(fp.bytes.data(), canonical.digest, fp.bytes.size());
    return fp;
}

}  // namespace kvstash
