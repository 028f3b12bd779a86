// The numerics section of state files (docs/state-format.md, backends/cpu/runtime/numerics.h): a saved State records
// this process's numerics and loads back exact here; a file without the section (older kvstash), with
// other numerics, or saved from KV that was not exact loads and continues, but is not exact here — the
// prefix cache does not take it.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>

#include "backends/cpu/runtime/numerics.h"
#include "kvstash/prefix_cache.h"
#include "support/state_file_helpers.h"

namespace kvstash::test {
namespace {

class StateFileNumerics : public StateFileTest {};

State evaluated(const std::shared_ptr<const Model>& model, int64_t n) {
    Evaluator evaluator(model, 1);
    State state(*model, StateOptions{});
    evaluator.eval(state, pseudo_random_tokens(n, model->info().n_vocab, 7));
    return state;
}

// Rewrites the numerics section's 16 bytes (raw, uncompressed) in place and fixes the checksums (the
// section's, the section table's and the header's), as a writer with those numerics would have.
void patch_numerics(const std::string& path, uint32_t epoch, uint32_t path_code, uint32_t flags) {
    std::vector<uint8_t> bytes = read_file(path);
    const uint32_t count = sf::load_le<uint32_t>(&bytes[sf::header::section_count]);
    const uint64_t table = sf::load_le<uint64_t>(&bytes[sf::header::section_table_offset]);
    for (uint32_t i = 0; i < count; ++i) {
        uint8_t* e = bytes.data() + table + uint64_t{i} * sf::kSectionEntryBytes;
        if (sf::load_le<uint32_t>(e + sf::entry::type) != sf::kSectionNumerics) continue;
        const uint64_t offset = sf::load_le<uint64_t>(e + sf::entry::offset);
        sf::store_le<uint32_t>(&bytes[offset], epoch);
        sf::store_le<uint32_t>(&bytes[offset + 4], path_code);
        sf::store_le<uint32_t>(&bytes[offset + 8], flags);
        sf::store_le<uint64_t>(e + sf::entry::checksum, XXH3_64bits(&bytes[offset], sf::kNumericsBytes));
        sf::store_le<uint64_t>(&bytes[sf::header::table_checksum],
                               XXH3_64bits(&bytes[table], count * sf::kSectionEntryBytes));
        sf::store_le<uint64_t>(&bytes[sf::header::header_checksum],
                               XXH3_64bits(bytes.data(), sf::header::header_checksum));
        write_file(path, bytes);
        return;
    }
    FAIL() << "no numerics section in " << path;
}

size_t cached_blocks_after_release(const std::shared_ptr<const Model>& model, State state) {
    PrefixCache cache(*model);
    cache.release(std::move(state));
    return cache.stats().blocks_held;
}

TEST_F(StateFileNumerics, ASavedStateRecordsThisProcessAndIsExactHere) {
    auto model = Model::load(tiny("gqa_f32"));
    save_state(evaluated(model, 70), path("a.kvs"));
    const StateFileInfo info = inspect_state_file(path("a.kvs"), Checksums::verify);
    EXPECT_EQ(info.numerics, describe(current_numerics()));
    EXPECT_EQ(info.numerics, process_numerics());
    EXPECT_TRUE(info.exact_here);
    EXPECT_TRUE(info.checksums_ok);
    EXPECT_EQ(cached_blocks_after_release(model, load_state(*model, path("a.kvs"))), 2u);  // 70 tokens: 2 blocks
}

TEST_F(StateFileNumerics, OtherNumericsLoadButAreNotExactHere) {
    auto model = Model::load(tiny("gqa_f32"));
    const State original = evaluated(model, 70);
    const Numerics here = current_numerics();
    struct Case {
        const char* what;
        uint32_t epoch, path, flags;
    };
    const Case cases[] = {
        {"an older epoch", here.epoch - 1, static_cast<uint32_t>(here.path), sf::kNumericsKvExact},
        {"a newer epoch", here.epoch + 1, static_cast<uint32_t>(here.path), sf::kNumericsKvExact},
        {"another path", here.epoch, here.path == NumericsPath::scalar ? 2u : 1u, sf::kNumericsKvExact},
        {"a path unknown to this build", here.epoch, 77u, sf::kNumericsKvExact},
        {"KV marked not exact", here.epoch, static_cast<uint32_t>(here.path), 0u},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.what);
        save_state(original, path("b.kvs"));
        patch_numerics(path("b.kvs"), c.epoch, c.path, c.flags);
        const StateFileInfo info = inspect_state_file(path("b.kvs"), Checksums::verify);
        EXPECT_TRUE(info.checksums_ok) << info.checksum_error;
        EXPECT_FALSE(info.exact_here);
        State loaded = load_state(*model, path("b.kvs"));
        EXPECT_TRUE(std::ranges::equal(loaded.tokens(), original.tokens()));
        EXPECT_EQ(cached_blocks_after_release(model, loaded.fork()), 0u) << "the prefix cache took it";
        // A file saved from it records that the KV is not exact, whatever numerics save it.
        save_state(loaded, path("c.kvs"));
        EXPECT_FALSE(inspect_state_file(path("c.kvs"), Checksums::skip).exact_here);
    }
}

// A state file from a GPU (its numerics path names the CUDA architecture): loads and continues on the CPU,
// reported as not exact here; exact in a process whose device is that GPU (simulated: the path the CUDA
// backend sets when --device cuda is chosen, engine/device.h).
TEST_F(StateFileNumerics, AGpuStateLoadsOnTheCpuAsNotExactAndIsExactOnItsGpu) {
    auto model = Model::load(tiny("gqa_f32"));
    const State original = evaluated(model, 40);
    save_state(original, path("g.kvs"));
    const NumericsPath sm90 = cuda_numerics_path(90);
    patch_numerics(path("g.kvs"), kNumericsEpoch, static_cast<uint32_t>(sm90), sf::kNumericsKvExact);
    const StateFileInfo on_cpu = inspect_state_file(path("g.kvs"), Checksums::verify);
    EXPECT_EQ(on_cpu.numerics, "epoch " + std::to_string(kNumericsEpoch) + ", cuda sm_90");
    EXPECT_FALSE(on_cpu.exact_here);
    State loaded = load_state(*model, path("g.kvs"));
    EXPECT_TRUE(std::ranges::equal(loaded.tokens(), original.tokens()));
    EXPECT_EQ(cached_blocks_after_release(model, loaded.fork()), 0u) << "the prefix cache took a GPU state";

    set_process_numerics_path(sm90);
    const StateFileInfo on_gpu = inspect_state_file(path("g.kvs"), Checksums::verify);
    const StateFileInfo other_gpu = [&] {
        set_process_numerics_path(cuda_numerics_path(80));
        return inspect_state_file(path("g.kvs"), Checksums::verify);
    }();
    set_process_numerics_path(NumericsPath::unknown);  // back to the CPU's
    EXPECT_TRUE(on_gpu.exact_here);
    EXPECT_FALSE(other_gpu.exact_here);
    EXPECT_EQ(current_numerics(), numerics_of(active_isa()));
}

TEST_F(StateFileNumerics, UnknownFlagsAreRefused) {
    auto model = Model::load(tiny("gqa_f32"));
    save_state(evaluated(model, 10), path("d.kvs"));
    patch_numerics(path("d.kvs"), kNumericsEpoch, 2, 0x10);
    EXPECT_THROW(load_state(*model, path("d.kvs")), Error);
}

TEST(StateFileNumericsV1, AFileFromBeforeNumericsIsUnknownAndNotExactHere) {
    const StateFileInfo info = inspect_state_file(fixture_path("state/v1_gqa_f32.kvs"), Checksums::verify);
    EXPECT_NE(info.numerics.find("unknown"), std::string::npos) << info.numerics;
    EXPECT_FALSE(info.exact_here);
}

}  // namespace
}  // namespace kvstash::test
