// ModelRegistry (server/model_registry.h) with a loader that makes empty contexts (no model file): names,
// lazy loading once per model, a failed load kept and reported, least-recently-used unloading under a memory
// budget, a held lease protecting its model, and keep-alive unloading.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include <unistd.h>

#include "kvstash/error.h"
#include "server/api_error.h"
#include "server/model_registry.h"

namespace kvstash::server {
namespace {

// Loads count per model; "broken" fails. Sizes are those of the source paths' files (0 when absent).
struct FakeModels {
    std::map<std::string, int> loads;  // loader calls per model
    std::mutex mutex;
    ModelRegistry::Loader loader() {
        return [this](const ModelSource& source) {
            {
                std::lock_guard lock(mutex);
                ++loads[source.name];
            }
            if (source.name == "broken") throw std::runtime_error("bad magic");
            auto loaded = std::make_unique<LoadedModel>();
            loaded->ctx = std::make_unique<ServerContext>();
            return loaded;
        };
    }
};

std::vector<std::string> loaded_names(const ModelRegistry& registry) {
    std::vector<std::string> names;
    for (const ModelStatus& s : registry.status()) {
        if (s.loaded) names.push_back(s.name);
    }
    return names;
}

bool wait_until_loaded(const ModelRegistry& registry, const std::vector<std::string>& expected) {
    for (int i = 0; i < 500; ++i) {
        if (loaded_names(registry) == expected) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
}

int status_of(const std::function<void()>& call) {
    try {
        call();
    } catch (const ApiError& e) {
        return e.status();
    }
    return 200;
}

TEST(ModelRegistry, ResolvesNamesAndLoadsOnce) {
    FakeModels fake;
    ModelRegistry registry({{"a", "a.gguf"}, {"b", "b.gguf"}}, {}, fake.loader());
    EXPECT_EQ(registry.resolve(""), "a");
    EXPECT_EQ(registry.resolve("b:latest"), "b");
    EXPECT_FALSE(registry.resolve("c"));
    EXPECT_TRUE(loaded_names(registry).empty());
    std::vector<std::thread> threads;
    for (int i = 0; i < 4; ++i) threads.emplace_back([&] { registry.acquire("b"); });
    for (auto& t : threads) t.join();
    EXPECT_EQ(fake.loads["b"], 1);
    EXPECT_EQ(loaded_names(registry), std::vector<std::string>({"b"}));
    EXPECT_EQ(status_of([&] { registry.acquire("c"); }), 404);
}

TEST(ModelRegistry, RefusesTwoModelsWithOneName) {
    FakeModels fake;
    EXPECT_THROW(ModelRegistry({{"a", "x.gguf"}, {"a", "y.gguf"}}, {}, fake.loader()), Error);
}

TEST(ModelRegistry, FailedLoadIsKeptAndOthersServe) {
    FakeModels fake;
    ModelRegistry registry({{"broken", "broken.gguf"}, {"a", "a.gguf"}}, {}, fake.loader());
    EXPECT_EQ(status_of([&] { registry.acquire("broken"); }), 500);
    EXPECT_EQ(status_of([&] { registry.acquire("broken"); }), 500);
    EXPECT_EQ(fake.loads["broken"], 1);
    EXPECT_EQ(status_of([&] { registry.acquire("a"); }), 200);
    EXPECT_EQ(registry.status()[0].error, "bad magic");
}

// Sizes come from the files: none exist here, so every model counts 0 bytes against the budget until one
// has a size. A budget of 1 byte with 0-byte models never unloads; real sizes are exercised end to end
// (tests/e2e/server_models_test.cpp). Here: a held lease keeps its model through keep-alive 0.
TEST(ModelRegistry, LeaseKeepsItsModelAndKeepAliveZeroUnloadsAfterRelease) {
    FakeModels fake;
    ModelRegistry registry({{"a", "a.gguf"}, {"b", "b.gguf"}}, {.keep_alive_s = 0}, fake.loader());
    auto lease = registry.acquire("a");
    registry.acquire("b");  // released at once: unloaded by the reaper
    EXPECT_TRUE(wait_until_loaded(registry, {"a"}));
    EXPECT_EQ(registry.status()[0].in_flight, 1);
    lease.reset();
    EXPECT_TRUE(wait_until_loaded(registry, {}));
    registry.set_keep_alive("a", -1);
    registry.acquire("a");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(loaded_names(registry), std::vector<std::string>({"a"}));
    EXPECT_FALSE(registry.status()[0].expires_in_s);
}

TEST(ModelRegistry, BudgetUnloadsLeastRecentlyUsedIdleModel) {
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / ("kvstash_registry_" + std::to_string(getpid()));
    fs::create_directories(dir);
    std::vector<ModelSource> sources;
    for (const char* name : {"a", "b", "c"}) {
        std::ofstream(dir / name) << std::string(100, 'x');
        sources.push_back({name, (dir / name).string()});
    }
    FakeModels fake;
    {
        ModelRegistry registry(sources, {.keep_alive_s = -1, .memory_budget_bytes = 250}, fake.loader());
        EXPECT_EQ(registry.status()[0].bytes, 100u);
        registry.acquire("a");
        registry.acquire("b");
        registry.acquire("c");  // a is the least recently used
        EXPECT_EQ(loaded_names(registry), std::vector<std::string>({"b", "c"}));
        registry.acquire("b");
        registry.acquire("a");  // now c is
        EXPECT_EQ(loaded_names(registry), std::vector<std::string>({"a", "b"}));
        auto held_a = registry.acquire("a");
        auto held_b = registry.acquire("b");
        EXPECT_EQ(status_of([&] { registry.acquire("c"); }), 503);  // no idle model to unload
        EXPECT_EQ(loaded_names(registry), std::vector<std::string>({"a", "b"}));
        held_a.reset();
        EXPECT_EQ(status_of([&] { registry.acquire("c"); }), 200);
        EXPECT_EQ(loaded_names(registry), std::vector<std::string>({"b", "c"}));
    }
    fs::remove_all(dir);
}

// Entries over one file (a model and its presets; "./a" is the same file as "a") count its bytes once: a
// budget of two files holds them all with a third file, unloading one of them frees nothing while another
// holds the weights, and the least recently used weights go out with every entry on them.
TEST(ModelRegistry, EntriesOnOneFileCountItOnceAndGoOutTogether) {
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / ("kvstash_registry_shared_" + std::to_string(getpid()));
    fs::create_directories(dir);
    for (const char* name : {"a", "c"}) std::ofstream(dir / name) << std::string(100, 'x');
    const auto preset = std::make_shared<const Preset>();
    const std::vector<ModelSource> sources = {{"a", (dir / "a").string()},
                                              {"p", (dir / "." / "a").string(), preset},
                                              {"q", (dir / "a").string(), preset},
                                              {"c", (dir / "c").string()}};
    FakeModels fake;
    {
        ModelRegistry registry(sources, {.keep_alive_s = -1, .memory_budget_bytes = 250}, fake.loader());
        registry.acquire("a");
        registry.acquire("p");
        registry.acquire("q");
        registry.acquire("c");  // 200 bytes of weights: a's (once) and c's
        EXPECT_EQ(loaded_names(registry), std::vector<std::string>({"a", "p", "q", "c"}));
        const std::vector<ModelStatus> status = registry.status();
        EXPECT_EQ(status[0].shares_weights_with, "");
        EXPECT_EQ(status[1].shares_weights_with, "a");
        EXPECT_EQ(status[2].shares_weights_with, "a");
        EXPECT_EQ(status[3].shares_weights_with, "");
        // Without a, p counts the weights and q shares them with p.
        EXPECT_TRUE(registry.unload_if_idle("a"));
        EXPECT_EQ(registry.status()[2].shares_weights_with, "p");
    }
    {
        // A budget of one file: c's load unloads a, p and q together (their weights are the least recently used),
        // and p's load then unloads c; a held lease on q keeps the weights, so c cannot come back (503).
        ModelRegistry registry(sources, {.keep_alive_s = -1, .memory_budget_bytes = 150}, fake.loader());
        registry.acquire("a");
        registry.acquire("p");
        registry.acquire("c");
        EXPECT_EQ(loaded_names(registry), std::vector<std::string>({"c"}));
        auto held_q = registry.acquire("q");
        EXPECT_EQ(loaded_names(registry), std::vector<std::string>({"q"}));
        registry.acquire("a");  // on q's weights: no room needed
        EXPECT_EQ(loaded_names(registry), std::vector<std::string>({"a", "q"}));
        EXPECT_EQ(status_of([&] { registry.acquire("c"); }), 503);
    }
    fs::remove_all(dir);
}

}  // namespace
}  // namespace kvstash::server
