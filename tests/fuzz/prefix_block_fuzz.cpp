// libFuzzer target for the prefix cache's block files (src/engine/prefix_cache_disk_file.*): any bytes
// stored as a block file must read as `rejected`, never crash, and never as `ok` unless they are exactly
// the file that block makes. Each input is tried as is and again with its checksums recomputed, so that
// mutations reach the field checks behind them; then `ok` is right only for a file whose header, up to the
// checksums, is byte for byte the expected one and whose size is right, and the payload read must be the
// file's. Both identities of prefix_block_common.h read every input. Run: tests/fuzz/run_prefix_block_fuzz.sh.
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "prefix_block_common.h"

namespace {

using kvstash::BlockFileIdentity;
using kvstash::BlockFileRead;
namespace fuzz = kvstash::fuzz;

struct Context {
    std::string dir;
    std::string path;  // where each input is stored: the block's file name in `dir`
    std::vector<BlockFileIdentity> ids;
    std::vector<std::vector<uint8_t>> valid;  // per identity
};

const Context& context() {
    static const Context c = [] {
        Context c;
        const char* shm = "/dev/shm";
        c.dir =
            (std::filesystem::is_directory(shm) ? std::string(shm) : std::filesystem::temp_directory_path().string()) +
            "/kvstash_fuzz_prefix_block_" + std::to_string(::getpid());
        std::filesystem::create_directories(c.dir);
        c.path = c.dir + "/" + kvstash::block_file_name(fuzz::block_name().key);
        c.ids = fuzz::identities();
        for (const BlockFileIdentity& id : c.ids) {
            c.valid.push_back(fuzz::valid_file(c.dir, id));
            if (c.valid.back().size() != id.file_bytes()) __builtin_trap();  // the writer itself is broken
        }
        return c;
    }();
    return c;
}

void store(const std::string& path, const std::vector<uint8_t>& bytes) {
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) __builtin_trap();
    if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) __builtin_trap();
    std::fclose(f);
}

void try_input(const std::vector<uint8_t>& bytes) {
    const Context& c = context();
    store(c.path, bytes);
    for (size_t i = 0; i < c.ids.size(); ++i) {
        const BlockFileIdentity& id = c.ids[i];
        const uint64_t half = id.half_bytes();
        std::vector<uint8_t> k(half), v(half);
        const BlockFileRead result = kvstash::read_block_file(c.dir, fuzz::block_name(), id, k.data(), v.data());
        // The file is there: never a miss.
        if (result == BlockFileRead::missing) __builtin_trap();
        const std::vector<uint8_t>& expected = c.valid[i];
        const bool right_header =
            bytes.size() == expected.size() && std::equal(expected.begin(), expected.begin() + 224, bytes.begin());
        std::vector<uint8_t> fixed = bytes;
        fuzz::rewrite_checksums(fixed);
        const bool intact = fixed == bytes;  // both checksums already right
        if ((result == BlockFileRead::ok) != (right_header && intact)) __builtin_trap();
        if (result == BlockFileRead::ok) {
            if (!std::equal(k.begin(), k.end(), bytes.begin() + kvstash::kBlockFileHeaderBytes)) __builtin_trap();
            if (!std::equal(v.begin(), v.end(), bytes.begin() + kvstash::kBlockFileHeaderBytes + half))
                __builtin_trap();
        }
    }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    (void)context();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::vector<uint8_t> bytes(data, data + size);
    try_input(bytes);
    fuzz::rewrite_checksums(bytes);
    try_input(bytes);
    return 0;
}
