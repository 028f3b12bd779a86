// SharedModels (server/shared_models.h): one loaded Model per key while anyone holds it, loaded once by
// concurrent callers, loaded again after the last holder let go; a failed load caches nothing. And
// model_weights_key: two spellings of one file are one key.
#include "server/shared_models.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "support/paths.h"

namespace kvstash::server {
namespace {

TEST(SharedModels, OneModelPerKeyWhileHeld) {
    SharedModels shared;
    std::atomic<int> loads{0};
    const std::string path = test::fixture_path("qwen2/qwen2_q8_0.gguf");
    const auto load = [&] {
        ++loads;
        return Model::load(path);
    };
    std::vector<std::shared_ptr<const Model>> held(4);
    std::vector<std::thread> threads;
    for (auto& h : held) threads.emplace_back([&] { h = shared.get(model_weights_key(path), load); });
    for (auto& t : threads) t.join();
    EXPECT_EQ(loads.load(), 1);
    for (const auto& h : held) EXPECT_EQ(h.get(), held[0].get());

    // Another key is another Model; the first key's goes with its last holder and is loaded again.
    const auto other = shared.get("other", load);
    EXPECT_NE(other.get(), held[0].get());
    EXPECT_EQ(loads.load(), 2);
    held.clear();
    const auto again = shared.get(model_weights_key(path), load);
    EXPECT_EQ(loads.load(), 3);

    // A load that throws reaches the caller and leaves nothing behind: the next caller loads.
    EXPECT_THROW(shared.get("broken", []() -> std::shared_ptr<const Model> { throw std::runtime_error("bad"); }),
                 std::runtime_error);
    EXPECT_NE(shared.get("broken", load), nullptr);
}

TEST(SharedModels, WeightsKeyIsTheFilesCanonicalPath) {
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / ("kvstash_shared_models_" + std::to_string(getpid()));
    fs::create_directories(dir / "sub");
    std::ofstream(dir / "m.gguf") << "x";
    fs::create_symlink(dir / "m.gguf", dir / "link.gguf");
    EXPECT_EQ(model_weights_key((dir / "sub" / ".." / "m.gguf").string()),
              model_weights_key((dir / "m.gguf").string()));
    EXPECT_EQ(model_weights_key((dir / "link.gguf").string()), model_weights_key((dir / "m.gguf").string()));
    EXPECT_EQ(model_weights_key("hf:owner/name:Q8_0"), "hf:owner/name:Q8_0");
    fs::remove_all(dir);
}

}  // namespace
}  // namespace kvstash::server
