// JSON text as Python's json.dumps(value, ensure_ascii=False[, indent=N]) writes it: what transformers'
// `tojson` filter puts into a chat template (tools, tool-call arguments). Keys keep their order (the value
// is an ordered_json, as the request gave it); separators ", " and ": " (with an indent: "," at each line
// end); strings escape only '"', '\\' and control characters (\n \r \t \b \f, else \u00XX); floats as
// Python's repr (shortest round trip: 1.0, 0.1, 1e-05, 1e+16).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace kvstash {

// indent < 0: one line.
std::string python_json_dumps(const nlohmann::ordered_json& value, int indent = -1);

}  // namespace kvstash
