// The prefix cache's disk tier: blocks written by one cache are found by another on the same directory
// (as a new process would) and give bitwise the logits of a cold evaluation; files of another model,
// corrupt, truncated or renamed files are refused and deleted; the directory stays within its budget;
// files deleted or added by someone else are plain misses or hits, never errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "backends/cpu/runtime/dispatch.h"
#include "engine/prefix_cache_disk_file.h"
#include "engine/prefix_cache_disk_next.h"
#include "engine/prefix_cache_key.h"
#include "kvstash/error.h"
#include "kvstash/prefix_cache.h"
#include "state/fingerprint.h"
#include "state/state_access.h"
#include "support/eval_helpers.h"
#include "support/paths.h"

namespace kvstash::test {
namespace {

namespace fs = std::filesystem;
constexpr int64_t B = kv_block_tokens;

std::shared_ptr<const Model> tiny(const char* name = "gqa_f32.gguf") {
    return Model::load(fixture_path(std::string("tiny/") + name));
}

class PrefixCacheDisk : public ::testing::Test {
protected:
    void SetUp() override {
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        dir_ = fs::temp_directory_path() / ("kvstash_disk_" + std::to_string(getpid()) + "_" + info->name());
        fs::remove_all(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }

    // RAM budget 0: every block leaves RAM as soon as no State uses it, so only the disk can answer.
    PrefixCacheOptions options(uint64_t disk_budget = uint64_t{1} << 30, uint64_t ram_budget = 0) const {
        PrefixCacheOptions o;
        o.ram_budget_bytes = ram_budget;
        o.disk_dir = dir_.string();
        o.disk_budget_bytes = disk_budget;
        return o;
    }
    // The files other than next-block lists (blocks and checkpoints), by name.
    std::vector<std::string> block_files() const {
        std::vector<std::string> names;
        for (const auto& entry : fs::directory_iterator(dir_)) {
            if (entry.path().extension() != kNextFileSuffix) names.push_back(entry.path().filename().string());
        }
        std::sort(names.begin(), names.end());
        return names;
    }
    fs::path dir_;
};

// The file name of block `index` of `tokens` for `model`'s f16 KV on this machine's ISA.
std::string file_of(const Model& model, const std::vector<int32_t>& tokens, int64_t index) {
    const PrefixKeyDomain domain(cached_model_fingerprint(model), KvType::f16, active_isa());
    return block_file_name(domain.chain(tokens, index + 1)[static_cast<size_t>(index)]);
}

BlockFileIdentity identity_of(const Model& model) {
    const State probe(model);
    BlockFileIdentity id;
    id.model = cached_model_fingerprint(model);
    id.kv_type = 0;
    id.isa = static_cast<uint32_t>(active_isa());
    id.n_layer = static_cast<uint32_t>(StateAccess::kv(probe).n_layer());
    id.row_bytes = StateAccess::kv(probe).row_bytes();
    return id;
}

std::string read_bytes(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
}

void write_bytes(const fs::path& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// acquire(tokens), evaluate the rest, expect every new logits row bitwise equal to a cold evaluation,
// release. Returns how many tokens were reused.
int64_t run_request(PrefixCache& cache, const std::shared_ptr<const Model>& model, const std::vector<int32_t>& tokens) {
    Evaluator evaluator(model, 1);
    CachedPrefix hit = cache.acquire(tokens);
    std::vector<float> warm;
    evaluator.eval(hit.state, std::span(tokens).subspan(static_cast<size_t>(hit.reused_tokens)), &warm);
    const std::vector<float> cold = eval_logits(model, tokens, {static_cast<int64_t>(tokens.size())}, 1);
    const size_t offset = static_cast<size_t>(hit.reused_tokens * model->n_vocab());
    EXPECT_EQ(warm.size() + offset, cold.size());
    EXPECT_EQ(0, std::memcmp(warm.data(), cold.data() + offset, warm.size() * sizeof(float)))
        << "logits after reusing " << hit.reused_tokens << " cached tokens differ from a cold evaluation";
    cache.release(hit.state);
    return hit.reused_tokens;
}

TEST_F(PrefixCacheDisk, ANewCacheOnTheSameDirectoryReusesBlocksBitwise) {
    auto model = tiny();
    const auto tokens = pseudo_random_tokens(3 * B + 10, 300, 1);
    {
        PrefixCache writer(*model, options());
        EXPECT_EQ(run_request(writer, model, tokens), 0);
        const PrefixCacheStats s = writer.stats();
        EXPECT_EQ(s.disk_blocks_written, 3u);  // written through at release, whatever RAM does later
        EXPECT_EQ(s.disk_blocks_held, 3u);
        const uint64_t file_bytes = kBlockFileHeaderBytes + StateAccess::kv(State(*model)).block_bytes();
        // ... and each listed after its parent (the root, block 0, block 1): three one-entry lists.
        EXPECT_EQ(s.disk_bytes_held, 3 * file_bytes + 3 * next_file_bytes(1));
        EXPECT_EQ(s.disk_bytes_written, 3 * file_bytes);
    }
    EXPECT_EQ(block_files().size(), 3u);

    auto reloaded = tiny();  // as a new process would: another Model, another cache
    PrefixCache reader(*reloaded, options());
    EXPECT_EQ(reader.stats().disk_blocks_held, 3u);  // found by the directory scan
    EXPECT_EQ(run_request(reader, reloaded, tokens), 3 * B);
    PrefixCacheStats s = reader.stats();
    EXPECT_EQ(s.disk_hits, 3u);
    EXPECT_EQ(s.disk_bytes_read, 3 * kBlockFileHeaderBytes + 3 * StateAccess::kv(State(*reloaded)).block_bytes());
    EXPECT_EQ(s.disk_misses, 0u);
    EXPECT_EQ(s.disk_blocks_written, 0u);  // its release found every block already on disk
    EXPECT_EQ(s.tokens_reused, 3u * B);

    // A request diverging inside block 2, in another fresh cache: blocks 0 and 1 from disk, then block 2,
    // found in block 1's list of next blocks, shared for its first 5 tokens (as RAM would).
    auto diverging = tokens;
    diverging[2 * B + 5] = (tokens[2 * B + 5] + 1) % 300;
    PrefixCache third(*reloaded, options());
    EXPECT_EQ(run_request(third, reloaded, diverging), 2 * B + 5);
    s = third.stats();
    EXPECT_EQ(s.partial_block_hits, 1u);
    EXPECT_EQ(s.disk_hits, 3u);
    EXPECT_EQ(s.disk_blocks_written, 1u);  // the diverging block 2
    EXPECT_EQ(block_files().size(), 4u);
}

// A list of next blocks is a hint: an entry whose key is not the one its tokens make (here: another
// block's key with the request's tokens) is skipped before any file is read, so it can neither be used
// nor make the reader refuse (and delete) the good block file it names.
TEST_F(PrefixCacheDisk, ANextBlockEntryWhoseKeyDoesNotMatchItsTokensIsSkipped) {
    auto model = tiny();
    const auto tokens = pseudo_random_tokens(2 * B + 1, 300, 11);
    {
        PrefixCache writer(*model, options());
        run_request(writer, model, tokens);
    }
    auto request = tokens;
    request[5] = (tokens[5] + 1) % 300;
    const PrefixKeyDomain domain(cached_model_fingerprint(*model), KvType::f16, active_isa());
    NextBlock forged{domain.chain(tokens, 2)[1], {}};
    std::copy(request.begin(), request.begin() + B, forged.tokens.begin());
    ASSERT_TRUE(write_next_file(dir_.string(), domain.root(), identity_of(*model), {forged}));
    PrefixCache reader(*model, options());
    EXPECT_EQ(run_request(reader, model, request), 0);
    EXPECT_EQ(reader.stats().disk_rejected, 0u);
    EXPECT_TRUE(fs::exists(dir_ / file_of(*model, tokens, 1)));
}

TEST_F(PrefixCacheDisk, DiskBlocksJoinTheRamTier) {
    auto model = tiny();
    const auto tokens = pseudo_random_tokens(2 * B + 3, 300, 2);
    {
        PrefixCache writer(*model, options());
        run_request(writer, model, tokens);
    }
    PrefixCache reader(*model, options(uint64_t{1} << 30, uint64_t{1} << 30));
    CachedPrefix first = reader.acquire(tokens);
    EXPECT_EQ(first.reused_tokens, 2 * B);
    EXPECT_EQ(reader.stats().blocks_held, 2u);  // inserted into RAM as if released
    EXPECT_EQ(reader.stats().blocks_inserted, 2u);
    // Now RAM answers, and can end inside a block: the disk is not read again.
    CachedPrefix second = reader.acquire(std::vector<int32_t>(tokens.begin(), tokens.begin() + B + 7));
    EXPECT_EQ(second.reused_tokens, B + 6);
    EXPECT_TRUE(second.partial_block);
    EXPECT_EQ(reader.stats().disk_hits, 2u);
}

TEST_F(PrefixCacheDisk, F32KvAndAQuantizedModelRoundTrip) {
    auto model = tiny("q_q4_1.gguf");
    const auto tokens = pseudo_random_tokens(2 * B + 1, 320, 3);
    Evaluator evaluator(model, 1);
    {
        PrefixCache writer(*model, options());
        State state(*model, StateOptions{KvType::f32, 0});
        evaluator.eval(state, tokens);
        writer.release(state);
        EXPECT_EQ(writer.stats().disk_blocks_written, 2u);
    }
    PrefixCache reader(*model, options());
    EXPECT_EQ(reader.acquire(tokens).reused_tokens, 0);  // f16 never matches f32 blocks
    CachedPrefix hit = reader.acquire(tokens, StateOptions{KvType::f32, 0});
    ASSERT_EQ(hit.reused_tokens, 2 * B);
    std::vector<float> warm;
    evaluator.eval(hit.state, std::span(tokens).subspan(2 * B), &warm);
    const auto cold = eval_logits(model, tokens, {static_cast<int64_t>(tokens.size())}, 1, KvType::f32);
    ASSERT_EQ(warm.size(), static_cast<size_t>(model->n_vocab()));
    EXPECT_EQ(0, std::memcmp(warm.data(), cold.data() + 2 * B * model->n_vocab(), warm.size() * sizeof(float)));
}

TEST_F(PrefixCacheDisk, AnotherModelsFilesAreRefused) {
    auto model = tiny("gqa_f32.gguf");
    auto other = tiny("gqa_f16.gguf");  // the same shapes (same KV block size), other weights
    ASSERT_NE(cached_model_fingerprint(*model), cached_model_fingerprint(*other));
    ASSERT_EQ(identity_of(*model).file_bytes(), identity_of(*other).file_bytes());
    const auto tokens = pseudo_random_tokens(B + 4, 300, 4);
    {
        PrefixCache writer(*model, options());
        run_request(writer, model, tokens);
    }
    const std::string mine = file_of(*model, tokens, 0), theirs = file_of(*other, tokens, 0);
    ASSERT_NE(mine, theirs);  // names differ: the fingerprint is in the key

    // 1. model's file renamed to the name other's cache looks up: refused (header key and fingerprint).
    fs::rename(dir_ / mine, dir_ / theirs);
    PrefixCache cache(*other, options());
    EXPECT_EQ(run_request(cache, other, tokens), 0);
    EXPECT_EQ(cache.stats().disk_rejected, 1u);
    EXPECT_EQ(cache.stats().disk_blocks_written, 1u);  // its own block replaced the refused file

    // 2. A file that is right in every field but the model fingerprint: refused too.
    fs::remove(dir_ / theirs);
    const PrefixKeyDomain domain(cached_model_fingerprint(*other), KvType::f16, active_isa());
    const BlockKey key = domain.chain(tokens, 1)[0];
    const std::vector<uint8_t> half(identity_of(*other).half_bytes(), 0);
    ASSERT_TRUE(write_block_file(dir_.string(), {key, domain.root(), std::span(tokens).first<B>()}, identity_of(*model),
                                 half, half));
    PrefixCache again(*other, options());
    EXPECT_EQ(run_request(again, other, tokens), 0);
    EXPECT_EQ(again.stats().disk_rejected, 1u);

    // The control: the same fabricated file with other's identity would be taken (so the test can fail).
    fs::remove(dir_ / theirs);
    ASSERT_TRUE(write_block_file(dir_.string(), {key, domain.root(), std::span(tokens).first<B>()}, identity_of(*other),
                                 half, half));
    PrefixCache control(*other, options());
    EXPECT_EQ(control.acquire(tokens).reused_tokens, B);
    EXPECT_EQ(control.stats().disk_rejected, 0u);
}

TEST_F(PrefixCacheDisk, CorruptTruncatedAndForeignFilesAreRefusedAndDeleted) {
    auto model = tiny();
    std::vector<std::vector<int32_t>> seqs;
    for (uint64_t seed = 0; seed < 6; ++seed) seqs.push_back(pseudo_random_tokens(B + 2, 300, 50 + seed));
    {
        PrefixCache writer(*model, options());
        for (const auto& tokens : seqs) run_request(writer, model, tokens);
    }
    const auto path = [&](size_t i) { return dir_ / file_of(*model, seqs[i], 0); };
    std::string bytes = read_bytes(path(0));
    ASSERT_EQ(bytes.size(), identity_of(*model).file_bytes());
    const auto flipped = [&](size_t at) {
        std::string b = bytes;
        b[at] = static_cast<char>(b[at] ^ 0x01);
        return b;
    };
    write_bytes(path(0), flipped(bytes.size() - 7));            // a payload bit
    write_bytes(path(1), flipped(100));                         // a token id in the header
    write_bytes(path(2), read_bytes(path(2)).substr(0, 5000));  // truncated
    write_bytes(path(3), "");                                   // empty
    write_bytes(path(4), std::string(bytes.size(), 'x'));       // garbage of the right size
    write_bytes(dir_ / "not-a-block.kvb", bytes);               // a name that is no key: left alone
    write_bytes(dir_ / "ffffffffffffffffffffffffffffffff.kvb", read_bytes(path(5)));  // block 5 under another key

    PrefixCache reader(*model, options());
    for (size_t i = 0; i < 5; ++i) EXPECT_EQ(run_request(reader, model, seqs[i]), 0) << "file " << i << " was used";
    EXPECT_EQ(run_request(reader, model, seqs[5]), B);  // the intact one still works
    PrefixCacheStats s = reader.stats();
    EXPECT_EQ(s.disk_rejected, 5u);
    EXPECT_EQ(s.disk_blocks_written, 5u);  // each refused file was deleted, then rewritten by release
    for (size_t i = 0; i < 5; ++i) EXPECT_EQ(read_bytes(path(i)).size(), bytes.size());
    EXPECT_TRUE(fs::exists(dir_ / "not-a-block.kvb"));

    // The block stored under a key that is not its own is refused when that key is looked up.
    std::vector<int32_t> probe(B + 1, 0);
    const PrefixKeyDomain domain(cached_model_fingerprint(*model), KvType::f16, active_isa());
    ASSERT_NE(domain.chain(probe, 1)[0].hex(), "ffffffffffffffffffffffffffffffff");
    fs::rename(dir_ / "ffffffffffffffffffffffffffffffff.kvb", dir_ / block_file_name(domain.chain(probe, 1)[0]));
    EXPECT_EQ(run_request(reader, model, probe), 0);
    EXPECT_EQ(reader.stats().disk_rejected, 6u);
}

TEST_F(PrefixCacheDisk, TheDirectoryStaysWithinItsBudgetLeastRecentlyUsedFirst) {
    auto model = tiny();
    const uint64_t file_bytes = identity_of(*model).file_bytes();
    std::vector<std::vector<int32_t>> seqs;
    for (uint64_t seed = 0; seed < 6; ++seed) seqs.push_back(pseudo_random_tokens(B + 1, 300, 60 + seed));
    {
        PrefixCache cache(*model, options(3 * file_bytes + file_bytes / 2));
        for (size_t i = 0; i < 4; ++i) run_request(cache, model, seqs[i]);
        EXPECT_EQ(cache.stats().disk_evictions, 1u);       // seqs[0]'s block
        EXPECT_EQ(run_request(cache, model, seqs[1]), B);  // read back: now the most recently used
        for (size_t i = 4; i < 6; ++i) run_request(cache, model, seqs[i]);
        const PrefixCacheStats s = cache.stats();
        EXPECT_EQ(s.disk_evictions, 3u);
        EXPECT_EQ(s.disk_blocks_held, 3u);
        EXPECT_LE(s.disk_bytes_held, s.disk_budget_bytes);
        EXPECT_EQ(block_files().size(), 3u);
        // Evicted: 0, 2, 3 (least recently used); kept: 1 (read back), 4, 5.
        for (size_t i : {0u, 2u, 3u}) EXPECT_FALSE(fs::exists(dir_ / file_of(*model, seqs[i], 0))) << i;
        for (size_t i : {1u, 4u, 5u}) EXPECT_TRUE(fs::exists(dir_ / file_of(*model, seqs[i], 0))) << i;
    }
    // A cache opened with a smaller budget trims the directory at once (the root's list of next blocks,
    // naming all six, was rewritten last: the most recently used file).
    PrefixCache smaller(*model, options(file_bytes + next_file_bytes(6)));
    EXPECT_EQ(smaller.stats().disk_blocks_held, 1u);
    EXPECT_EQ(smaller.stats().disk_evictions, 2u);
    EXPECT_EQ(block_files().size(), 1u);
}

// Issue 34 item 10: room for a named state on a full filesystem the cache shares, least recently used first.
TEST_F(PrefixCacheDisk, EvictDiskBytesFreesLeastRecentlyUsedFilesWhateverTheBudget) {
    auto model = tiny();
    const uint64_t file_bytes = identity_of(*model).file_bytes();
    std::vector<std::vector<int32_t>> seqs;
    for (uint64_t seed = 0; seed < 3; ++seed) seqs.push_back(pseudo_random_tokens(B + 1, 300, 70 + seed));
    PrefixCache cache(*model, options());
    for (const auto& tokens : seqs) run_request(cache, model, tokens);
    ASSERT_EQ(block_files().size(), 3u);
    // One file is enough: seqs[0]'s block, the least recently used (the root's next-block list was
    // rewritten after each block).
    EXPECT_EQ(cache.evict_disk_bytes(file_bytes), file_bytes);
    EXPECT_FALSE(fs::exists(dir_ / file_of(*model, seqs[0], 0)));
    for (size_t i : {1u, 2u}) EXPECT_TRUE(fs::exists(dir_ / file_of(*model, seqs[i], 0))) << i;
    EXPECT_EQ(cache.stats().disk_evictions, 1u);
    const uint64_t held = cache.stats().disk_bytes_held;
    EXPECT_EQ(cache.evict_disk_bytes(uint64_t{1} << 40), held);  // more than there is: every file
    EXPECT_TRUE(block_files().empty());
    EXPECT_EQ(cache.evict_disk_bytes(1), 0u);
    EXPECT_EQ(run_request(cache, model, seqs[1]), 0);  // gone from disk (and RAM holds nothing: budget 0)
}

TEST_F(PrefixCacheDisk, FilesOthersDeleteOrAddAreMissesAndHitsNotErrors) {
    auto model = tiny();
    const auto tokens = pseudo_random_tokens(3 * B + 1, 300, 7);
    PrefixCache writer(*model, options());
    PrefixCache reader(*model, options());  // scanned an empty directory
    run_request(writer, model, tokens);
    EXPECT_EQ(reader.stats().disk_blocks_held, 0u);

    // Another process evicts block 1: the reader takes block 0 and stops there.
    ASSERT_TRUE(fs::remove(dir_ / file_of(*model, tokens, 1)));
    EXPECT_EQ(run_request(reader, model, tokens), B);  // files that appeared after its scan are found
    PrefixCacheStats s = reader.stats();
    EXPECT_EQ(s.disk_hits, 1u);
    EXPECT_EQ(s.disk_rejected, 0u);
    EXPECT_EQ(s.disk_blocks_written, 1u);  // its release rewrote block 1 and adopted the writer's block 2
    EXPECT_EQ(s.disk_blocks_held, 3u);
    EXPECT_TRUE(fs::exists(dir_ / file_of(*model, tokens, 1)));

    // The whole directory goes: misses, and the next writes create it again.
    fs::remove_all(dir_);
    const auto more = pseudo_random_tokens(2 * B + 1, 300, 9);
    EXPECT_EQ(run_request(writer, model, more), 0);
    s = writer.stats();
    EXPECT_EQ(s.disk_misses, 2u);  // its first request (an empty directory) and this one
    EXPECT_EQ(s.disk_write_errors, 0u);
    EXPECT_TRUE(fs::exists(dir_ / file_of(*model, more, 1)));

    // A directory that cannot be recreated (a file took its place): write errors are counted, not thrown.
    fs::remove_all(dir_);
    write_bytes(dir_, "in the way");
    EXPECT_EQ(run_request(writer, model, pseudo_random_tokens(2 * B + 1, 300, 10)), 0);
    EXPECT_EQ(writer.stats().disk_write_errors, 2u);
}

TEST_F(PrefixCacheDisk, TwoCachesSharingADirectoryConcurrentlyStayExact) {
    auto model = tiny();
    const auto common = pseudo_random_tokens(2 * B, 300, 8);
    const uint64_t file_bytes = identity_of(*model).file_bytes();
    std::vector<int> reused(2, 0);
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t) {
        threads.emplace_back([&, t] {
            PrefixCache cache(*model, options(5 * file_bytes));  // tight: both evict each other's files
            for (int round = 0; round < 4; ++round) {
                std::vector<int32_t> tokens = common;
                const auto tail = pseudo_random_tokens(B + 5 * round, 300, static_cast<uint64_t>(100 + 10 * t + round));
                tokens.insert(tokens.end(), tail.begin(), tail.end());
                reused[static_cast<size_t>(t)] += static_cast<int>(run_request(cache, model, tokens));
            }
        });
    }
    for (auto& thread : threads) thread.join();
    EXPECT_GT(reused[0] + reused[1], 0);
    for (const std::string& name : block_files())
        EXPECT_FALSE(name.starts_with(".tmp-")) << "a temp file was left behind";
}

TEST_F(PrefixCacheDisk, ADirectoryThatCannotBeUsedIsAClearError) {
    auto model = tiny();
    write_bytes(dir_, "a file, not a directory");
    try {
        PrefixCache cache(*model, options());
        FAIL() << "a regular file was accepted as the cache directory";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::io);
        EXPECT_NE(std::string(e.what()).find(dir_.string()), std::string::npos) << e.what();
    }
    fs::remove(dir_);
}

TEST(PrefixCacheDiskFile, NamesAreTheKeyInLowercaseHex) {
    const BlockKey key{0x0123456789abcdefULL, 0xfedcba9876543210ULL};
    EXPECT_EQ(block_file_name(key), "0123456789abcdeffedcba9876543210.kvb");
    EXPECT_EQ(parse_block_file_name(block_file_name(key)), key);
    for (const char* bad : {"0123456789ABCDEFfedcba9876543210.kvb", "0123456789abcdeffedcba987654321.kvb",
                            "0123456789abcdeffedcba9876543210.kvs", ".tmp-0123456789abcdeffedcba9876543210-1-0", ""}) {
        EXPECT_FALSE(parse_block_file_name(bad).has_value()) << bad;
    }
}

// A list of next blocks reads back as written, and is refused (never ok, never a crash) when truncated
// to any length, when any byte differs, under another identity (model, KV type, ISA) or under another
// parent's name.
TEST(PrefixCacheDiskNextFile, ReadsBackAndRefusesEveryTruncationByteFlipAndForeignIdentity) {
    const fs::path dir = fs::temp_directory_path() / ("kvstash_next_file_" + std::to_string(getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    BlockFileIdentity id;
    id.model.bytes.fill(0x5a);
    id.isa = 1;
    const BlockKey parent{0x1111, 0x2222}, other_parent{0x3333, 0x4444};
    std::vector<NextBlock> entries(3);
    for (size_t i = 0; i < entries.size(); ++i) {
        entries[i].key = BlockKey{i + 1, 2 * i + 7};
        for (int t = 0; t < kv_block_tokens; ++t) entries[i].tokens[static_cast<size_t>(t)] = t * 3 + i;
    }
    ASSERT_TRUE(write_next_file(dir.string(), parent, id, entries));
    const fs::path path = dir / next_file_name(next_blocks_key(parent));
    EXPECT_EQ(fs::file_size(path), next_file_bytes(3));
    std::vector<NextBlock> read;
    ASSERT_EQ(read_next_file(dir.string(), parent, id, read), NextFileRead::ok);
    ASSERT_EQ(read.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(read[i].key, entries[i].key);
        EXPECT_EQ(read[i].tokens, entries[i].tokens);
    }
    EXPECT_EQ(read_next_file(dir.string(), other_parent, id, read), NextFileRead::missing);
    BlockFileIdentity other_model = id, other_type = id, other_isa = id;
    other_model.model.bytes[15] ^= 1;
    other_type.kv_type = 1;
    other_isa.isa = 2;
    EXPECT_EQ(read_next_file(dir.string(), parent, other_isa, read), NextFileRead::rejected);
    EXPECT_EQ(read_next_file(dir.string(), parent, other_model, read), NextFileRead::rejected);
    EXPECT_EQ(read_next_file(dir.string(), parent, other_type, read), NextFileRead::rejected);
    EXPECT_TRUE(read.empty());

    const std::string good = read_bytes(path);
    for (size_t n = 0; n < good.size(); ++n) {
        write_bytes(path, good.substr(0, n));
        ASSERT_EQ(read_next_file(dir.string(), parent, id, read), NextFileRead::rejected) << n << " bytes";
    }
    for (size_t i = 0; i < good.size(); ++i) {
        std::string bad = good;
        bad[i] = static_cast<char>(bad[i] ^ 0x10);
        write_bytes(path, bad);
        ASSERT_EQ(read_next_file(dir.string(), parent, id, read), NextFileRead::rejected) << "byte " << i;
    }
    // Renamed to another parent's list: its header names its own parent.
    write_bytes(dir / next_file_name(next_blocks_key(other_parent)), good);
    EXPECT_EQ(read_next_file(dir.string(), other_parent, id, read), NextFileRead::rejected);
    fs::remove_all(dir);
}

}  // namespace
}  // namespace kvstash::test
