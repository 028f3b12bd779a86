// ISA dispatch (kernels/dispatch.h): names, availability, KVSTASH_ISA (also in child processes).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "format/tensor_type.h"
#include "kernels/dispatch.h"
#include "kernels/matmul.h"
#include "kvstash/error.h"

namespace kvstash {
namespace {

TEST(Dispatch, NamesAndAvailability) {
    EXPECT_STREQ(isa_name(Isa::scalar), "scalar");
    EXPECT_STREQ(isa_name(Isa::avx2), "avx2");
    EXPECT_STREQ(isa_name(Isa::avx512), "avx512");
    const std::vector<Isa> isas = available_isas();
    ASSERT_FALSE(isas.empty());
    EXPECT_EQ(isas.front(), Isa::scalar);
}

// Checks active_isa() against KVSTASH_ISA as this process sees it; run directly (unset) and by the
// next test in child processes with the variable set.
TEST(Dispatch, ActiveIsaFollowsEnvironment) {
    const char* forced = std::getenv("KVSTASH_ISA");
    const std::vector<Isa> isas = available_isas();
    if (!forced || !*forced) {
        EXPECT_EQ(active_isa(), isas.back()) << "the best available path is chosen by default";
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
    std::vector<std::string> values = {"scalar", "avx2", "avx512", "sse9"};
    for (const std::string& value : values) {
        // "/proc/self/exe" would name the shell inside system(), so resolve our own path here.
        char self[4096];
        const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
        ASSERT_GT(len, 0);
        self[len] = '\0';
        const std::string run = "KVSTASH_ISA=" + value + " '" + std::string(self) +
                                "' --gtest_filter=Dispatch.ActiveIsaFollowsEnvironment > /dev/null 2>&1";
        EXPECT_EQ(std::system(run.c_str()), 0) << "KVSTASH_ISA=" << value;
    }
}

}  // namespace
}  // namespace kvstash
