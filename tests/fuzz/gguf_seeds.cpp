// Writes the fuzz_gguf seed corpus: a few small valid GGUF files that between them use every metadata
// type, nested arrays, both versions, a custom alignment and every supported tensor type.
//   usage: fuzz_gguf_seeds <output directory>
#include <cstdio>
#include <filesystem>
#include <string>

#include "format/gguf.h"
#include "format/tensor_type.h"
#include "kvstash/error.h"
#include "support/gguf_builder.h"

namespace {

using kvstash::TensorType;
using kvstash::gguf::ValueType;
using kvstash::test::GgufBuilder;
namespace gv = kvstash::test::gv;

// One row of `type` (one block, or 4 elements of a float type), filled with a byte pattern.
void add_small_tensor(GgufBuilder& b, const std::string& name, TensorType type) {
    const kvstash::TensorTypeTraits& traits = kvstash::tensor_type_traits(type);
    const uint64_t n = traits.block_size == 1 ? 4 : traits.block_size;
    std::vector<uint8_t> data(kvstash::tensor_row_bytes(type, static_cast<int64_t>(n)));
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7 + 3);
    b.add_tensor(name, static_cast<uint32_t>(type), {n}, std::move(data));
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s <output directory>\n", argv[0]);
        return 2;
    }
    const std::filesystem::path dir = argv[1];
    std::filesystem::create_directories(dir);

    GgufBuilder().write(dir / "empty_v3.gguf");

    GgufBuilder metadata;
    metadata.add("u8", gv::u8(1)).add("i8", gv::i8(-1)).add("u16", gv::u16(2)).add("i16", gv::i16(-2));
    metadata.add("u32", gv::u32(3)).add("i32", gv::i32(-3)).add("u64", gv::u64(4)).add("i64", gv::i64(-4));
    metadata.add("f32", gv::f32(0.5f)).add("f64", gv::f64(0.25)).add("bool", gv::boolean(true));
    metadata.add("str", gv::string("text"));
    metadata.add("arr",
                 gv::array(ValueType::ARRAY, {gv::array(ValueType::INT32, {gv::i32(7)}), gv::string_array({"a"})}));
    metadata.write(dir / "metadata_every_type.gguf");

    GgufBuilder model;
    model.add("general.architecture", gv::string("llama")).add("general.alignment", gv::u32(64));
    model.add("llama.block_count", gv::u32(1)).add("llama.embedding_length", gv::u32(32));
    model.add("tokenizer.ggml.tokens", gv::string_array({"<unk>", "<s>", "</s>", "a", "b"}));
    model.add("tokenizer.ggml.scores", gv::array(ValueType::FLOAT32, {gv::f32(0), gv::f32(-1), gv::f32(-2)}));
    const TensorType types[] = {TensorType::F32,  TensorType::F16,  TensorType::BF16,
                                TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_1,
                                TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K};
    for (TensorType t : types) add_small_tensor(model, "t." + kvstash::tensor_type_name(static_cast<uint32_t>(t)), t);
    model.write(dir / "model_all_types.gguf");

    GgufBuilder v2;
    v2.set_version(2).add("general.architecture", gv::string("llama"));
    v2.add_f32_tensor("output_norm.weight", {2, 2}, {1, 2, 3, 4});
    v2.write(dir / "tensor_v2.gguf");

    // Tensors packed edge to edge with 4-byte f32 rows and alignment 32: one flipped offset bit moves a tensor
    // onto its neighbour's bytes, which the reader must refuse (issue 19: overlapping tensor data).
    GgufBuilder adjacent;
    adjacent.add("general.architecture", gv::string("llama"));
    adjacent.add_f32_tensor("a", {8}, {1, 2, 3, 4, 5, 6, 7, 8});
    adjacent.add_f32_tensor("b", {8}, {8, 7, 6, 5, 4, 3, 2, 1});
    adjacent.add_f32_tensor("c", {16}, std::vector<float>(16, 0.5f));
    adjacent.write(dir / "adjacent_tensors.gguf");

    // A seed the reader rejects would only teach the fuzzer error paths: check each one parses.
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
        try {
            kvstash::gguf::File::open(entry.path().string());
        } catch (const kvstash::Error& e) {
            std::fprintf(stderr, "seed does not parse: %s\n", e.what());
            return 1;
        }
    }
    return 0;
}
