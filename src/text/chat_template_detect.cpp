// Chat-template recognition: exact comparison with the known texts, the default system prompt excepted.
#include "text/chat_template_detect.h"

#include <optional>
#include <string>
#include <vector>

#include "kvstash/error.h"
#include "text/chat_template_known.h"

namespace kvstash {
namespace {

// Jinja (keep_trailing_newline=False, as transformers uses it) drops one trailing newline of a template.
std::string_view without_trailing_newline(std::string_view text) {
    if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
    return text;
}

struct Match {
    bool has_default_system = false;
    std::string default_system;
};

// Whether `text` is `pattern` with each kDefaultSystemMarker replaced by one and the same prompt. The prompt
// must not hold a quote or a backslash: it sits inside a Jinja string literal, and such a prompt would need
// unescaping (or end the literal). Each marker's prompt ends at the first occurrence of the text after it;
// a prompt that contains that text does not match (unrecognised, never mis-read).
std::optional<Match> match_known(std::string_view pattern, std::string_view text) {
    std::vector<std::string_view> pieces;  // the literal text between markers
    for (size_t pos = 0;;) {
        const size_t marker = pattern.find(kDefaultSystemMarker, pos);
        if (marker == std::string_view::npos) {
            pieces.push_back(pattern.substr(pos));
            break;
        }
        pieces.push_back(pattern.substr(pos, marker - pos));
        pos = marker + kDefaultSystemMarker.size();
    }
    if (pieces.size() == 1) {
        if (text != pattern) return std::nullopt;
        return Match{};
    }
    if (!text.starts_with(pieces.front())) return std::nullopt;
    std::optional<std::string_view> prompt;
    size_t pos = pieces.front().size();
    for (size_t i = 1; i < pieces.size(); ++i) {
        size_t end;
        if (i + 1 == pieces.size()) {
            if (!text.ends_with(pieces[i]) || text.size() < pos + pieces[i].size()) return std::nullopt;
            end = text.size() - pieces[i].size();
        } else {
            end = text.find(pieces[i], pos);
            if (end == std::string_view::npos) return std::nullopt;
        }
        const std::string_view value = text.substr(pos, end - pos);
        if (prompt && *prompt != value) return std::nullopt;
        prompt = value;
        pos = end + pieces[i].size();
    }
    if (prompt->find_first_of("'\\") != std::string_view::npos) return std::nullopt;
    return Match{true, std::string(*prompt)};
}

// The first characters of a template, on one line, for an error message.
std::string excerpt(std::string_view text) {
    std::string out;
    for (char c : text.substr(0, 60)) out += (c == '\n') ? std::string("\\n") : std::string(1, c);
    return out + (text.size() > 60 ? "..." : "");
}

}  // namespace

ChatTemplate detect_chat_template(std::string_view template_text) {
    const std::string_view text = without_trailing_newline(template_text);
    for (const KnownChatTemplate& known : known_chat_templates()) {
        const auto match = match_known(without_trailing_newline(known.text), text);
        if (!match) continue;
        ChatTemplate tmpl = ChatTemplate::named(known.name);
        if (match->has_default_system) tmpl.set_default_system_prompt(match->default_system);
        tmpl.set_tool_call_format(known.tools);
        return tmpl;
    }
    std::string choices;
    for (const std::string& name : ChatTemplate::names()) choices += (choices.empty() ? "" : "|") + name;
    throw Error(
        ErrorCode::unsupported,
        "unrecognised chat template in the model (tokenizer.chat_template, " + std::to_string(template_text.size()) +
            " bytes: \"" + excerpt(template_text) +
            "\"); kvstash renders only the templates it reproduces exactly; use one of them by name: " + choices);
}

}  // namespace kvstash
