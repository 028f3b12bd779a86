// The identity a State's computation depends on: its model and its adapter set. With no adapters it is
// the model's fingerprint itself (so files and caches made before adapters existed stay valid); with
// adapters, XXH3-128("kvstash.model+adapters.v1\0" | model fingerprint | adapter-set fingerprint). State
// files, prefix-cache keys and block files carry this one.
#pragma once

#include "kvstash/adapter.h"
#include "kvstash/state.h"
#include "state/fingerprint.h"

namespace kvstash {

ModelFingerprint combined_fingerprint(const Model& model, const AdapterSet* adapters);
inline ModelFingerprint state_fingerprint(const Model& model, const State& state) {
    return combined_fingerprint(model, state.adapters().get());
}

}  // namespace kvstash
