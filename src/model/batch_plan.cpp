#include "model/batch_plan.h"

#include <algorithm>
#include <string>

#include "kvstash/error.h"

namespace kvstash {

std::vector<MicroBatch> plan_micro_batches(std::span<const int64_t> sizes, int64_t max_rows) {
    if (max_rows < 1)
        throw Error(ErrorCode::internal, "plan_micro_batches: max_rows " + std::to_string(max_rows) + " < 1");
    std::vector<MicroBatch> plan;
    int64_t space = 0;  // rows left in plan.back()
    for (size_t request = 0; request < sizes.size(); ++request) {
        for (int64_t offset = 0; offset < sizes[request];) {
            if (space == 0) {
                plan.emplace_back();
                space = max_rows;
            }
            const int64_t count = std::min(space, sizes[request] - offset);
            plan.back().push_back(PlannedSegment{request, offset, count});
            offset += count;
            space -= count;
        }
    }
    return plan;
}

}  // namespace kvstash
