// kvstash_state_bench --throughput-only: state file save / load throughput beside `cat`, a read(2) loop
// and the load's own parts (see throughput_only below).
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kv/kv_block_hash.h"
#include "kvstash/evaluator.h"
#include "kvstash/model.h"
#include "kvstash/state.h"
#include "kvstash/state_file.h"
#include "model/config.h"
#include "state_bench_io.h"

namespace state_bench {

// The load's work without the State: the file mapped as load_state maps it, then
//   touch:     one byte read per 4 KiB page (the page-table work of mapping the page cache),
//   hash:      XXH3-64 over the file (the checksum verification, KvBlockHash as load_state uses it),
//   hash_copy: per `piece` bytes (a block half), XXH3 then memcpy into `dst` (pre-touched, reused:
//              the load's copy into recycled KV blocks).
// Seconds, including mmap and munmap.
inline double time_load_part(const std::string& path, const std::string& part, size_t piece,
                             std::vector<uint8_t>& dst) {
    const auto start = Clock::now();
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw kvstash::Error(kvstash::ErrorCode::io, "cannot open '" + path + "'");
    const size_t size = file_size(path);
    void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (map == MAP_FAILED) throw kvstash::Error(kvstash::ErrorCode::io, "cannot map '" + path + "'");
    ::madvise(map, size, MADV_SEQUENTIAL);
    const auto* bytes = static_cast<const uint8_t*>(map);
    uint64_t sink = 0;
    if (part == "touch") {
        for (size_t i = 0; i < size; i += 4096) sink += bytes[i];
    } else {
        kvstash::KvBlockHash h;  // as load_state hashes (AVX-512 path where available)
        if (part == "hash") {
            h.update(bytes, size);
        } else {
            dst.resize(size);
            for (size_t at = 0; at < size; at += piece) {
                const size_t n = std::min(piece, size - at);
                h.update(bytes + at, n);
                std::memcpy(dst.data() + at, bytes + at, n);
            }
        }
        sink = h.digest();
    }
    ::munmap(map, size);
    const double s = seconds_since(start);
    if (sink == 0x5eed) std::fprintf(stderr, " ");  // keeps the reads
    return s;
}

// --throughput-only: per size, save and load times beside `cat` and a read(2) loop, and the load in a
// fresh process (new pages: what a restarted server pays), with the repeats interleaved. The state is
// prefix_N.kvs from an earlier run when it holds exactly ids[0, N) (a prefill of 8184 tokens takes
// minutes), else prefilled and saved. Also checks that save(load(file)) reproduces the file bytewise.
inline json throughput_only(const std::string& model_path, int threads, const kvstash::Model& model,
                            kvstash::Evaluator& evaluator, const std::vector<int32_t>& ids,
                            const std::vector<int64_t>& sizes, int64_t n_ctx, int repeats, const std::string& dir,
                            bool no_fresh) {
    json out = json::array();
    for (const int64_t n : sizes) {
        const std::span<const int32_t> prefix(ids.data(), static_cast<size_t>(n));
        const std::string path = dir + "/prefix_" + std::to_string(n) + ".kvs";
        const std::string resaved = path + ".resave";
        std::unique_ptr<kvstash::State> state;
        try {
            auto loaded = std::make_unique<kvstash::State>(kvstash::load_state(model, path));
            if (std::ranges::equal(loaded->tokens(), prefix)) state = std::move(loaded);
        } catch (const kvstash::Error&) {  // absent or stale: prefill below
        }
        json r;
        r["prefix_tokens"] = n;
        r["reused_file"] = state != nullptr;
        if (!state) {
            std::fprintf(stderr, "prefix %lld tokens: prefilling...\n", static_cast<long long>(n));
            state = std::make_unique<kvstash::State>(model, kvstash::StateOptions{kvstash::KvType::f16, n_ctx});
            evaluator.eval(*state, prefix);
            kvstash::save_state(*state, path);
        }
        std::vector<double> save_s, load_s, fresh_load_s, cat_s, read_s;
        for (int i = 0; i < repeats; ++i) {
            const auto t = Clock::now();
            kvstash::save_state(*state, resaved);
            save_s.push_back(seconds_since(t));
        }
        r["resave_identical"] = read_file(resaved) == read_file(path);
        std::remove(resaved.c_str());
        state.reset();
        const std::vector<std::string> child{"kvstash_state_bench",
                                             "--child-restore",
                                             "-m",
                                             model_path,
                                             "-t",
                                             std::to_string(threads),
                                             "--child-file",
                                             path,
                                             "--child-suffix",
                                             std::to_string(ids[static_cast<size_t>(n)])};
        const kvstash::ModelInfo& c = model.info();
        const size_t half_bytes = static_cast<size_t>(c.n_layer * 32 * c.n_embd_kv() * 2);  // f16 block half
        std::vector<uint8_t> dst;
        std::vector<double> touch_s, hash_s, hash_copy_s;
        for (int i = 0; i < repeats; ++i) {
            // Rotate the order so that a burst of load on the shared machine hits every way alike.
            for (int k = 0; k < 7; ++k) {
                switch ((i + k) % 7) {
                    case 4: touch_s.push_back(time_load_part(path, "touch", half_bytes, dst)); break;
                    case 5: hash_s.push_back(time_load_part(path, "hash", half_bytes, dst)); break;
                    case 6: hash_copy_s.push_back(time_load_part(path, "hash_copy", half_bytes, dst)); break;
                    case 0: {
                        const auto t = Clock::now();
                        kvstash::State s = kvstash::load_state(model, path);
                        load_s.push_back(seconds_since(t));
                        break;
                    }
                    case 1: cat_s.push_back(time_cat(path)); break;
                    case 2: read_s.push_back(time_read(path)); break;
                    case 3:
                        if (!no_fresh) fresh_load_s.push_back(run_child(child)["load_s"]);
                }
            }
        }
        r["file_bytes"] = file_size(path);
        r["save_s"] = summary(save_s);
        r["load_s"] = summary(load_s);
        r["load_fresh_process_s"] = summary(fresh_load_s);
        r["cat_s"] = summary(cat_s);
        r["read_s"] = summary(read_s);
        r["parts_s"] = {
            {"map_touch", summary(touch_s)}, {"map_hash", summary(hash_s)}, {"map_hash_copy", summary(hash_copy_s)}};
        out.push_back(r);
    }
    return out;
}

}  // namespace state_bench
