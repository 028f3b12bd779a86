// Atomic state-file saves: a failed save (unwritable directory, disk full) leaves the old file and no
// temp file; a state that cannot be saved (or not in the KV type asked for) is refused before anything
// is written.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <unistd.h>

#include "kvstash/state_file.h"
#include "support/state_file_helpers.h"

namespace kvstash::test {
namespace {

TEST_F(StateFileTest, FailedSaveLeavesTheOldFile) {
    auto model = Model::load(tiny("gqa_f16"));
    const State small = make_state(model, 3);
    const State big = make_state(model, 200, KvType::f32);
    save_state(small, path("s.kvs"));
    const auto old_bytes = read_file(path("s.kvs"));

    // A file size limit makes the write fail (EFBIG) part-way.
    struct rlimit saved {};
    ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
    const auto old_handler = signal(SIGXFSZ, SIG_IGN);
    struct rlimit small_limit = saved;
    small_limit.rlim_cur = 16384;
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small_limit), 0);
    expect_error([&] { save_state(big, path("s.kvs")); }, ErrorCode::output,
                 "cannot save state file '" + path("s.kvs") + "'");
    setrlimit(RLIMIT_FSIZE, &saved);
    signal(SIGXFSZ, old_handler);
    EXPECT_EQ(read_file(path("s.kvs")), old_bytes);
    EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1) << "temp file left";

    expect_error([&] { save_state(small, path("no/such/dir/s.kvs")); }, ErrorCode::output, "No such file or directory");
}

// Disk full for real: a 64 KiB tmpfs (needs root and mount permission; skipped otherwise).
TEST_F(StateFileTest, DiskFullLeavesTheOldFile) {
    const std::string mnt = path("full");
    fs::create_directories(mnt);
    if (geteuid() != 0 || ::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=64k") != 0) {
        GTEST_SKIP() << "cannot mount a small tmpfs here (needs root and CAP_SYS_ADMIN); the RLIMIT_FSIZE test covers "
                        "the write path";
    }
    struct Unmount {
        std::string at;
        ~Unmount() { ::umount(at.c_str()); }
    } unmount{mnt};
    auto model = Model::load(tiny("gqa_f16"));
    const State small = make_state(model, 3);
    const State big = make_state(model, 250, KvType::f32);  // ~190 KB of KV
    const std::string file = mnt + "/s.kvs";
    save_state(small, file);
    const auto old_bytes = read_file(file);
    expect_error([&] { save_state(big, file); }, ErrorCode::output, "No space left on device");
    EXPECT_EQ(read_file(file), old_bytes);
    EXPECT_EQ(std::distance(fs::directory_iterator(mnt), fs::directory_iterator()), 1) << "temp file left";
    EXPECT_EQ(load_state(*model, file).n_tokens(), 3);
}

TEST_F(StateFileTest, UnsaveableSamplerIsRefusedAtSave) {
    auto model = Model::load(tiny("gqa_f16"));
    State state = make_state(model, 5);
    SamplerState bad = some_sampler(model->n_vocab());
    bad.params.logit_bias.push_back({static_cast<int32_t>(model->n_vocab()), 1.0f});
    state.set_sampler_state(bad);
    expect_error([&] { save_state(state, path("s.kvs")); }, ErrorCode::invalid_argument, "logit_bias token id 300");
    EXPECT_FALSE(fs::exists(path("s.kvs")));
    EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 0) << "temp file left";
}

// The file's KV type is the State's own (bit-exact) or q8_0 (lossy); anything else is refused before a
// byte is written. A q8_0 cache needs a head size that is a multiple of 32 (this model's is 24), and is
// stored only as itself.
TEST_F(StateFileTest, FileKvTypeIsTheCacheTypeOrQ8_0) {
    auto model = Model::load(tiny("gqa_f16"));
    const State state = make_state(model, 5);  // f16 cache
    expect_error([&] { save_state(state, path("s.kvs"), SaveOptions{.file_kv_type = KvType::f32}); },
                 ErrorCode::invalid_argument, "can be stored as f16 or q8_0, not f32");
    EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 0) << "a file was written";
    save_state(state, path("same.kvs"), SaveOptions{.file_kv_type = KvType::f16});
    EXPECT_EQ(inspect_state_file(path("same.kvs"), Checksums::verify).kv_type, KvType::f16);
    save_state(state, path("q8.kvs"), SaveOptions{.file_kv_type = KvType::q8_0});
    EXPECT_EQ(inspect_state_file(path("q8.kvs"), Checksums::verify).kv_type, KvType::q8_0);
    expect_error(
        [&] {
            State(*model, StateOptions{KvType::q8_0, 64});
        },
        ErrorCode::invalid_argument, "needs a head size that is a multiple of 32; this model's is 24");
    auto q8_model = Model::load(tiny("llama3_rope_f32"));  // head_dim 32
    const State q8 = make_state(q8_model, 40, KvType::q8_0);
    expect_error([&] { save_state(q8, path("q8cache.kvs"), SaveOptions{.file_kv_type = KvType::f16}); },
                 ErrorCode::invalid_argument, "its q8_0 KV can be stored as q8_0, not f16");
    save_state(q8, path("q8cache.kvs"));
    const StateFileInfo info = inspect_state_file(path("q8cache.kvs"), Checksums::verify);
    EXPECT_EQ(KvType::q8_0, info.kv_type);
    EXPECT_FALSE(info.lossy_kv);
}

}  // namespace
}  // namespace kvstash::test
