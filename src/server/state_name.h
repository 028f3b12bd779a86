// What a named state may be called: the name becomes a file name (<state-dir>/<name>.kvs) and a URL path
// segment, so it is ^[A-Za-z0-9_.-]{1,64}$ and does not start with '.' (no hidden files, no "..").
#pragma once

#include <string_view>

namespace kvstash::server {

bool valid_state_name(std::string_view name);

}  // namespace kvstash::server
