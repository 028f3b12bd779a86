// The CPU backend: the forward pass's ops (model/backend.h) on the CPU kernels (backends/cpu/<op>/), each on the
// process's instruction set (backends/cpu/runtime/dispatch.h), over a thread pool of its own. Activations are host
// vectors.
#pragma once

#include <memory>

#include "model/backend.h"

namespace kvstash {

// n_threads >= 1: the workers of every op's thread-pool run (the calling thread included).
std::unique_ptr<Backend> make_cpu_backend(int n_threads);

}  // namespace kvstash
