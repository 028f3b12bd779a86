// PEFT LoRA adapters read directly (adapter_config.json + adapter_model.safetensors, docs/adapters.md) on the
// tiny Llama of tests/fixtures/adapters/ (tests/reference/make_adapters.py keeps the PEFT directory it converts
// to lora.gguf as peft_lora/):
//   - logits against transformers + PEFT (fp32), with adapters_test.cpp's tolerance;
//   - bitwise the logits of the same adapter converted by llama.cpp's convert_lora_to_gguf.py: the converter
//     writes the same f32 values, with llama's Q/K rows of lora_B permuted as kvstash permutes them;
//   - the directory and its .safetensors path are the same adapter (same fingerprint); the config is part of
//     the fingerprint;
//   - refusals: use_dora / use_rslora (unsupported), a missing lora_B (bad_format).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "format/safetensors.h"
#include "kvstash/adapter.h"
#include "kvstash/error.h"
#include "kvstash/evaluator.h"
#include "support/eval_helpers.h"
#include "support/paths.h"

namespace kvstash::test {
namespace {

namespace fs = std::filesystem;
constexpr double kUnit = 0x1p-24;

struct Fixture {
    nlohmann::json json = load_json(fixture_path("adapters/adapters.json"));
    std::shared_ptr<const Model> model = Model::load(fixture_path("adapters/base.gguf"));
    std::vector<int32_t> tokens = json.at("tokens").get<std::vector<int32_t>>();
    std::string peft = fixture_path("adapters/peft_lora");
    std::string gguf_lora = fixture_path("adapters/lora.gguf");

