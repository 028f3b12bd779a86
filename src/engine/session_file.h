// What a session file's ancillary 'session' section holds, decoded (Session::load / Session::open), and
// its JSON encoding (Session::save). docs/state-format.md, "session", is the specification.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvstash/session.h"

namespace kvstash {

// A decoded session file: the State and what Session keeps beside it.
struct LoadedSession {
    State state;
    std::vector<ChatMessage> messages;
    std::vector<int64_t> turn_starts;
    std::vector<int32_t> system_tokens;
};

namespace session_file {

// The tokens of the rendering's text from byte `from` on (the template writes its own BOS and control
// tokens as text: see chat.h); the messages' text in it never becomes control tokens.
std::vector<int32_t> encode_rendering(const Model& model, const ChatPrompt& prompt, size_t from = 0);
// The tokens every conversation with these messages' system message (or the template's default one)
// starts with: the common prefix of two renderings that differ only in the user's text.
std::vector<int32_t> system_block_tokens(const Model& model, const ChatTemplate& chat_template,
                                         const std::vector<ChatMessage>& messages);

// Reads a session file for `model` and `chat_template`: throws as Session::load documents.
// `adapters`: the set the session continues under; the file must have been saved under it.
LoadedSession read(const Model& model, const ChatTemplate& chat_template, const std::string& path,
                   std::shared_ptr<const AdapterSet> adapters = {});

inline constexpr const char* kFormatName = "kvstash-session";
inline constexpr int kVersion = 1;

// {"format": "kvstash-session", "version": 1, "template": name, "messages": [{"role", "content"}...],
//  "turn_starts": [i64...]}
std::string encode(const std::string& template_name, const std::vector<ChatMessage>& messages,
                   const std::vector<int64_t>& turn_starts);

struct Decoded {
    std::string template_name;
    std::vector<ChatMessage> messages;
    std::vector<int64_t> turn_starts;
};
// Throws Error(bad_format) naming `path` for anything but a well-formed section: messages an optional
// system message then user/assistant pairs, one turn start per pair, non-decreasing, within n_tokens;
// Error(unsupported) for a newer version.
Decoded decode(const std::string& json, const std::string& path, int64_t n_tokens);

}  // namespace session_file
}  // namespace kvstash
