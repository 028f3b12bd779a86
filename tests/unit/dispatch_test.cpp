// ISA dispatch (backends/cpu/runtime/dispatch.h): names, availability, CPU features, the kernel tables, KVSTASH_ISA
// (also in child processes).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cpu/activation/activation.h"
#include "backends/cpu/attention/attention_rows.h"
#include "backends/cpu/exp/exp_f32.h"
#include "backends/cpu/matmul/gemm_int8.h"
#include "backends/cpu/matmul/matmul.h"
#include "backends/cpu/matmul/matmul_impl.h"
#include "backends/cpu/matmul/quantize_act.h"
#include "backends/cpu/norm/norm.h"
#include "backends/cpu/rope/rope_rotate.h"
#include "backends/cpu/runtime/dispatch.h"
#include "backends/cpu/runtime/numerics.h"
#include "format/tensor_type.h"
#include "kvstash/error.h"
#include "support/every_path.h"

namespace kvstash {
namespace {

TEST(Dispatch, NamesAndAvailability) {
    EXPECT_STREQ(isa_name(Isa::scalar), "scalar");
    EXPECT_STREQ(isa_name(Isa::avx2), "avx2");
    EXPECT_STREQ(isa_name(Isa::avx512), "avx512");
    EXPECT_STREQ(isa_name(Isa::neon), "neon");
    const std::vector<Isa> isas = available_isas();
    ASSERT_FALSE(isas.empty());
    EXPECT_EQ(isas.front(), Isa::scalar);
}

// cpu_features() against an independent source: the flags the kernel reports in /proc/cpuinfo (its names
// differ for VNNI). Skipped where /proc/cpuinfo is missing or has no flags line.
TEST(Dispatch, CpuFeaturesAgreeWithProcCpuinfo) {
    std::ifstream cpuinfo("/proc/cpuinfo");
    std::string line;
    std::set<std::string> flags;
    while (std::getline(cpuinfo, line)) {
        if (line.rfind("flags", 0) != 0) continue;
        std::istringstream words(line.substr(line.find(':') + 1));
        for (std::string w; words >> w;) flags.insert(w);
        break;
    }
    if (!KVSTASH_HAVE_X86_KERNELS) GTEST_SKIP() << "not an x86 build: no x86 features are read";
    if (flags.empty()) GTEST_SKIP() << "no /proc/cpuinfo flags line";
    const CpuFeatures& f = cpu_features();
    EXPECT_EQ(f.avx2, flags.count("avx2") == 1);
    EXPECT_EQ(f.fma, flags.count("fma") == 1);
    EXPECT_EQ(f.f16c, flags.count("f16c") == 1);
    EXPECT_EQ(f.avx512f, flags.count("avx512f") == 1);
    EXPECT_EQ(f.avx512bw, flags.count("avx512bw") == 1);
    EXPECT_EQ(f.avx512vl, flags.count("avx512vl") == 1);
    EXPECT_EQ(f.avx512dq, flags.count("avx512dq") == 1);
    EXPECT_EQ(f.avx512vnni, flags.count("avx512_vnni") == 1);
    EXPECT_EQ(f.avx512vbmi, flags.count("avx512vbmi") == 1);
    // The ISAs nest: each needs the one below it.
    EXPECT_TRUE(cpu_supports(Isa::scalar));
    EXPECT_TRUE(!cpu_supports(Isa::avx512) || cpu_supports(Isa::avx2));
    EXPECT_TRUE(!cpu_supports_avx512_vnni() || cpu_supports(Isa::avx512));
    EXPECT_FALSE(cpu_supports(Isa::neon));
}

// On aarch64 the NEON path is always there (part of the baseline) and x86's never; FEAT_DotProd only with NEON.
TEST(Dispatch, Aarch64HasTheNeonPath) {
    if (!KVSTASH_HAVE_NEON_KERNELS) GTEST_SKIP() << "not an aarch64 build";
    EXPECT_TRUE(cpu_supports(Isa::neon));
    EXPECT_TRUE(cpu_features().neon);
    EXPECT_FALSE(cpu_supports(Isa::avx2));
    EXPECT_FALSE(cpu_supports(Isa::avx512));
    EXPECT_EQ(available_isas(), (std::vector<Isa>{Isa::scalar, Isa::neon}));
    EXPECT_TRUE(!cpu_supports_neon_dotprod() || cpu_features().neon_dotprod);
}

// Every table is complete (the x86 paths have a GQA group kernel; scalar and neon take the per-row operations), and
// the scalar one is made of the
// scalar references, the definitions the other tables are tested against.
TEST(Dispatch, KernelTablesAreCompleteAndScalarIsTheReference) {
    for (Isa isa : available_isas()) {
        SCOPED_TRACE(isa_name(isa));
        const kernels::KernelTable& t = kernels::kernel_table(isa);
        EXPECT_NE(t.matmul_rows, nullptr);
        EXPECT_NE(t.matmul_int8_rows, nullptr);
        EXPECT_NE(t.quantize_activation_row, nullptr);
        EXPECT_NE(t.attention_dot, nullptr);
        EXPECT_NE(t.attention_axpy, nullptr);
        EXPECT_NE(t.exp_f32_shifted_row, nullptr);
        EXPECT_EQ(t.attention_group != nullptr, isa == Isa::avx2 || isa == Isa::avx512);
        EXPECT_NE(t.sum_of_squares, nullptr);
        EXPECT_NE(t.scale_row, nullptr);
        EXPECT_NE(t.rope_rotate, nullptr);
        EXPECT_NE(t.swiglu, nullptr);
        EXPECT_NE(t.ssm_conv, nullptr);
        EXPECT_NE(t.ssm_scan, nullptr);
    }
    const kernels::KernelTable& s = kernels::kernel_table(Isa::scalar);
    EXPECT_EQ(s.matmul_rows, &kernels::reference::matmul_rows_scalar);
    EXPECT_EQ(s.matmul_int8_rows, &kernels::reference::matmul_int8_rows_scalar);
    EXPECT_EQ(s.quantize_activation_row, &kernels::reference::quantize_activation_row);
    EXPECT_EQ(s.attention_dot, &kernels::reference::attention_dot);
    EXPECT_EQ(s.attention_axpy, &kernels::reference::attention_axpy);
    EXPECT_EQ(s.exp_f32_shifted_row, &kernels::reference::exp_f32_shifted_row);
    EXPECT_EQ(s.sum_of_squares, &kernels::reference::sum_of_squares);
    EXPECT_EQ(s.scale_row, &kernels::reference::scale_row);
    EXPECT_EQ(s.rope_rotate, &kernels::reference::rope_rotate);
    EXPECT_EQ(s.swiglu, &kernels::reference::swiglu);
}

// Checks active_isa() against KVSTASH_ISA as this process sees it; run directly (unset) and by the
// next test in child processes with the variable set.
TEST(Dispatch, ActiveIsaFollowsEnvironment) {
    const char* forced = std::getenv("KVSTASH_ISA");
    const std::vector<Isa> isas = available_isas();
    if (!forced || !*forced) {
        EXPECT_EQ(active_isa(), isas.back()) << "the best available path is chosen by default";
        EXPECT_EQ(avx512_uses_vnni(), cpu_supports_avx512_vnni());
        EXPECT_EQ(neon_uses_dotprod(), cpu_supports_neon_dotprod());
        return;
    }
    if (std::string(forced) == kNeonWithoutDotprod && cpu_supports(Isa::neon)) {
        EXPECT_EQ(active_isa(), Isa::neon);
        EXPECT_FALSE(neon_uses_dotprod());
        EXPECT_TRUE(matmul_uses_integer_activations(Isa::neon, TensorType::Q4_K));
#if KVSTASH_HAVE_NEON_KERNELS
        EXPECT_EQ(kernels::kernel_table(Isa::neon).matmul_int8_rows, &kernels::matmul_int8_rows_neon);
#endif
        return;
    }
#if KVSTASH_HAVE_NEON_KERNELS
    if (std::string(forced) == "neon") {
        EXPECT_EQ(kernels::kernel_table(Isa::neon).matmul_int8_rows, cpu_supports_neon_dotprod()
                                                                         ? &kernels::matmul_int8_rows_neon_dotprod
                                                                         : &kernels::matmul_int8_rows_neon);
    }
#endif
    if (std::string(forced) == kAvx512WithoutVnni && cpu_supports(Isa::avx512)) {
        EXPECT_EQ(active_isa(), Isa::avx512);
        EXPECT_FALSE(avx512_uses_vnni());
        // Without VNNI the AVX-512 path still multiplies integer activations (its 512-bit tiles on vpmaddubsw +
        // vpmaddwd, the AVX2 kernels for a few tokens): one arithmetic per type on every path.
        EXPECT_TRUE(matmul_uses_integer_activations(Isa::avx512, TensorType::Q4_K));
#if KVSTASH_HAVE_X86_KERNELS
        EXPECT_EQ(kernels::kernel_table(Isa::avx512).matmul_int8_rows, &kernels::gemm_int8_rows_avx512bw);
        EXPECT_EQ(kernels::kernel_table(Isa::avx512).quantize_activation_row, &kernels::quantize_activation_row_avx512);
#endif
        return;
    }
    for (Isa isa : isas) {
        if (std::string(forced) == isa_name(isa)) {
            EXPECT_EQ(active_isa(), isa);
            return;
        }
    }
    try {
        active_isa();
        FAIL() << "KVSTASH_ISA=" << forced << " should be refused";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
        EXPECT_NE(std::string(e.what()).find(forced), std::string::npos) << e.what();
    }
    std::vector<float> y(1);
    EXPECT_THROW(matmul(TensorType::F32, y.data(), 1, 1, y.data(), 1, y.data(), nullptr), Error);
}

TEST(Dispatch, ForcedIsaInChildProcesses) {
    if (std::getenv("KVSTASH_ISA")) GTEST_SKIP() << "already a child";
    std::vector<std::string> values = {"scalar", "avx2", "avx512", kAvx512WithoutVnni, "neon", kNeonWithoutDotprod,
                                       "sse9"};
    for (const std::string& value : values) {
        const std::string run = "KVSTASH_ISA=" + value + " " + test::self_command() +
                                " --gtest_filter=Dispatch.ActiveIsaFollowsEnvironment > /dev/null 2>&1";
        EXPECT_EQ(test::run_child(run), 0) << "KVSTASH_ISA=" << value;
    }
}

}  // namespace
}  // namespace kvstash
