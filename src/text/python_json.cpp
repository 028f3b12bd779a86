#include "text/python_json.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <string_view>

#include "kvstash/error.h"

namespace kvstash {
namespace {

void append_string(std::string& out, std::string_view s) {
    out += '"';
    for (const char ch : s) {
        const auto c = static_cast<unsigned char>(ch);
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            case '\b': out += "\\b"; break;
            case '\f': out += "\\f"; break;
            default:
                if (c < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", c);
                    out += buf;
                } else {
                    out += ch;
                }
        }
    }
    out += '"';
}

// Python's float repr: the shortest digits that round-trip; scientific when the decimal exponent is
// < -4 or >= 16 ("1e-05", "1.5e+16"), else positional with at least one digit after the point.
void append_float(std::string& out, double v) {
    if (!std::isfinite(v)) throw Error(ErrorCode::invalid_argument, "a JSON number is not finite");
    char buf[64];
    const auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
    std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));  // [-]d[.ddd]e[+-]XX
    const bool negative = sci.front() == '-';
    if (negative) sci.remove_prefix(1);
    const size_t e = sci.find('e');
    std::string digits(sci.substr(0, e));
    if (digits.size() > 1) digits.erase(1, 1);  // drop the point
    const int exp10 = std::stoi(std::string(sci.substr(e + 1)));
    if (negative) out += '-';
    if (exp10 < -4 || exp10 >= 16) {
        out += digits.substr(0, 1);
        if (digits.size() > 1) out.append(".").append(digits, 1);
        char ebuf[16];
        std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
        out += ebuf;
    } else if (exp10 < 0) {
        out.append("0.").append(static_cast<size_t>(-exp10 - 1), '0').append(digits);
    } else {
        const size_t int_len = static_cast<size_t>(exp10) + 1;
        if (digits.size() <= int_len) {
            out.append(digits).append(int_len - digits.size(), '0').append(".0");
        } else {
            out.append(digits, 0, int_len).append(".").append(digits, int_len);
        }
    }
}

void dump(std::string& out, const nlohmann::ordered_json& v, int indent, int depth) {
    const auto newline = [&](int d) {
        out += '\n';
        out.append(static_cast<size_t>(indent * d), ' ');
    };
    switch (v.type()) {
        case nlohmann::ordered_json::value_t::object: {
            if (v.empty()) {
                out += "{}";
                return;
            }
            out += '{';
            bool first = true;
            for (const auto& [key, item] : v.items()) {
                if (!first) out += indent >= 0 ? "," : ", ";
                if (indent >= 0) newline(depth + 1);
                first = false;
                append_string(out, key);
                out += ": ";
                dump(out, item, indent, depth + 1);
            }
            if (indent >= 0) newline(depth);
            out += '}';
            return;
        }
        case nlohmann::ordered_json::value_t::array: {
            if (v.empty()) {
                out += "[]";
                return;
            }
            out += '[';
            bool first = true;
            for (const auto& item : v) {
                if (!first) out += indent >= 0 ? "," : ", ";
                if (indent >= 0) newline(depth + 1);
                first = false;
                dump(out, item, indent, depth + 1);
            }
            if (indent >= 0) newline(depth);
            out += ']';
            return;
        }
        case nlohmann::ordered_json::value_t::string: append_string(out, v.get_ref<const std::string&>()); return;
        case nlohmann::ordered_json::value_t::boolean: out += v.get<bool>() ? "true" : "false"; return;
        case nlohmann::ordered_json::value_t::number_integer: out += std::to_string(v.get<int64_t>()); return;
        case nlohmann::ordered_json::value_t::number_unsigned: out += std::to_string(v.get<uint64_t>()); return;
        case nlohmann::ordered_json::value_t::number_float: append_float(out, v.get<double>()); return;
        default: out += "null"; return;
    }
}

}  // namespace

std::string python_json_dumps(const nlohmann::ordered_json& value, int indent) {
    std::string out;
    dump(out, value, indent, 0);
    return out;
}

}  // namespace kvstash
