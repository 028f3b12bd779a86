#include "model/prefill_tiles.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "backends/cpu/matmul/repack_tiles.h"
#include "backends/cpu/runtime/dispatch.h"
#include "backends/cpu/runtime/numerics.h"
#include "format/tensor_type.h"
#include "kvstash/error.h"

namespace kvstash {
namespace {

// MemAvailable of /proc/meminfo (free memory plus the page cache the kernel can drop), in bytes; 0 where unknown.
uint64_t available_memory_bytes() {
    std::ifstream meminfo("/proc/meminfo");
    std::string key, unit;
    uint64_t kib = 0;
    while (meminfo >> key >> kib >> unit) {
        if (key == "MemAvailable:") return kib * 1024;
    }
    return 0;
}

struct Job {
    const MatrixRef* matrix;
    uint8_t* out;
    uint64_t bytes;  // of the repacked copy
};

// Repacks every job, the matrices split over `n_threads` threads (0: the hardware threads; an 8B model's layers:
// 4.3 GB). With on_progress the calling thread only reports, about 5 times a second and once at the end, so that
// the callback never runs on a helper thread.
void run_jobs(const std::vector<Job>& jobs, int n_threads,
              const std::function<void(const LoadProgress&)>& on_progress) {
    constexpr std::string_view what = "repacking the weights for the prefill tiles";
    uint64_t total = 0;
    for (const Job& job : jobs) total += job.bytes;
    std::atomic<size_t> next{0};
    std::mutex mutex;
    std::condition_variable finished;
    uint64_t done = 0;  // bytes repacked (under mutex); all of them when done == total
    const auto repack_some = [&] {
        for (size_t i = next++; i < jobs.size(); i = next++) {
            const MatrixRef& m = *jobs[i].matrix;
            kernels::repack_tiles(m.type, m.data, m.rows, m.cols, jobs[i].out);
            const std::lock_guard<std::mutex> lock(mutex);
            done += jobs[i].bytes;
            if (done == total) finished.notify_all();
        }
    };
    const size_t wanted =
        n_threads > 0 ? static_cast<size_t>(n_threads) : std::max(1u, std::thread::hardware_concurrency());
    const size_t threads = std::min(wanted, jobs.size());
    std::vector<std::thread> helpers;
    for (size_t t = on_progress ? 0 : 1; t < threads; ++t) helpers.emplace_back(repack_some);
    if (!on_progress) {
        repack_some();
        for (std::thread& t : helpers) t.join();
        return;
    }
    std::unique_lock<std::mutex> lock(mutex);
    while (!finished.wait_for(lock, std::chrono::milliseconds(200), [&] { return done == total; })) {
        const uint64_t so_far = done;
        lock.unlock();
        on_progress(LoadProgress{what, so_far, total});
        lock.lock();
    }
    lock.unlock();
    for (std::thread& t : helpers) t.join();
    on_progress(LoadProgress{what, total, total});
}

}  // namespace

void TileBuffer::Free::operator()(uint8_t* p) const { std::free(p); }

// The output matrix too where it has 32-element blocks (q4_0, q4_1, q8_0): a speculative verification batch takes the
// logits of each of its rows (k rows of SmolLM2's 49152 × 576 q8_0 head), which the repacked tiles of those types
// compute from 3 tokens on (docs/benchmarks.md, "Speculative decoding"); a prefill's last row still takes the decode
// kernels on the file's layout. Not a K-quant output matrix (an 8B's q6_K: 0.43 GB), whose tiles win from 8 tokens.
// A bad KVSTASH_ISA: none, and the first matmul reports it.
void repack_for_prefill(ModelWeights& w, const ModelLoadOptions& options) {
    Isa isa = Isa::scalar;
    try {
        if (is_cuda_path(current_numerics().path)) return;
        isa = active_isa();
    } catch (const Error&) {
        return;
    }
    std::vector<MatrixRef*> matrices;
    uint64_t tile_bytes = 0, file_bytes = 0;
    const auto consider = [&](MatrixRef* m) {
        if (m->data == nullptr || !kernels::matmul_reads_repacked(isa, m->type)) return;
        matrices.push_back(m);
        tile_bytes += kernels::repacked_bytes(m->type, m->rows, m->cols);
        file_bytes += m->row_bytes * static_cast<uint64_t>(m->rows);
    };
    for (LayerWeights& l : w.layers) {
        for (MatrixRef* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) consider(m);
    }
    // A copy of token_embd's reference where tied: token_embd (the embedding rows) keeps none.
    if (tensor_type_traits(w.output.type).block_size == 32) consider(&w.output);
    // Decode reads the mapped file every token: a copy that pushed it out of the page cache would make decode read
    // the disk. Both must fit in 3/4 of what is available (the file's pages already cached count as available).
    if (matrices.empty()) return;
    const uint64_t available = available_memory_bytes();
    if (available != 0 && tile_bytes + file_bytes > available / 4 * 3) {
        w.tiles_left_out = tile_bytes;
        return;
    }
    const auto start = std::chrono::steady_clock::now();
    std::vector<Job> jobs;
    for (MatrixRef* m : matrices) {
        TileBuffer buffer;
        buffer.bytes = kernels::repacked_bytes(m->type, m->rows, m->cols);
        const uint64_t padded = (buffer.bytes + 63) / 64 * 64;  // aligned_alloc wants a multiple of the alignment
        buffer.data.reset(static_cast<uint8_t*>(std::aligned_alloc(64, padded)));
        if (!buffer.data) throw std::bad_alloc();  // as a std::vector of that size would
        m->tiles = buffer.data.get();
        jobs.push_back({m, buffer.data.get(), buffer.bytes});
        w.tile_bytes += buffer.bytes;
        w.tiles.push_back(std::move(buffer));  // the buffer moves, its address stays
    }
    run_jobs(jobs, options.n_threads, options.on_progress);
    w.tile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace kvstash
