// Named states under racing clients and after crashed writers (issue 19): simultaneous creates of one name
// (exactly one wins, the others 409, never a 500), PUT racing DELETE (201/200/404, never a 500), and the
// temporary files of dead writers removed when the server starts, a live writer's left alone.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "e2e/server/http_client.h"

namespace kvstash::test {
namespace {

namespace fs = std::filesystem;

class ServerStateRaces : public ::testing::Test {
protected:
    fs::path dir;
    void SetUp() override {
        KVSTASH_REQUIRE_DEFAULT_MODEL();
        dir = fs::temp_directory_path() / ("kvstash-state-races-" + std::to_string(getpid()) + "-" +
                                           ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(dir);
        fs::create_directories(dir);
    }
    void TearDown() override { fs::remove_all(dir); }
    std::vector<std::string> temp_files() const {
        std::vector<std::string> found;
        for (const auto& entry : fs::directory_iterator(dir)) {
            const std::string name = entry.path().filename().string();
            if (name.starts_with(".tmp-")) found.push_back(name);
        }
        return found;
    }
};

// A pid that was just alive and is not any more (its process has been reaped).
pid_t dead_pid() {
    const pid_t pid = fork();
    if (pid == 0) _exit(0);
    int status = 0;
    waitpid(pid, &status, 0);
    return pid;
}

std::string status_counts(const std::map<int, int>& counts) {
    std::string out;
    for (const auto& [status, n] : counts) out += std::to_string(status) + " x" + std::to_string(n) + " ";
    return out;
}

TEST_F(ServerStateRaces, SimultaneousCreatesOfOneNameOneWinsTheRestGet409) {
    ServerProcess server({"-t", "2", "--parallel", "8", "--state-dir", dir.string()});
    constexpr int kClients = 8;
    std::map<int, int> counts;
    std::mutex counts_mutex;
    std::vector<std::thread> clients;
    for (int i = 0; i < kClients; ++i) {
        clients.emplace_back([&, i] {
            httplib::Client c = server.client();
            // Different prompts: whichever wins, the stored state is one client's whole state.
            Reply r =
                post(c, "/v1/states", json{{"name", "race"}, {"prompt", "Client " + std::to_string(i) + " was here."}});
            std::lock_guard lock(counts_mutex);
            ++counts[r.status];
            if (r.status == 409) {
                EXPECT_EQ(r.body["error"]["code"], "state_exists") << r.text;
            }
        });
    }
    for (auto& t : clients) t.join();
    EXPECT_EQ(counts[201], 1) << status_counts(counts);
    EXPECT_EQ(counts[409], kClients - 1) << status_counts(counts);
    EXPECT_TRUE(fs::exists(dir / "race.kvs"));
    EXPECT_TRUE(temp_files().empty());

    httplib::Client c = server.client();
    EXPECT_EQ(post(c, "/v1/states", json{{"name", "race"}, {"prompt", "Again."}}).status, 409);
    Reply replaced = post(c, "/v1/states", json{{"name", "race"}, {"prompt", "Again."}, {"replace", true}});
    EXPECT_EQ(replaced.status, 200) << replaced.text;
    EXPECT_EQ(post(c, "/v1/states", json{{"name", "race"}, {"prompt", "x"}, {"replace", "yes"}}).status, 400);
    EXPECT_EQ(get(c, "/v1/states/race").body["tokens"], replaced.body["tokens"]);
}

TEST_F(ServerStateRaces, PutRacingDeleteNeverAnswers500) {
    ServerProcess server({"-t", "2", "--parallel", "8", "--state-dir", dir.string()});
    httplib::Client c = server.client();
    ASSERT_EQ(post(c, "/v1/states", json{{"name", "source"}, {"prompt", "Once upon a time"}}).status, 201);
    auto file = c.Get("/v1/states/source/file");
    ASSERT_TRUE(file);
    ASSERT_EQ(file->status, 200);
    std::map<int, int> counts;
    std::mutex counts_mutex;
    const auto record = [&](int status, const std::string& body) {
        std::lock_guard lock(counts_mutex);
        ++counts[status];
        EXPECT_TRUE(status == 200 || status == 201 || status == 404) << status << " " << body;
    };
    std::vector<std::thread> clients;
    for (int t = 0; t < 4; ++t) {
        clients.emplace_back([&] {
            httplib::Client uploader = server.client();
            for (int i = 0; i < 10; ++i) {
                auto put = uploader.Put("/v1/states/contested/file", file->body, "application/octet-stream");
                record(put ? put->status : 0, put ? put->body : "no reply");
            }
        });
        clients.emplace_back([&] {
            httplib::Client deleter = server.client();
            for (int i = 0; i < 10; ++i) {
                auto del = deleter.Delete("/v1/states/contested");
                record(del ? del->status : 0, del ? del->body : "no reply");
            }
        });
    }
    for (auto& t : clients) t.join();
    EXPECT_EQ(counts[500], 0) << status_counts(counts);
    EXPECT_EQ(counts[201] + counts[200] + counts[404], 80) << status_counts(counts);
    EXPECT_TRUE(temp_files().empty());
    // Whatever the last word was, the listing and the directory agree.
    const bool listed = get(c, "/v1/states/contested").status == 200;
    EXPECT_EQ(listed, fs::exists(dir / "contested.kvs"));
}

// Debris of a killed writer: a temporary file whose pid is dead goes at start-up; one whose writer is alive
// (this test process) stays, as does a file that merely looks similar.
TEST_F(ServerStateRaces, StartupRemovesTempFilesOfDeadWritersOnly) {
    const std::string dead = ".tmp-story.kvs-" + std::to_string(dead_pid()) + "-0-0badf00d";
    const std::string live = ".tmp-story.kvs-" + std::to_string(getpid()) + "-3-12345678";
    const std::string other = ".tmp-notes";  // not of our form, and new: not ours to judge
    for (const std::string& name : {dead, live, other}) std::ofstream(dir / name) << std::string(1 << 16, 'x');
    {
        ServerProcess server({"-t", "2", "--state-dir", dir.string()});
        EXPECT_FALSE(fs::exists(dir / dead));
        EXPECT_TRUE(fs::exists(dir / live));
        EXPECT_TRUE(fs::exists(dir / other));
        // The next save to a target also removes its dead writers' files (the live one stays).
        const std::string dead_again = ".tmp-story.kvs-" + std::to_string(dead_pid()) + "-7-0badf00d";
        std::ofstream(dir / dead_again) << "partial";
        httplib::Client c = server.client();
        ASSERT_EQ(post(c, "/v1/states", json{{"name", "story"}, {"prompt", "Once"}}).status, 201);
        EXPECT_FALSE(fs::exists(dir / dead_again));
        EXPECT_TRUE(fs::exists(dir / live));
    }
}

}  // namespace
}  // namespace kvstash::test
