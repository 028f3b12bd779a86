#include "kv/recurrent_state.h"

#include "kvstash/error.h"

namespace kvstash {

RecurrentState::RecurrentState(const RecurrentShape& shape) : shape_(shape) {
    if (shape.n_layer < 0 || shape.conv_floats < 0 || shape.scan_floats < 0) {
        throw Error(ErrorCode::internal, "RecurrentState: negative shape");
    }
    if (shape.n_layer > 0) data_ = std::make_shared<std::vector<float>>(static_cast<size_t>(shape.floats()), 0.0f);
}

void RecurrentState::make_unique() {
    if (data_.use_count() > 1) data_ = std::make_shared<std::vector<float>>(*data_);
}

float* RecurrentState::writable_conv(int64_t layer) {
    make_unique();
    return data_->data() + layer * shape_.layer_floats();
}

std::span<const float> RecurrentState::floats() const {
    if (!data_) return {};
    return {data_->data(), data_->size()};
}

std::span<float> RecurrentState::writable_floats() {
    if (!data_) return {};
    make_unique();
    return {data_->data(), data_->size()};
}

}  // namespace kvstash
