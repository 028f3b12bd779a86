// The state file's ancillary 'session' section: written only when asked, returned only when asked,
// checksummed, compressible, and skipped by plain readers, so a session file is a valid state file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "kvstash/state_file.h"
#include "state/state_file_format.h"
#include "support/eval_helpers.h"
#include "support/paths.h"

namespace kvstash::test {
namespace {

namespace fs = std::filesystem;
using namespace kvstash::state_file;

class SessionSection : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("kvstash_session_section_" + std::to_string(getpid()));
        fs::create_directories(dir_);
        model_ = Model::load(fixture_path("tiny/gqa_f16.gguf"));
        Evaluator evaluator(model_, 1);
        state_ = std::make_unique<State>(*model_);
        evaluator.eval(*state_, pseudo_random_tokens(40, model_->n_vocab(), 3));
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string path(const std::string& name) const { return (dir_ / name).string(); }

    fs::path dir_;
    std::shared_ptr<const Model> model_;
    std::unique_ptr<State> state_;
};

std::string read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
}

void write_bytes(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

// Offset and stored size of the section of `type`, from the file's section table.
std::pair<uint64_t, uint64_t> find_section(const std::string& file, uint32_t type) {
    const auto* p = reinterpret_cast<const uint8_t*>(file.data());
    const uint32_t count = load_le<uint32_t>(p + header::section_count);
    const uint64_t table = load_le<uint64_t>(p + header::section_table_offset);
    for (uint32_t i = 0; i < count; ++i) {
        const uint8_t* e = p + table + uint64_t{i} * kSectionEntryBytes;
        if (load_le<uint32_t>(e + entry::type) == type) {
            return {load_le<uint64_t>(e + entry::offset), load_le<uint64_t>(e + entry::stored_bytes)};
        }
    }
    return {0, 0};
}

TEST_F(SessionSection, RoundTripsAndIsSkippedByPlainReaders) {
    const std::string session = R"({"format": "kvstash-session", "messages": ["é, ✓"]})";
    save_state(*state_, path("with.kvs"), {}, session);
    save_state(*state_, path("without.kvs"));

    std::optional<std::string> got;
    const State a = load_state(*model_, path("with.kvs"), &got);
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(*got, session);
    got = "stale";
    const State b = load_state(*model_, path("without.kvs"), &got);
    EXPECT_FALSE(got.has_value()) << "a file without the section must say so";

    // The plain reader loads the same State from both files, bitwise.
    const State plain = load_state(*model_, path("with.kvs"));
    for (const State* s : {&a, &b, &plain}) {
        EXPECT_TRUE(
            std::equal(s->tokens().begin(), s->tokens().end(), state_->tokens().begin(), state_->tokens().end()));
        ASSERT_EQ(s->last_logits().size(), state_->last_logits().size());
        EXPECT_EQ(0, std::memcmp(s->last_logits().data(), state_->last_logits().data(), s->last_logits().size() * 4));
    }
    EXPECT_TRUE(inspect_state_file(path("with.kvs"), Checksums::verify).has_session);
    EXPECT_TRUE(inspect_state_file(path("with.kvs"), Checksums::verify).checksums_ok);
    EXPECT_FALSE(inspect_state_file(path("without.kvs"), Checksums::skip).has_session);
    EXPECT_EQ(find_section(read_bytes(path("with.kvs")), kSectionSession).second, session.size());
    EXPECT_EQ(find_section(read_bytes(path("without.kvs")), kSectionSession).second, 0u);
}

TEST_F(SessionSection, CompressedSectionRoundTrips) {
    std::string session;
    for (int i = 0; i < 200; ++i) session += R"({"role": "user", "content": "the same words again and again"},)";
    SaveOptions options;
    options.compress = true;
    save_state(*state_, path("z.kvs"), options, session);
    EXPECT_LT(find_section(read_bytes(path("z.kvs")), kSectionSession).second, session.size() / 4) << "not compressed";
    std::optional<std::string> got;
    (void)load_state(*model_, path("z.kvs"), &got);
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(*got, session);
}

TEST_F(SessionSection, ADamagedSectionIsACorruptFileForThoseWhoReadIt) {
    save_state(*state_, path("good.kvs"), {}, std::string(300, 'x'));
    std::string bytes = read_bytes(path("good.kvs"));
    const auto [offset, size] = find_section(bytes, kSectionSession);
    ASSERT_GT(size, 0u);
    bytes[offset + size / 2] ^= 1;
    write_bytes(path("bad.kvs"), bytes);
    std::optional<std::string> got;
    try {
        (void)load_state(*model_, path("bad.kvs"), &got);
        ADD_FAILURE() << "loaded";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::bad_format);
        EXPECT_NE(std::string(e.what()).find("checksum mismatch in section 'session'"), std::string::npos) << e.what();
    }
    // A reader that does not use the section is not stopped by it (it is ancillary).
    EXPECT_EQ(load_state(*model_, path("bad.kvs")).n_tokens(), state_->n_tokens());
    const StateFileInfo info = inspect_state_file(path("bad.kvs"), Checksums::verify);
    EXPECT_FALSE(info.checksums_ok);
    EXPECT_NE(info.checksum_error.find("session"), std::string::npos) << info.checksum_error;
}

}  // namespace
}  // namespace kvstash::test
