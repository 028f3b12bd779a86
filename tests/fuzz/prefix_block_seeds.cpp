// Writes the fuzz_prefix_block seed corpus: the valid block file of each identity in
// prefix_block_common.h, and a few near misses (another parent, another model, a torn payload, a
// truncated file), which the reader must reject.
//   usage: fuzz_prefix_block_seeds <output directory>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "prefix_block_common.h"

namespace {

void write(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

int main(int argc, char** argv) {
    namespace fuzz = kvstash::fuzz;
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s <output directory>\n", argv[0]);
        return 2;
    }
    const std::filesystem::path dir = argv[1];
    std::filesystem::create_directories(dir);
    const std::filesystem::path scratch = dir / "scratch";
    std::filesystem::create_directories(scratch);
    const auto ids = fuzz::identities();
    for (size_t i = 0; i < ids.size(); ++i) {
        const std::vector<uint8_t> valid = fuzz::valid_file(scratch.string(), ids[i]);
        if (valid.size() != ids[i].file_bytes()) {
            std::fprintf(stderr, "could not write a block file in %s\n", scratch.c_str());
            return 1;
        }
        const std::string stem = "id" + std::to_string(i);
        write(dir / (stem + "_valid.kvb"), valid);
        std::vector<uint8_t> other_parent = valid;
        other_parent[40] ^= 1;
        fuzz::rewrite_checksums(other_parent);
        write(dir / (stem + "_other_parent.kvb"), other_parent);
        std::vector<uint8_t> other_model = valid;
        other_model[50] ^= 0x80;
        fuzz::rewrite_checksums(other_model);
        write(dir / (stem + "_other_model.kvb"), other_model);
        std::vector<uint8_t> torn = valid;
        torn.back() ^= 0xFF;  // checksum no longer matches
        write(dir / (stem + "_torn.kvb"), torn);
        write(dir / (stem + "_truncated.kvb"), std::vector<uint8_t>(valid.begin(), valid.begin() + 240));
    }
    std::filesystem::remove_all(scratch);
    return 0;
}
