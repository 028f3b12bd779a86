// Naming a hub model and choosing its files (src/hub/model_ref.h): the quantization asked for, else Q4_K_M;
// a file by path; a model directory's files when there is no GGUF; clear errors otherwise.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "hub/model_ref.h"
#include "kvstash/error.h"

namespace kvstash::hub {
namespace {

std::vector<RepoFile> files(std::initializer_list<const char*> paths) {
    std::vector<RepoFile> out;
    for (const char* p : paths) out.push_back({p, 1, {}});
    return out;
}

std::string chosen(const std::vector<RepoFile>& repo, const std::string& ref) {
    return select_model_files(repo, parse_model_ref(ref)).model_path;
}

void expect_error(const std::vector<RepoFile>& repo, const std::string& ref, const std::string& part) {
    try {
        select_model_files(repo, parse_model_ref(ref));
        ADD_FAILURE() << ref << " was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
}

TEST(HubModelRef, ParsesRepositoryAndSelector) {
    EXPECT_EQ(parse_model_ref("hf:owner/name").repo, "owner/name");
    EXPECT_EQ(parse_model_ref("owner/name:Q8_0").selector, "Q8_0");
    EXPECT_EQ(parse_model_ref("owner/name:sub/x.gguf").selector, "sub/x.gguf");
    for (const char* bad : {"name", "owner/", "/name", "a/b/c", "owner/name:", "own er/name", "o/../x", "o/n:../x"}) {
        EXPECT_THROW(parse_model_ref(bad), Error) << bad;
    }
}

TEST(HubModelRef, PicksTheQuantizationByNamePart) {
    const auto repo = files({"m-Q4_K_M.gguf", "m-Q4_K_S.gguf", "m-Q8_0.gguf", "m.Q4_K.gguf", "README.md"});
    EXPECT_EQ(chosen(repo, "o/m"), "m-Q4_K_M.gguf");  // the default
    EXPECT_EQ(chosen(repo, "o/m:q8_0"), "m-Q8_0.gguf");
    EXPECT_EQ(chosen(repo, "o/m:Q4_K"), "m.Q4_K.gguf");  // not Q4_K_M nor Q4_K_S
    EXPECT_EQ(chosen(repo, "o/m:m-Q4_K_S.gguf"), "m-Q4_K_S.gguf");
    expect_error(repo, "o/m:Q2_K", "no GGUF file for 'Q2_K'");
    expect_error(repo, "o/m:README.md", "not a GGUF file");
    expect_error(files({"a-Q8_0.gguf", "b-Q8_0.gguf"}), "o/m:Q8_0", "several files");
    EXPECT_EQ(chosen(files({"only-F16.gguf"}), "o/m"), "only-F16.gguf");  // one GGUF: that one
    expect_error(files({"a-F16.gguf", "a-F32.gguf"}), "o/m", "no GGUF file for 'Q4_K_M'");
}

TEST(HubModelRef, ModelDirectoryWithoutGguf) {
    const auto repo = files({"config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                             "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json", "README.md",
                             "onnx/model.onnx", "pytorch_model.bin"});
    const Selection s = select_model_files(repo, parse_model_ref("o/m"));
    EXPECT_TRUE(s.model_path.empty());
    std::vector<std::string> names;
    for (const RepoFile& f : s.files) names.push_back(f.path);
    EXPECT_EQ(names, (std::vector<std::string>{"config.json", "model-00001-of-00002.safetensors",
                                               "model-00002-of-00002.safetensors", "model.safetensors.index.json",
                                               "tokenizer.json", "tokenizer_config.json"}));
    expect_error(files({"README.md", "pytorch_model.bin", "config.json"}), "o/m", "neither GGUF files");
    expect_error(repo, "o/m:Q8_0", "no GGUF files");
}

}  // namespace
}  // namespace kvstash::hub
