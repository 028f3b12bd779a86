// Python's str.strip() with no argument: what Jinja's `trim` filter does (Llama 3's templates trim content).
#pragma once

#include <string_view>

namespace kvstash {

std::string_view python_strip(std::string_view s);

}  // namespace kvstash