    std::shared_ptr<const AdapterSet> load(const std::string& path, float scale = 1.0f) const {
        const AdapterFile files[] = {{AdapterKind::lora, path, scale}};
        return AdapterSet::load(*model, files);
    }
    std::vector<float> logits(const std::shared_ptr<const AdapterSet>& adapters) const {
        Evaluator evaluator(model, 2);
        State state(*model, StateOptions{.kv_type = KvType::f32, .n_ctx = 64, .adapters = adapters});
        std::vector<float> all;
        evaluator.eval(state, tokens, &all);
        return all;
    }
    // As adapters_test.cpp: (2K + 8T)·u relative to the row's largest logit, K = 96, T = 24.
    double bound() const { return (2.0 * 96 + 8.0 * static_cast<double>(tokens.size())) * kUnit; }
};

double worst_relative(const std::vector<float>& ours, const nlohmann::json& ref, int64_t n_vocab) {
    double ratio = 0.0;
    for (size_t t = 0; t < ref.size(); ++t) {
        double scale = 0.0, diff = 0.0;
        for (int64_t v = 0; v < n_vocab; ++v) {
            const double r = ref[t][static_cast<size_t>(v)].get<double>();
            scale = std::max(scale, std::fabs(r));
            diff = std::max(diff, std::fabs(r - ours[t * static_cast<size_t>(n_vocab) + static_cast<size_t>(v)]));
        }
        ratio = std::max(ratio, diff / std::max(scale, 1e-6));
    }
    return ratio;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A copy of the fixture directory in a fresh temporary directory, removed at the end.
class PeftCopy {
public:
    explicit PeftCopy(const std::string& from) {
        static int n = 0;
        dir_ = fs::temp_directory_path() / ("kvstash_peft_" + std::to_string(getpid()) + "_" + std::to_string(n++));
        fs::create_directories(dir_);
        fs::copy(from, dir_, fs::copy_options::recursive);
    }
    ~PeftCopy() {
        std::error_code ec;
        fs::remove_all(dir_, ec);
    }
    std::string path() const { return dir_.string(); }
    void edit_config(const char* key, const nlohmann::json& value) const {
        nlohmann::json config = nlohmann::json::parse(std::ifstream((dir_ / "adapter_config.json").string()));
        config[key] = value;
        std::ofstream((dir_ / "adapter_config.json").string()) << config.dump(2);
    }
    // Rewrites adapter_model.safetensors without the tensor `drop` (header padded to 8 bytes as safetensors does).
    void drop_tensor(const std::string& drop) const {
        const std::string path = (dir_ / "adapter_model.safetensors").string();
        std::string data, header_json;
        {
            const auto file = safetensors::File::open(path);
            nlohmann::json header = nlohmann::json::object();
            for (const safetensors::TensorInfo& t : file->tensors()) {
                if (t.name == drop) continue;
                const uint64_t begin = data.size();
                data.append(reinterpret_cast<const char*>(file->tensor_data(t)), t.n_bytes);
                header[t.name] = {{"dtype", t.type == TensorType::F32   ? "F32"
                                            : t.type == TensorType::F16 ? "F16"
                                                                        : "BF16"},
                                  {"shape", t.shape},
                                  {"data_offsets", {begin, data.size()}}};
            }
            header_json = header.dump();
        }
        while (header_json.size() % 8 != 0) header_json += ' ';
        const uint64_t n = header_json.size();
        std::ofstream out(path, std::ios::binary | std::ios::trunc);
        out.write(reinterpret_cast<const char*>(&n), sizeof n);  // little-endian host
        out << header_json << data;
    }

private:
    fs::path dir_;
};

// The code load() throws, or nullopt when it loads.
std::optional<ErrorCode> code_of_load(const Fixture& f, const std::string& path) {
    try {
        f.load(path);
    } catch (const Error& e) {
        return e.code();
    }
    return std::nullopt;
}

TEST(AdaptersPeft, MatchesTransformersPeftAndBitwiseTheConvertedGguf) {
    const Fixture f;
    const std::vector<float> ours = f.logits(f.load(f.peft));
    EXPECT_LE(worst_relative(ours, f.json.at("logits_lora_peft"), f.model->n_vocab()), f.bound());
    EXPECT_TRUE(bitwise_equal(ours, f.logits(f.load(f.gguf_lora))));
    // The scale multiplies lora_alpha / r as for the GGUF LoRA.
    EXPECT_TRUE(bitwise_equal(f.logits(f.load(f.peft, 0.5f)), f.logits(f.load(f.gguf_lora, 0.5f))));
}

TEST(AdaptersPeft, SafetensorsPathIsTheSameAdapter) {
    const Fixture f;
    const auto dir = f.load(f.peft);
    const auto file = f.load(f.peft + "/adapter_model.safetensors");
    EXPECT_EQ(dir->fingerprint(), file->fingerprint());
    EXPECT_TRUE(bitwise_equal(f.logits(dir), f.logits(file)));
    EXPECT_NE(dir->fingerprint(), f.load(f.peft, 0.5f)->fingerprint());
    EXPECT_NE(dir->fingerprint(), f.load(f.gguf_lora)->fingerprint());
    // adapter_config.json is part of the adapter: another lora_alpha is another fingerprint (and other logits).
    const PeftCopy copy(f.peft);
    copy.edit_config("lora_alpha", 4);
    const auto other = f.load(copy.path());
    EXPECT_NE(dir->fingerprint(), other->fingerprint());
    EXPECT_TRUE(bitwise_equal(f.logits(other), f.logits(f.load(f.peft, 0.5f))));
}

TEST(AdaptersPeft, RefusesWhatItDoesNotCompute) {
    const Fixture f;
    for (const char* key : {"use_dora", "use_rslora"}) {
        const PeftCopy copy(f.peft);
        copy.edit_config(key, true);
        EXPECT_EQ(code_of_load(f, copy.path()), ErrorCode::unsupported) << key;
    }
    const PeftCopy bias(f.peft);
    bias.edit_config("bias", "all");
    EXPECT_EQ(code_of_load(f, bias.path()), ErrorCode::unsupported);

    const PeftCopy missing(f.peft);
    missing.drop_tensor("base_model.model.model.layers.2.self_attn.k_proj.lora_B.weight");
    try {
        f.load(missing.path());
        ADD_FAILURE() << "a LoRA without its lora_B was loaded";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::bad_format);
        EXPECT_NE(std::string(e.what()).find("blk.2.attn_k.weight"), std::string::npos) << e.what();
    }
    // A directory without adapter_config.json is not taken for a PEFT adapter (then it is no GGUF either).
    EXPECT_NE(code_of_load(f, fs::path(f.peft).parent_path().string()), std::nullopt);
}

}  // namespace
}  // namespace kvstash::test
