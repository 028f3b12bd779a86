// The fixed-size state of a sequence's recurrent (Mamba) layers after some number of tokens, and the
// checkpoints of it that make a recurrent sequence rewindable.
//
// Per recurrent layer (in layer order): the convolution window, (d_conv - 1) × conv_channels f32 (the
// last inputs, oldest first), then the scan state, d_inner × d_state f32. Unlike the KV cache it cannot
// be cut back to an earlier position: rewinding means restoring a checkpoint taken at or before the
// target and evaluating the tokens after it again (State::truncate).
//
// A RecurrentState's data is shared by copies (forks, checkpoints) and copied on the first write, so
// copying is O(1) whatever the model size; the first write after a copy costs one copy of the state.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace kvstash {

struct RecurrentShape {
    int64_t n_layer = 0;      // recurrent layers
    int64_t conv_floats = 0;  // per layer: (d_conv - 1) × conv_channels
    int64_t scan_floats = 0;  // per layer: d_inner × d_state

    int64_t layer_floats() const { return conv_floats + scan_floats; }
    int64_t floats() const { return n_layer * layer_floats(); }
    bool operator==(const RecurrentShape&) const = default;
};

class RecurrentState {
public:
    RecurrentState() = default;  // a model without recurrent layers
    // All zeros: the state before the first token.
    explicit RecurrentState(const RecurrentShape& shape);

    const RecurrentShape& shape() const { return shape_; }
    bool empty() const { return shape_.n_layer == 0; }
    uint64_t bytes() const { return static_cast<uint64_t>(shape_.floats()) * sizeof(float); }

    const float* conv(int64_t layer) const { return data_->data() + layer * shape_.layer_floats(); }
    const float* scan(int64_t layer) const { return conv(layer) + shape_.conv_floats; }
    // Writable views: un-share the data first (copy-on-write).
    float* writable_conv(int64_t layer);
    float* writable_scan(int64_t layer) { return writable_conv(layer) + shape_.conv_floats; }

    // Every float, layer after layer (state files, prefix cache).
    std::span<const float> floats() const;
    std::span<float> writable_floats();

    // Whether the two share their data (no write since one was copied from the other).
    bool shares_with(const RecurrentState& other) const { return data_ == other.data_; }
    // How many RecurrentStates share the data (1: this one alone): the prefix cache keeps a checkpoint
    // that a live State shares.
    long use_count() const { return data_.use_count(); }

private:
    void make_unique();

    RecurrentShape shape_;
    std::shared_ptr<std::vector<float>> data_;
};

// The recurrent state after the first `pos` tokens of a sequence.
struct RecurrentCheckpoint {
    int64_t pos = 0;
    RecurrentState state;
};

}  // namespace kvstash
