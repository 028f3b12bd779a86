#include "support/eval_helpers.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "support/paths.h"

namespace kvstash::test {

std::vector<float> eval_logits(const std::shared_ptr<const Model>& model, const std::vector<int32_t>& tokens,
                               const std::vector<int64_t>& chunk_sizes, int n_threads, KvType kv_type) {
    Evaluator evaluator(model, n_threads);
    State state(*model, StateOptions{kv_type, static_cast<int64_t>(tokens.size()) + 8});
    std::vector<float> all;
    std::vector<float> chunk_logits;
    size_t done = 0;
    size_t which = 0;
    while (done < tokens.size()) {
        const auto size =
            std::min<size_t>(static_cast<size_t>(chunk_sizes[which % chunk_sizes.size()]), tokens.size() - done);
        evaluator.eval(state, std::span<const int32_t>(tokens.data() + done, size), &chunk_logits);
        all.insert(all.end(), chunk_logits.begin(), chunk_logits.end());
        done += size;
        ++which;
    }
    return all;
}

std::vector<int32_t> pseudo_random_tokens(int64_t count, int64_t n_vocab, uint64_t seed) {
    std::vector<int32_t> out;
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < count; ++i) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.push_back(static_cast<int32_t>(x % static_cast<uint64_t>(n_vocab)));
    }
    return out;
}

nlohmann::json load_json(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot open fixture " + path);
    return nlohmann::json::parse(in);
}

RowErrors row_errors(const nlohmann::json& ref, const std::vector<float>& ours, size_t n_vocab) {
    RowErrors e;
    for (size_t t = 0; t < ours.size() / n_vocab; ++t) {
        double scale = 0.0, diff = 0.0;
        for (size_t v = 0; v < n_vocab; ++v) {
            const double r = ref[t][v].get<double>();
            scale = std::max(scale, std::fabs(r));
            diff = std::max(diff, std::fabs(r - ours[t * n_vocab + v]));
        }
        e.worst_relative = std::max(e.worst_relative, diff / scale);
        e.worst_abs = std::max(e.worst_abs, diff);
        e.max_ref = std::max(e.max_ref, scale);
    }
    return e;
}

double worst_row_relative_error(const nlohmann::json& ref, const std::vector<float>& ours, size_t n_vocab) {
    return row_errors(ref, ours, n_vocab).worst_relative;
}

std::vector<std::string> fixture_files(const std::string& dir, const std::string& suffix) {
    std::vector<std::string> out;
    const std::filesystem::path root = fixture_path(dir);
    if (!std::filesystem::exists(root)) return out;
    for (const auto& entry : std::filesystem::directory_iterator(root)) {
        const std::string name = entry.path().filename().string();
        if (name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
            out.push_back(entry.path().string());
        }
    }
    std::sort(out.begin(), out.end());
    return out;
}

}  // namespace kvstash::test
