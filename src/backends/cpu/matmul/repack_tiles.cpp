// The repacked layout of repack_tiles.h, written by plain code (one pass at load; no instruction-set file).
#include "backends/cpu/matmul/repack_tiles.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backends/cpu/matmul/matmul_impl.h"
#include "backends/cpu/runtime/numerics.h"

namespace kvstash::kernels {
namespace {

constexpr int64_t kHalfRows = 16;  // rows per 64-byte vector of dwords (one per row)

bool repack_enabled() {
    static const bool enabled = [] {
        const char* set = std::getenv("KVSTASH_REPACK");
        return set == nullptr || std::string(set) != "off";
    }();
    return enabled;
}

float fp16_at(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return fp16_to_fp32(h);
}

// Dword `dword` of the quant bytes src (4 bytes of row `row` of the tile) at vector slot `slot` of a section.
void put_dword(uint8_t* section, int64_t slot, int64_t row, const uint8_t* src) {
    std::memcpy(section + (slot * 2 + row / kHalfRows) * 64 + 4 * (row % kHalfRows), src, 4);
}

// One row (row < 32 of its tile) of the nb blocks of a chunk; blk: the row's block b0 in the file.
void repack_row(TensorType type, const uint8_t* blk, int64_t nb, int64_t row, uint8_t* chunk) {
    constexpr int64_t R = kRepackTileRows;
    if (type == TensorType::Q4_0 || type == TensorType::Q4_1) {  // fp16 d | (q4_1: fp16 m) | qs[16]
        const bool with_min = type == TensorType::Q4_1;
        const int64_t bytes = with_min ? 20 : 18;
        uint8_t* quants = chunk;
        uint8_t* d = chunk + nb * 512;  // fp16 [b][32 rows], then q4_1's m alike
        for (int64_t b = 0; b < nb; ++b, blk += bytes) {
            std::memcpy(d + 2 * (b * R + row), blk, 2);
            if (with_min) std::memcpy(d + 2 * ((nb + b) * R + row), blk + 2, 2);
            for (int k = 0; k < 4; ++k) put_dword(quants, b * 4 + k, row, blk + (with_min ? 4 : 2) + 4 * k);
        }
    } else if (type == TensorType::Q8_0) {
        uint8_t* quants = chunk;
        auto* d = reinterpret_cast<float*>(chunk + nb * 1024);
        for (int64_t b = 0; b < nb; ++b, blk += 34) {
            d[b * R + row] = fp16_at(blk);
            for (int k = 0; k < 8; ++k) {
                uint8_t q[4];
                for (int j = 0; j < 4; ++j) q[j] = static_cast<uint8_t>(blk[2 + 4 * k + j] ^ 0x80);
                put_dword(quants, b * 8 + k, row, q);
            }
        }
    } else if (type == TensorType::Q4_K) {
        uint8_t* quants = chunk;
        auto* d = reinterpret_cast<float*>(chunk + nb * 4096);
        float* dmin = d + nb * R;
        auto* sc = reinterpret_cast<int8_t*>(dmin + nb * R);
        int8_t* mn = sc + nb * 8 * R;
        for (int64_t b = 0; b < nb; ++b, blk += 144) {
            d[b * R + row] = fp16_at(blk);
            dmin[b * R + row] = fp16_at(blk + 2);
            for (int j = 0; j < 8; ++j) {
                int s = 0, m = 0;
                k_quant_scale_min(j, blk + 4, &s, &m);
                sc[(b * 8 + j) * R + row] = static_cast<int8_t>(s);
                mn[(b * 8 + j) * R + row] = static_cast<int8_t>(m);
            }
            for (int g = 0; g < 4; ++g)
                for (int k = 0; k < 8; ++k) put_dword(quants, b * 32 + g * 8 + k, row, blk + 16 + 32 * g + 4 * k);
        }
    } else {  // q6_K: ql[128] | qh[64] | int8 scales[16] | d
        uint8_t* ql = chunk;
        uint8_t* qh = chunk + nb * 4096;
        auto* d = reinterpret_cast<float*>(chunk + nb * 6144);
        auto* sc = reinterpret_cast<int8_t*>(d + nb * R);
        for (int64_t b = 0; b < nb; ++b, blk += 210) {
            d[b * R + row] = fp16_at(blk + 208);
            for (int j = 0; j < 16; ++j) sc[(b * 16 + j) * R + row] = static_cast<int8_t>(blk[192 + j]);
            for (int k = 0; k < 32; ++k) put_dword(ql, b * 32 + k, row, blk + 4 * k);        // h, s, k in order
            for (int k = 0; k < 16; ++k) put_dword(qh, b * 16 + k, row, blk + 128 + 4 * k);  // h, k
        }
    }
}

}  // namespace

bool has_repacked_layout(TensorType type) {
    switch (type) {
        case TensorType::Q4_0:
        case TensorType::Q4_1:
        case TensorType::Q8_0:
        case TensorType::Q4_K:
        case TensorType::Q6_K: return true;
        default: return false;
    }
}

bool matmul_reads_repacked(Isa isa, TensorType type) {
    if (isa != Isa::avx512 || !has_repacked_layout(type) || !repack_enabled()) return false;
    return (type != TensorType::Q8_0 && type != TensorType::Q4_0 && type != TensorType::Q4_1) || avx512_uses_vnni();
}

uint64_t repacked_bytes_per_block(TensorType type) {
    switch (type) {
        case TensorType::Q4_0: return 32 * (16 + 2);               // 576: the file's bytes
        case TensorType::Q4_1: return 32 * (16 + 2 + 2);           // 640: the file's bytes
        case TensorType::Q8_0: return 32 * (32 + 4);               // 1,152
        case TensorType::Q4_K: return 32 * (128 + 2 * 4 + 2 * 8);  // 4,864
        case TensorType::Q6_K: return 32 * (128 + 64 + 4 + 16);    // 6,784
        default: return 0;
    }
}

uint64_t repacked_bytes(TensorType type, int64_t rows, int64_t cols) {
    const int64_t tiles = (rows + kRepackTileRows - 1) / kRepackTileRows;
    const int64_t blocks = cols / static_cast<int64_t>(tensor_type_traits(type).block_size);
    return static_cast<uint64_t>(tiles * blocks) * repacked_bytes_per_block(type);
}

void repack_tiles(TensorType type, const void* W, int64_t rows, int64_t cols, uint8_t* out) {
    const auto block = static_cast<int64_t>(tensor_type_traits(type).block_size);
    const int64_t blocks = cols / block, chunk_blocks = kRepackChunkCols / block;
    const uint64_t row_bytes = tensor_row_bytes(type, cols), record = repacked_bytes_per_block(type);
    const auto* w = static_cast<const uint8_t*>(W);
    std::memset(out, 0, repacked_bytes(type, rows, cols));  // rows past the matrix: zero weights and scales
    for (int64_t r0 = 0; r0 < rows; r0 += kRepackTileRows) {
        uint8_t* tile = out + static_cast<uint64_t>(r0 / kRepackTileRows * blocks) * record;
        for (int64_t b0 = 0; b0 < blocks; b0 += chunk_blocks) {
            const int64_t nb = std::min(chunk_blocks, blocks - b0);
            uint8_t* chunk = tile + static_cast<uint64_t>(b0) * record;
            for (int64_t i = 0; i < std::min(kRepackTileRows, rows - r0); ++i) {
                const uint8_t* blk = w + static_cast<uint64_t>(r0 + i) * row_bytes +
                                     static_cast<uint64_t>(b0) * tensor_type_traits(type).type_size;
                repack_row(type, blk, nb, i, chunk);
            }
        }
    }
}

}  // namespace kvstash::kernels
