// plan_micro_batches: how eval_batch cuts requests into forward passes of at most max_rows rows.
#include <gtest/gtest.h>

#include <vector>

#include "kvstash/error.h"
#include "model/batch_plan.h"

namespace kvstash {
namespace {

struct Expected {
    size_t request;
    int64_t offset, count;
};

void expect_plan(const std::vector<MicroBatch>& plan, const std::vector<std::vector<Expected>>& expected) {
    ASSERT_EQ(plan.size(), expected.size());
    for (size_t b = 0; b < plan.size(); ++b) {
        ASSERT_EQ(plan[b].size(), expected[b].size()) << "micro-batch " << b;
        for (size_t s = 0; s < plan[b].size(); ++s) {
            EXPECT_EQ(plan[b][s].request, expected[b][s].request) << "micro-batch " << b << " segment " << s;
            EXPECT_EQ(plan[b][s].offset, expected[b][s].offset) << "micro-batch " << b << " segment " << s;
            EXPECT_EQ(plan[b][s].count, expected[b][s].count) << "micro-batch " << b << " segment " << s;
        }
    }
}

TEST(BatchPlan, DecodeStepsShareOneMicroBatch) {
    const std::vector<int64_t> sizes = {1, 1, 1, 1};
    expect_plan(plan_micro_batches(sizes, 128), {{{0, 0, 1}, {1, 0, 1}, {2, 0, 1}, {3, 0, 1}}});
}

TEST(BatchPlan, LongRequestsSplitInOrderAndFillEveryMicroBatch) {
    const std::vector<int64_t> sizes = {5, 0, 10, 3, 1};
    expect_plan(plan_micro_batches(sizes, 4),
                {{{0, 0, 4}}, {{0, 4, 1}, {2, 0, 3}}, {{2, 3, 4}}, {{2, 7, 3}, {3, 0, 1}}, {{3, 1, 2}, {4, 0, 1}}});
}

TEST(BatchPlan, ExactFitStartsNoEmptyMicroBatch) {
    const std::vector<int64_t> sizes = {128, 128};
    expect_plan(plan_micro_batches(sizes, 128), {{{0, 0, 128}}, {{1, 0, 128}}});
}

TEST(BatchPlan, NothingToDo) {
    EXPECT_TRUE(plan_micro_batches(std::vector<int64_t>{}, 128).empty());
    EXPECT_TRUE(plan_micro_batches(std::vector<int64_t>{0, 0}, 128).empty());
}

TEST(BatchPlan, RejectsNonPositiveMaxRows) { EXPECT_THROW(plan_micro_batches(std::vector<int64_t>{1}, 0), Error); }

}  // namespace
}  // namespace kvstash
