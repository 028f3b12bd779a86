// Grammar::for_tool_calls (kvstash/grammar.h): see tool_call_grammar.h.
#include "grammar/tool_call_grammar.h"

#include <cctype>
#include <set>
#include <sstream>
#include <vector>

#include "grammar/json_schema_gbnf.h"
#include "kvstash/error.h"

namespace kvstash::grammar {
namespace {

// A GBNF literal for text of printable ASCII and UTF-8 (tool names; quotes and backslashes escaped).
std::string literal(const std::string& text) {
    std::string out = "\"";
    for (const char c : text) {
        if (c == '"' || c == '\\') out += '\\';
        if (c == '\n') {
            out += "\\n";
            continue;
        }
        out += c;
    }
    return out + "\"";
}

// The names of the rules json_object_gbnf() defines: the primitives every conversion shares verbatim.
const std::set<std::string>& shared_rule_names() {
    static const std::set<std::string> names = [] {
        std::set<std::string> out;
        std::istringstream in(json_object_gbnf() +
                              "date ::= x\ndate-year ::= x\ndate-day ::= x\ntime ::= x\n"
                              "uuid ::= x\n");
        for (std::string line; std::getline(in, line);) {
            const size_t sep = line.find(" ::= ");
            if (sep != std::string::npos && line.compare(0, sep, "root") != 0) out.insert(line.substr(0, sep));
        }
        return out;
    }();
    return names;
}

bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'; }

// Renames the identifiers of one rule body (outside "..." literals, [...] classes and {m,n} counts).
std::string rename_body(const std::string& body, const std::string& prefix) {
    std::string out;
    for (size_t i = 0; i < body.size();) {
        const char c = body[i];
        if (c == '"' || c == '[' || c == '{') {
            const char close = c == '"' ? '"' : c == '[' ? ']' : '}';
            size_t j = i + 1;
            while (j < body.size() && body[j] != close) j += body[j] == '\\' ? 2 : 1;
            out.append(body, i, j + 1 - i);
            i = j + 1;
        } else if (is_name_char(c)) {
            size_t j = i;
            while (j < body.size() && is_name_char(body[j])) ++j;
            const std::string name = body.substr(i, j - i);
            out += shared_rule_names().count(name) ? name : prefix + name;
            i = j;
        } else {
            out += c;
            ++i;
        }
    }
    return out;
}

}  // namespace

std::string prefix_rules(const std::string& gbnf, const std::string& prefix) {
    std::istringstream in(gbnf);
    std::string out;
    for (std::string line; std::getline(in, line);) {
        const size_t sep = line.find(" ::= ");
        if (sep == std::string::npos) continue;
        const std::string name = line.substr(0, sep);
        out += (shared_rule_names().count(name) ? name : prefix + name) +
               " ::= " + rename_body(line.substr(sep + 5), prefix) + "\n";
    }
    return out;
}

std::string tool_call_gbnf(ToolCallFormat format, std::span<const ToolSchema> tools, bool parallel,
                           const GrammarLimits& limits) {
    if (format == ToolCallFormat::none) throw Error(ErrorCode::invalid_argument, "no tool-call format");
    if (tools.empty()) throw Error(ErrorCode::invalid_argument, "no tools to call");
    const char* arguments_key = format == ToolCallFormat::qwen ? "\", \"arguments\": " : "\", \"parameters\": ";
    std::string alternatives;
    std::set<std::string> seen;
    std::string rules;
    for (size_t i = 0; i < tools.size(); ++i) {
        std::string converted;
        try {
            converted = json_schema_to_gbnf(tools[i].parameters, limits);
        } catch (const PreparationExpired&) {
            throw;
        } catch (const Error& e) {
            throw Error(e.code(), "tool '" + tools[i].name + "' parameters: " + e.what());
        }
        const std::string prefix = "t" + std::to_string(i) + "-";
        std::istringstream in(prefix_rules(converted, prefix));
        for (std::string line; std::getline(in, line);) {
            const std::string name = line.substr(0, line.find(" ::= "));
            if (seen.insert(name).second) rules += line + "\n";
        }
        alternatives += std::string(alternatives.empty() ? "" : " | ") + "(" + literal(tools[i].name + arguments_key) +
                        " " + prefix + "root)";
    }
    std::string out;
    if (format == ToolCallFormat::qwen) {
        out = parallel ? "root ::= call (\"\\n\" call)*\n" : "root ::= call\n";
        out += "call ::= \"<tool_call>\\n{\\\"name\\\": \\\"\" (" + alternatives + ") \"}\\n</tool_call>\"\n";
    } else {
        out = "root ::= \"{\\\"name\\\": \\\"\" (" + alternatives + ") \"}\"\n";
    }
    return out + rules;
}

}  // namespace kvstash::grammar

namespace kvstash {

std::shared_ptr<const Grammar> Grammar::for_tool_calls(ToolCallFormat format, std::span<const ToolSchema> tools,
                                                       bool parallel, const GrammarLimits& limits) {
    return from_gbnf(grammar::tool_call_gbnf(format, tools, parallel, limits), limits);
}

}  // namespace kvstash
