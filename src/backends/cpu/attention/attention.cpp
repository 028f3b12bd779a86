#include "backends/cpu/attention/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/attention/attention_group.h"
#include "backends/cpu/attention/attention_rows.h"
#include "backends/cpu/exp/exp_f32.h"
#include "backends/cpu/runtime/thread_pool.h"

namespace kvstash {
namespace {

constexpr int64_t kChunk = kAttentionChunkKeys;

inline const uint8_t* kv_row(const uint8_t* const* blocks, const KvLayerView& kv, int64_t pos) {
    return blocks[pos / kv.block_tokens] + static_cast<uint64_t>(pos % kv.block_tokens) * kv.row_bytes;
}

// The first key a query at `pos` attends to.
inline int64_t first_key(const AttentionShape& s, int64_t pos) {
    return s.window > 0 && pos >= s.window ? pos - s.window + 1 : 0;
}

inline uint64_t head_offset(const AttentionShape& s, const KvLayerView& kv, int64_t kv_head) {
    return kernels::kv_row_offset(kv.type, kv_head * s.head_dim);
}

// The partials of `n_heads` heads over one chunk, laid out as [max (n_heads)][sum (n_heads)][acc (n_heads ×
// head_dim)]: partial_floats(n_heads) floats.
inline int64_t partial_floats(const AttentionShape& s, int64_t n_heads) { return n_heads * (s.head_dim + 2); }

// Keys [k_first, k_first + n_keys) of the chunk `c` for a query at `pos`.
inline void chunk_keys(const AttentionShape& s, int64_t pos, int64_t c, int64_t* k_first, int64_t* n_keys) {
    const int64_t lo = std::max(first_key(s, pos), c * kChunk);
    const int64_t hi = std::min(pos, c * kChunk + kChunk - 1);
    *k_first = lo;
    *n_keys = hi + 1 - lo;
}

// The definition of one (query, head)'s partial over keys k_first.. (n_keys of them), with the per-row
// operations: scores, their max, the numerators, their sum in key order, and the numerator-weighted sum
// of values in key order (from 0).
void chunk_partial_rows(const kernels::AttentionRowOps& ops, const AttentionShape& s, const KvLayerView& kv,
                        const float* q, int64_t kv_head, int64_t k_first, int64_t n_keys, float* scores, float* max_out,
                        float* sum_out, float* acc) {
    const uint64_t offset = head_offset(s, kv, kv_head);
    float max_score = -INFINITY;
    for (int64_t j = 0; j < n_keys; ++j) {
        const float score = ops.dot(q, kv_row(kv.k_blocks, kv, k_first + j) + offset, s.head_dim, kv.type) * s.scale;
        scores[j] = score;
        if (score > max_score) max_score = score;
    }
    // The numerators (vectorised, the same bits on every ISA), then their sum in key order.
    ops.exp_shifted(scores, scores, n_keys, max_score);
    float sum = 0.0f;
    for (int64_t j = 0; j < n_keys; ++j) sum += scores[j];
    for (int64_t d = 0; d < s.head_dim; ++d) acc[d] = 0.0f;
    for (int64_t j = 0; j < n_keys; ++j) {
        ops.axpy(acc, scores[j], kv_row(kv.v_blocks, kv, k_first + j) + offset, s.head_dim, kv.type);
    }
    *max_out = max_score;
    *sum_out = sum;
}

// q8_0 caches, and head sizes the AVX-512 group kernel does not take (Gemma 3's 256), are read by the AVX2 kernels on
// AVX-512 machines too: the AVX-512 group kernel has no q8_0 load and holds at most 128 values per head in registers,
// and the AVX2 group kernel (each K/V row read once for every head of the call) is faster than the AVX-512 per-row
// operations (one K/V read per head and key). The bits are the same either way (every ISA gives the scalar
// definition's: attention_rows.h).
Isa isa_for(Isa isa, TensorType type, int64_t head_dim) {
    const bool avx512_group = type != TensorType::Q8_0 && kernels::attention_group_avx512_supports(head_dim);
    return isa == Isa::avx512 && !avx512_group ? Isa::avx2 : isa;
}

bool group_kernel_supports(Isa isa, int64_t head_dim) {
    switch (isa) {
        case Isa::avx2: return kernels::attention_group_avx2_supports(head_dim);
        case Isa::avx512: return kernels::attention_group_avx512_supports(head_dim);
        default: return false;
    }
}

// Whether chunk_partial_heads takes heads that start at different keys of a chunk (AttentionGroupArgs::head_first:
// only the AVX2 group kernel reads it).
bool heads_may_differ_in_first_key(Isa isa, TensorType type, int64_t head_dim) {
    isa = isa_for(isa, type, head_dim);
    return isa == Isa::avx2 && kernels::kernel_table(isa).attention_group != nullptr &&
           group_kernel_supports(isa, head_dim);
}

// `n_heads` heads that read KV head `kv_head` (their query vectors consecutive at q_heads), keys
// k_first.. (n_keys of them; head i the first head_keys[i] of them where head_keys is given: every group kernel
// reads AttentionGroupArgs::head_keys, the per-row fallback takes the heads one at a time; from the head_first[i]-th
// where head_first is given, on heads_may_differ_in_first_key paths only): the partials into
// `partial` (partial_floats(n_heads) floats), bitwise chunk_partial_rows for each head, by the ISA's group kernel
// where it has one. Each head's partial depends only on its own query vector and the keys, never on how many heads
// share the call.
void chunk_partial_heads(Isa isa, const AttentionShape& s, const KvLayerView& kv, const float* q_heads, int64_t n_heads,
                         int64_t kv_head, int64_t k_first, int64_t n_keys, float* partial, std::vector<float>& scores,
                         const int64_t* head_keys = nullptr, const int64_t* head_first = nullptr) {
    isa = isa_for(isa, kv.type, s.head_dim);
    scores.resize(static_cast<size_t>(n_heads * kChunk));
    float* max_score = partial;
    float* sum = partial + n_heads;
    float* acc = partial + 2 * n_heads;
    const kernels::KernelTable& table = kernels::kernel_table(isa);
    if (table.attention_group != nullptr && group_kernel_supports(isa, s.head_dim)) {
        kernels::AttentionGroupArgs args;
        args.q = q_heads;
        args.n_heads = n_heads;
        args.head_dim = s.head_dim;
        args.first_key = k_first;
        args.n_keys = n_keys;
        args.scale = s.scale;
        args.head_keys = head_keys;
        args.head_first = head_first;
        args.k_blocks = kv.k_blocks;
        args.v_blocks = kv.v_blocks;
        args.offset = head_offset(s, kv, kv_head);
        args.block_tokens = kv.block_tokens;
        args.row_bytes = kv.row_bytes;
        args.type = kv.type;
        args.scores = scores.data();
        args.max_score = max_score;
        args.sum = sum;
        args.acc = acc;
        table.attention_group(args);
        return;
    }
    const kernels::AttentionRowOps ops = kernels::attention_row_ops(isa);
    for (int64_t i = 0; i < n_heads; ++i) {
        const int64_t first = head_first == nullptr ? 0 : head_first[i];
        chunk_partial_rows(ops, s, kv, q_heads + i * s.head_dim, kv_head, k_first + first,
                           (head_keys == nullptr ? n_keys : head_keys[i]) - first, scores.data(), max_score + i,
                           sum + i, acc + i * s.head_dim);
    }
}

// Heads [h_begin, h_end) (one KV head) of the query at `pos`, chunk `c`: the partials into `partial`
// (partial_floats(h_end - h_begin) floats).
void chunk_partial(Isa isa, const AttentionShape& s, const KvLayerView& kv, const float* q_row, int64_t pos,
                   int64_t h_begin, int64_t h_end, int64_t c, float* partial, std::vector<float>& scores) {
    const int64_t group = s.n_head / s.n_head_kv;
    int64_t k_first = 0, n_keys = 0;
    chunk_keys(s, pos, c, &k_first, &n_keys);
    chunk_partial_heads(isa, s, kv, q_row + h_begin * s.head_dim, h_end - h_begin, h_begin / group, k_first, n_keys,
                        partial, scores);
}

// Head i's output from the partials of its chunks (chunk k's block at partials + k * stride, holding
// n_heads heads), combined in chunk order: with M the largest chunk max and f_k = exp_f32(max_k - M),
// out = (sum over k of acc_k * f_k) / (sum over k of sum_k * f_k), each sum in chunk order from 0. (Compiled
// for the baseline ISA, without fma, on every path.)
void combine_partials(const AttentionShape& s, const float* partials, int64_t n_chunks, int64_t stride, int64_t n_heads,
                      int64_t i, float* out) {
    float m = partials[i];
    for (int64_t k = 1; k < n_chunks; ++k) m = std::max(m, partials[k * stride + i]);
    float l = 0.0f;
    for (int64_t d = 0; d < s.head_dim; ++d) out[d] = 0.0f;
    for (int64_t k = 0; k < n_chunks; ++k) {
        const float* block = partials + k * stride;
        const float f = kernels::exp_f32(block[i] - m);
        l += block[n_heads + i] * f;
        const float* acc = block + 2 * n_heads + i * s.head_dim;
        for (int64_t d = 0; d < s.head_dim; ++d) out[d] += acc[d] * f;
    }
    const float inv = 1.0f / l;
    for (int64_t d = 0; d < s.head_dim; ++d) out[d] *= inv;
}

inline int64_t first_chunk(const AttentionShape& s, int64_t pos) { return first_key(s, pos) / kChunk; }
inline int64_t n_chunks_of(const AttentionShape& s, int64_t pos) { return pos / kChunk - first_chunk(s, pos) + 1; }

// Heads [h_begin, h_end) of one row, every chunk in turn, then combined.
void row_heads_all_chunks(Isa isa, const AttentionShape& s, const KvLayerView& kv, const float* q_row, int64_t pos,
                          int64_t h_begin, int64_t h_end, float* out_row) {
    thread_local std::vector<float> scores, partials;
    const int64_t group = s.n_head / s.n_head_kv;
    const int64_t c0 = first_chunk(s, pos);
    const int64_t n_chunks = n_chunks_of(s, pos);
    // Heads of one KV head at a time (a range may span several in the per-head split's callers).
    for (int64_t h0 = h_begin; h0 < h_end;) {
        const int64_t h1 = std::min(h_end, (h0 / group + 1) * group);
        const int64_t n_heads = h1 - h0;
        const int64_t stride = partial_floats(s, n_heads);
        partials.resize(static_cast<size_t>(n_chunks * stride));
        for (int64_t k = 0; k < n_chunks; ++k) {
            chunk_partial(isa, s, kv, q_row, pos, h0, h1, c0 + k, partials.data() + k * stride, scores);
        }
        for (int64_t i = 0; i < n_heads; ++i) {
            combine_partials(s, partials.data(), n_chunks, stride, n_heads, i, out_row + (h0 + i) * s.head_dim);
        }
        h0 = h1;
    }
}

// Heads per task when `n_rows` query rows are split over `n_threads`: a whole GQA group (its K/V rows
// read once) when that still gives every thread several tasks, else one head.
int64_t heads_per_task(const AttentionShape& shape, int64_t n_rows, int n_threads) {
    const int64_t group = shape.n_head / shape.n_head_kv;
    return n_rows * shape.n_head_kv >= 4 * static_cast<int64_t>(n_threads) ? group : 1;
}

// Few rows (decode): tasks of (row, KV head, chunk) write their partials to a shared buffer, then tasks of
// (row, KV head) combine them. The same partials and the same combination as row_heads_all_chunks. With
// chunks enough to keep every thread busy (4K keys: 16 per row), a task takes one chunk of a row for every
// KV head in turn: it reads whole K/V rows of the chunk (n_head_kv * head_dim values, contiguous within a
// 32-token block) rather than a 1/n_head_kv slice of each, and there are n_head_kv times fewer tasks to hand
// out (docs/benchmarks-history.md, "Where long-context decode time goes").
void split_over_chunks(Isa isa, const AttentionShape& s, const AttentionRows& rows, const float* q, float* out,
                       ThreadPool& pool) {
    // The caller's buffers, shared with the workers through these references (a thread_local named inside
    // the task lambdas would be each worker's own).
    thread_local std::vector<int64_t> row_first_partial_buffer;  // (n_rows + 1) prefix sums of partials per row
    thread_local std::vector<int64_t> row_first_chunk_buffer;    // (n_rows + 1) prefix sums of chunks per row
    thread_local std::vector<float> partials_buffer;
    std::vector<int64_t>& row_first_partial = row_first_partial_buffer;
    std::vector<int64_t>& row_first_chunk = row_first_chunk_buffer;
    std::vector<float>& partials = partials_buffer;
    const int64_t group = s.n_head / s.n_head_kv;
    const int64_t q_width = s.n_head * s.head_dim;
    const int64_t stride = partial_floats(s, group);
    row_first_partial.assign(1, 0);
    row_first_chunk.assign(1, 0);
    for (int64_t r = 0; r < rows.n_rows; ++r) {
        const int64_t n_chunks = n_chunks_of(s, rows.row_pos[r]);
        row_first_partial.push_back(row_first_partial.back() + s.n_head_kv * n_chunks);
        row_first_chunk.push_back(row_first_chunk.back() + n_chunks);
    }
    partials.resize(static_cast<size_t>(row_first_partial.back() * stride));
    // Row r's partial of (KV head, chunk k) is number row_first_partial[r] + kv_head * n_chunks + k: a KV head's
    // chunks are consecutive.
    auto compute = [&](int64_t r, int64_t kv_head, int64_t k, std::vector<float>& scores) {
        const int64_t pos = rows.row_pos[r];
        const int64_t index = row_first_partial[static_cast<size_t>(r)] + kv_head * n_chunks_of(s, pos) + k;
        chunk_partial(isa, s, rows.views[rows.row_view[r]], q + r * q_width, pos, kv_head * group,
                      (kv_head + 1) * group, first_chunk(s, pos) + k, partials.data() + index * stride, scores);
    };
    const bool whole_rows = row_first_chunk.back() >= 4 * static_cast<int64_t>(pool.n_threads());
    if (whole_rows) {
        pool.run(row_first_chunk.back(), [&](int64_t task) {  // (row, chunk)
            thread_local std::vector<float> scores;
            int64_t r = 0;
            while (row_first_chunk[static_cast<size_t>(r + 1)] <= task) ++r;
            for (int64_t kv_head = 0; kv_head < s.n_head_kv; ++kv_head) {
                compute(r, kv_head, task - row_first_chunk[static_cast<size_t>(r)], scores);
            }
        });
    } else {
        pool.run(row_first_partial.back(), [&](int64_t task) {  // (row, KV head, chunk)
            thread_local std::vector<float> scores;
            int64_t r = 0;
            while (row_first_partial[static_cast<size_t>(r + 1)] <= task) ++r;
            const int64_t n_chunks = n_chunks_of(s, rows.row_pos[r]);
            const int64_t local = task - row_first_partial[static_cast<size_t>(r)];
            compute(r, local / n_chunks, local % n_chunks, scores);
        });
    }
    pool.run(rows.n_rows * s.n_head_kv, [&](int64_t task) {
        const int64_t r = task / s.n_head_kv;
        const int64_t kv_head = task % s.n_head_kv;
        const int64_t n_chunks = n_chunks_of(s, rows.row_pos[r]);
        const float* base = partials.data() + (row_first_partial[static_cast<size_t>(r)] + kv_head * n_chunks) * stride;
        for (int64_t i = 0; i < group; ++i) {
            combine_partials(s, base, n_chunks, stride, group, i,
                             out + r * q_width + (kv_head * group + i) * s.head_dim);
        }
    });
}

// Prefill: query rows in tiles of up to kTileRows consecutive rows of one cache, so that each K/V chunk is
// read (and converted from f16) once for every row of the tile and every head of a GQA group.
constexpr int64_t kTileRows = 32;

struct RowTile {
    int64_t first_row = 0;
    int64_t n_rows = 0;
    int64_t c_lo = 0;  // the chunks any of its rows attends to: [c_lo, c_lo + span)
    int64_t span = 0;
    int64_t first_partial = 0;  // its (KV head, row, chunk) partial blocks in a shared buffer start here
};

// Runs of consecutive rows of the same view, cut every kTileRows rows.
void make_tiles(const AttentionShape& s, const AttentionRows& rows, std::vector<RowTile>& tiles) {
    tiles.clear();
    int64_t next_partial = 0;
    for (int64_t r = 0; r < rows.n_rows;) {
        RowTile t;
        t.first_row = r;
        int64_t c_lo = first_chunk(s, rows.row_pos[r]), c_hi = rows.row_pos[r] / kChunk;
        for (++r; r < rows.n_rows && r - t.first_row < kTileRows && rows.row_view[r] == rows.row_view[t.first_row];
             ++r) {
            c_lo = std::min(c_lo, first_chunk(s, rows.row_pos[r]));
            c_hi = std::max(c_hi, rows.row_pos[r] / kChunk);
        }
        t.n_rows = r - t.first_row;
        t.c_lo = c_lo;
        t.span = c_hi - c_lo + 1;
        t.first_partial = next_partial;
        next_partial += s.n_head_kv * t.n_rows * t.span;
        tiles.push_back(t);
    }
}

// Scratch of one tile-chunk step: the gathered query vectors, the partials of the call, the scores, the heads' keys.
struct TileScratch {
    std::vector<float> q, partial, scores;
    std::vector<int64_t> head_keys, head_first;
    std::vector<int64_t> row_first, row_end;  // per row of the call, its keys [first, end) (absolute positions)
};

// Chunk c of KV head `kv_head` for the rows of `tile` that attend to it. Row i's partial (partial_floats(group)
// floats, as chunk_partial writes it) goes to base + (i * tile.span + c - first_chunk(row's pos)) * stride, so
// that each row's chunks are consecutive from its first. Consecutive rows that see the same keys of this
// chunk (all of them below the last rows' chunk), or the same first key (the rows of the chunk's diagonal, each
// seeing one key more than the row before), share one call, and on the AVX2 kernel so do rows whose sliding windows
// start in the chunk (one key later from row to row: heads_may_differ_in_first_key): their heads' query vectors are
// gathered and each head's partial is bitwise what a call of its own gives.
void tile_chunk(Isa isa, const AttentionShape& s, const AttentionRows& rows, const float* q, const RowTile& tile,
                int64_t kv_head, int64_t c, float* base, TileScratch& scratch) {
    const int64_t group = s.n_head / s.n_head_kv;
    const int64_t q_width = s.n_head * s.head_dim;
    const int64_t stride = partial_floats(s, group);
    const KvLayerView& kv = rows.views[rows.row_view[tile.first_row]];
    const bool firsts_may_differ = heads_may_differ_in_first_key(isa, kv.type, s.head_dim);
    for (int64_t i = 0; i < tile.n_rows;) {
        const int64_t pos = rows.row_pos[tile.first_row + i];
        if (c < first_chunk(s, pos) || c > pos / kChunk) {
            ++i;
            continue;
        }
        int64_t k_first = 0, n_keys = 0;
        chunk_keys(s, pos, c, &k_first, &n_keys);
        // Rows i..i+m-1 share the call: row j sees keys [row_first[j], row_end[j]), the call keys from the least first
        // to the greatest end. Rows that start at a different key (sliding windows that start in this chunk) only
        // where the kernel takes them.
        scratch.row_first.assign(1, k_first);
        scratch.row_end.assign(1, k_first + n_keys);
        int64_t call_first = k_first, call_end = k_first + n_keys;
        int64_t m = 1;
        for (; i + m < tile.n_rows; ++m) {
            const int64_t p = rows.row_pos[tile.first_row + i + m];
            if (c < first_chunk(s, p) || c > p / kChunk) break;
            int64_t f = 0, n = 0;
            chunk_keys(s, p, c, &f, &n);
            if (f != k_first && !firsts_may_differ) break;
            scratch.row_first.push_back(f);
            scratch.row_end.push_back(f + n);
            call_first = std::min(call_first, f);
            call_end = std::max(call_end, f + n);
        }
        bool same_keys = true, same_first = true;
        scratch.head_keys.clear();
        scratch.head_first.clear();
        for (int64_t j = 0; j < m; ++j) {
            const int64_t first = scratch.row_first[static_cast<size_t>(j)] - call_first;
            const int64_t end = scratch.row_end[static_cast<size_t>(j)] - call_first;
            same_first = same_first && first == 0;
            same_keys = same_keys && end == call_end - call_first;
            scratch.head_first.insert(scratch.head_first.end(), static_cast<size_t>(group), first);
            scratch.head_keys.insert(scratch.head_keys.end(), static_cast<size_t>(group), end);
        }
        const int64_t n_heads = m * group;
        scratch.q.resize(static_cast<size_t>(n_heads * s.head_dim));
        scratch.partial.resize(static_cast<size_t>(partial_floats(s, n_heads)));
        for (int64_t j = 0; j < m; ++j) {
            const float* src = q + (tile.first_row + i + j) * q_width + kv_head * group * s.head_dim;
            std::copy(src, src + group * s.head_dim, scratch.q.data() + j * group * s.head_dim);
        }
        chunk_partial_heads(isa, s, kv, scratch.q.data(), n_heads, kv_head, call_first, call_end - call_first,
                            scratch.partial.data(), scratch.scores, same_keys ? nullptr : scratch.head_keys.data(),
                            same_first ? nullptr : scratch.head_first.data());
        const float* p = scratch.partial.data();
        for (int64_t j = 0; j < m; ++j) {
            const int64_t row_pos = rows.row_pos[tile.first_row + i + j];
            float* dst = base + ((i + j) * tile.span + c - first_chunk(s, row_pos)) * stride;
            for (int64_t g = 0; g < group; ++g) {
                dst[g] = p[j * group + g];
                dst[group + g] = p[n_heads + j * group + g];
            }
            const float* acc = p + 2 * n_heads + j * group * s.head_dim;
            std::copy(acc, acc + group * s.head_dim, dst + 2 * group);
        }
        i += m;
    }
}

// Every row of the tile, heads of KV head `kv_head`, from the partials at base (laid out as tile_chunk
// writes them): combine_partials in chunk order, as row_heads_all_chunks does.
void tile_combine(const AttentionShape& s, const AttentionRows& rows, const RowTile& tile, int64_t kv_head,
                  const float* base, float* out) {
    const int64_t group = s.n_head / s.n_head_kv;
    const int64_t q_width = s.n_head * s.head_dim;
    const int64_t stride = partial_floats(s, group);
    for (int64_t i = 0; i < tile.n_rows; ++i) {
        const int64_t r = tile.first_row + i;
        const float* row_base = base + i * tile.span * stride;
        for (int64_t g = 0; g < group; ++g) {
            combine_partials(s, row_base, n_chunks_of(s, rows.row_pos[r]), stride, group, g,
                             out + r * q_width + (kv_head * group + g) * s.head_dim);
        }
    }
}

// Tiles of rows. With enough (tile, KV head) tasks each walks its chunks with its partials in a buffer of its
// own; with few (a short suffix after a restore: 8 rows at 8K keys are one tile, 3 tasks on SmolLM2), the
// tasks are (tile, KV head, chunk) writing to a shared buffer, then (tile, KV head) tasks combine.
void tiled_rows(Isa isa, const AttentionShape& s, const AttentionRows& rows, const float* q, float* out,
                ThreadPool* pool) {
    thread_local std::vector<RowTile> tiles_buffer;
    thread_local std::vector<float> partials_buffer;
    std::vector<RowTile>& tiles = tiles_buffer;  // shared with the workers by reference
    std::vector<float>& partials = partials_buffer;
    make_tiles(s, rows, tiles);
    const int64_t stride = partial_floats(s, s.n_head / s.n_head_kv);
    const int64_t n_tile_tasks = static_cast<int64_t>(tiles.size()) * s.n_head_kv;
    const int n_threads = pool ? pool->n_threads() : 1;
    if (pool == nullptr || n_tile_tasks >= 4 * static_cast<int64_t>(n_threads)) {
        auto task = [&](int64_t index) {
            thread_local std::vector<float> own;
            thread_local TileScratch scratch;
            const RowTile& tile = tiles[static_cast<size_t>(index / s.n_head_kv)];
            const int64_t kv_head = index % s.n_head_kv;
            own.resize(static_cast<size_t>(tile.n_rows * tile.span * stride));
            for (int64_t c = tile.c_lo; c < tile.c_lo + tile.span; ++c) {
                tile_chunk(isa, s, rows, q, tile, kv_head, c, own.data(), scratch);
            }
            tile_combine(s, rows, tile, kv_head, own.data(), out);
        };
        if (pool) {
            pool->run(n_tile_tasks, task);
        } else {
            for (int64_t i = 0; i < n_tile_tasks; ++i) task(i);
        }
        return;
    }
    // (tile, KV head, chunk) tasks: tile t's tasks from task_base[t], KV head-major, then chunks.
    thread_local std::vector<int64_t> task_base_buffer;
    std::vector<int64_t>& task_base = task_base_buffer;
    task_base.assign(1, 0);
    for (const RowTile& t : tiles) task_base.push_back(task_base.back() + s.n_head_kv * t.span);
    const RowTile& last = tiles.back();
    partials.resize(static_cast<size_t>((last.first_partial + s.n_head_kv * last.n_rows * last.span) * stride));
    auto tile_base = [&](const RowTile& t, int64_t kv_head) {
        return partials.data() + (t.first_partial + kv_head * t.n_rows * t.span) * stride;
    };
    pool->run(task_base.back(), [&](int64_t task) {
        thread_local TileScratch scratch;
        size_t t = 0;
        while (task_base[t + 1] <= task) ++t;
        const RowTile& tile = tiles[t];
        const int64_t local = task - task_base[t];
        const int64_t kv_head = local / tile.span;
        tile_chunk(isa, s, rows, q, tile, kv_head, tile.c_lo + local % tile.span, tile_base(tile, kv_head), scratch);
    });
    pool->run(n_tile_tasks, [&](int64_t index) {
        const RowTile& tile = tiles[static_cast<size_t>(index / s.n_head_kv)];
        const int64_t kv_head = index % s.n_head_kv;
        tile_combine(s, rows, tile, kv_head, tile_base(tile, kv_head), out);
    });
}

// Whether two consecutive rows read the same cache (make_tiles puts them in one tile).
bool adjacent_rows_share_a_cache(const AttentionRows& rows) {
    for (int64_t r = 1; r < rows.n_rows; ++r) {
        if (rows.row_view[r] == rows.row_view[r - 1]) return true;
    }
    return false;
}

}  // namespace

void attention(const AttentionShape& shape, const KvLayerView& kv, const float* q, int64_t n_tokens, int64_t first_pos,
               float* out, ThreadPool* pool) {
    attention_with(active_isa(), shape, kv, q, n_tokens, first_pos, out, pool);
}

void attention_row_heads(Isa isa, const AttentionShape& shape, const KvLayerView& kv, const float* q_row, int64_t pos,
                         int64_t h_begin, int64_t h_end, float* out_row) {
    row_heads_all_chunks(isa, shape, kv, q_row, pos, h_begin, h_end, out_row);
}

void attention_per_row_with(Isa isa, const AttentionShape& shape, const KvLayerView& kv, const float* q,
                            int64_t n_tokens, int64_t first_pos, float* out) {
    const kernels::AttentionRowOps ops = kernels::attention_row_ops(isa_for(isa, kv.type, shape.head_dim));
    const int64_t q_width = shape.n_head * shape.head_dim;
    const int64_t group = shape.n_head / shape.n_head_kv;
    const int64_t stride = partial_floats(shape, 1);
    std::vector<float> scores(static_cast<size_t>(kChunk)), partials;
    for (int64_t t = 0; t < n_tokens; ++t) {
        const int64_t pos = first_pos + t;
        const int64_t n_chunks = n_chunks_of(shape, pos);
        partials.resize(static_cast<size_t>(n_chunks * stride));
        for (int64_t h = 0; h < shape.n_head; ++h) {
            const float* q_head = q + t * q_width + h * shape.head_dim;
            for (int64_t k = 0; k < n_chunks; ++k) {
                int64_t k_first = 0, n_keys = 0;
                chunk_keys(shape, pos, first_chunk(shape, pos) + k, &k_first, &n_keys);
                float* p = partials.data() + k * stride;
                chunk_partial_rows(ops, shape, kv, q_head, h / group, k_first, n_keys, scores.data(), p, p + 1, p + 2);
            }
            combine_partials(shape, partials.data(), n_chunks, stride, 1, 0, out + t * q_width + h * shape.head_dim);
        }
    }
}

void attention_rows_with(Isa isa, const AttentionShape& shape, const AttentionRows& rows, const float* q, float* out,
                         ThreadPool* pool) {
    const int n_threads = pool ? pool->n_threads() : 1;
    int64_t max_chunks = 0;
    for (int64_t r = 0; r < rows.n_rows; ++r) max_chunks = std::max(max_chunks, n_chunks_of(shape, rows.row_pos[r]));
    // Too few (row, KV head) tasks to keep every thread busy, and chunks to split: split over keys too. Rows of one
    // cache side by side (a verification batch of k guesses at the end of a long state) go as a tile whose
    // (KV head, chunk) tasks are split over the threads: each K/V chunk is read once for all of them, where
    // split_over_chunks would read the whole cache once per row.
    if (pool != nullptr && n_threads > 1 && max_chunks > 1 && rows.n_rows * shape.n_head_kv < 4 * n_threads) {
        if (adjacent_rows_share_a_cache(rows)) {
            tiled_rows(isa, shape, rows, q, out, pool);
        } else {
            split_over_chunks(isa, shape, rows, q, out, *pool);
        }
        return;
    }
    // Several rows that can share K/V chunk reads (a tile of rows, per KV head, has at least one chunk per
    // thread to split): tiles. Otherwise (few rows at short context) rows × heads tasks.
    if (rows.n_rows > 1 &&
        (pool == nullptr || (rows.n_rows + kTileRows - 1) / kTileRows * shape.n_head_kv * max_chunks >=
                                2 * static_cast<int64_t>(n_threads))) {
        tiled_rows(isa, shape, rows, q, out, pool);
        return;
    }
    const int64_t q_width = shape.n_head * shape.head_dim;
    const int64_t per_task = heads_per_task(shape, rows.n_rows, n_threads);
    const int64_t tasks_per_row = shape.n_head / per_task;
    auto task = [&](int64_t index) {
        const int64_t r = index / tasks_per_row;
        const int64_t h = (index % tasks_per_row) * per_task;
        row_heads_all_chunks(isa, shape, rows.views[rows.row_view[r]], q + r * q_width, rows.row_pos[r], h,
                             h + per_task, out + r * q_width);
    };
    const int64_t n_tasks = rows.n_rows * tasks_per_row;
    if (pool) {
        pool->run(n_tasks, task);
    } else {
        for (int64_t i = 0; i < n_tasks; ++i) task(i);
    }
}

void attention_with(Isa isa, const AttentionShape& shape, const KvLayerView& kv, const float* q, int64_t n_tokens,
                    int64_t first_pos, float* out, ThreadPool* pool) {
    thread_local std::vector<int64_t> row_view, row_pos;
    row_view.assign(static_cast<size_t>(n_tokens), 0);
    row_pos.resize(static_cast<size_t>(n_tokens));
    for (int64_t t = 0; t < n_tokens; ++t) row_pos[static_cast<size_t>(t)] = first_pos + t;
    const AttentionRows rows{n_tokens, &kv, row_view.data(), row_pos.data()};
    attention_rows_with(isa, shape, rows, q, out, pool);
}

}  // namespace kvstash
