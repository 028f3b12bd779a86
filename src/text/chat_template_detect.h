// Recognising a chat template from its Jinja text (ChatTemplate::for_model reads it from the GGUF's
// tokenizer.chat_template; the parity test feeds it the fixtures' template texts).
#pragma once

#include <string_view>

#include "kvstash/chat.h"

namespace kvstash {

// The known template (text/chat_template_known.h) whose text `template_text` is, byte for byte except for one
// trailing newline (Jinja drops it) and the default system prompt, which is read from the text. Throws
// Error(unsupported) for any other text, with a message listing the known names (callers add how to pick one).
ChatTemplate detect_chat_template(std::string_view template_text);

}  // namespace kvstash
