// The attention row operations of an instruction set, from its kernel table (backends/cpu/runtime/dispatch.h).
#include "backends/cpu/attention/attention_rows.h"

namespace kvstash::kernels {

AttentionRowOps attention_row_ops(Isa isa) {
    const KernelTable& table = kernel_table(isa);
    return {table.attention_dot, table.attention_axpy, table.exp_f32_shifted_row};
}

}  // namespace kvstash::kernels
