// The GBNF parser of gbnf_parse.h: recursive descent over the text, then the checks a matcher needs
// (every rule defined, a root, no left recursion).
#include "grammar/gbnf_parse.h"

#include <map>
#include <string>
#include <utility>

#include "base/utf8.h"
#include "kvstash/error.h"

namespace kvstash::grammar {

namespace {

constexpr int64_t kMaxRepetitions = 10000;  // {m,n} bounds; each copy is a copy of the elements

bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

class Parser {
public:
    Parser(std::string_view text, const GrammarLimits& limits) : text_(text), limits_(limits) {}

    ParsedGrammar parse() {
        skip_space(true);
        while (pos_ < text_.size()) {
            limits_.check_deadline();
            parse_rule();
        }
        for (size_t id = 0; id < rules_.size(); ++id) {
            if (!defined_[id]) fail_at(first_use_[id], "rule '" + names_[id] + "' is used but not defined");
        }
        const auto root = ids_.find("root");
        if (root == ids_.end()) fail_at(text_.size(), "the grammar has no 'root' rule (where matching starts)");
        ParsedGrammar g;
        for (size_t id = 0; id < rules_.size(); ++id) {
            g.rule_start.push_back(static_cast<int32_t>(g.elements.size()));
            g.elements.insert(g.elements.end(), rules_[id].begin(), rules_[id].end());
        }
        g.rule_names = names_;
        g.root = root->second;
        g.rule_chain.assign(rules_.size(), -1);
        g.rule_count.assign(rules_.size(), 0);
        for (size_t c = 0; c < chains_.size(); ++c) {
            for (size_t k = 0; k < chains_[c].size(); ++k) {
                g.rule_chain[static_cast<size_t>(chains_[c][k])] = static_cast<int32_t>(c);
                g.rule_count[static_cast<size_t>(chains_[c][k])] = static_cast<int32_t>(k + 1);
            }
        }
        g.repeat_chains = std::move(chains_);
        check_left_recursion(g);
        return g;
    }

private:
    [[noreturn]] void fail_at(size_t at, const std::string& message) const {
        size_t line = 1, column = 1;
        for (size_t i = 0; i < at && i < text_.size(); ++i) {
            if (text_[i] == '\n') {
                ++line;
                column = 1;
            } else {
                ++column;
            }
        }
        throw Error(ErrorCode::invalid_argument,
                    "grammar: line " + std::to_string(line) + ", column " + std::to_string(column) + ": " + message);
    }
    [[noreturn]] void fail(const std::string& message) const { fail_at(pos_, message); }

    char peek(size_t ahead = 0) const { return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0'; }
    bool at_end() const { return pos_ >= text_.size(); }

    // Spaces, tabs and # comments; newlines too when `newline_ok` (inside ( ) or after '|' / '::=').
    void skip_space(bool newline_ok) {
        while (!at_end()) {
            const char c = peek();
            if (c == '#') {
                while (!at_end() && peek() != '\n') ++pos_;
            } else if (c == ' ' || c == '\t' || (newline_ok && (c == '\n' || c == '\r'))) {
                ++pos_;
            } else {
                break;
            }
        }
    }

    std::string parse_name() {
        const size_t start = pos_;
        while (is_name_char(peek())) ++pos_;
        if (pos_ == start) fail("expected a rule name");
        return std::string(text_.substr(start, pos_ - start));
    }

    int32_t symbol(const std::string& name, size_t used_at) {
        const auto [it, inserted] = ids_.emplace(name, static_cast<int32_t>(rules_.size()));
        if (inserted) {
            rules_.emplace_back();
            names_.push_back(name);
            defined_.push_back(false);
            first_use_.push_back(used_at);
        }
        return it->second;
    }

    int32_t generated_symbol(const std::string& base) {
        const int32_t id = static_cast<int32_t>(rules_.size());
        rules_.emplace_back();
        names_.push_back(base + "_" + std::to_string(id));
        defined_.push_back(true);
        first_use_.push_back(pos_);
        return id;
    }

    void parse_rule() {
        const size_t name_at = pos_;
        const std::string name = parse_name();
        skip_space(false);
        if (text_.substr(pos_, 3) != "::=") fail("expected '::=' after the rule name '" + name + "'");
        pos_ += 3;
        skip_space(true);
        const int32_t id = symbol(name, name_at);
        if (defined_[id]) fail_at(name_at, "rule '" + name + "' is defined twice");
        defined_[id] = true;
        parse_alternates(name, id, false);
        if (peek() == '\r') ++pos_;
        if (peek() == '\n') {
            ++pos_;
        } else if (!at_end()) {
            fail(std::string("unexpected '") + peek() + "' (expected an element, '|' or the end of the line)");
        }
        skip_space(true);
    }

    void parse_alternates(const std::string& rule_name, int32_t id, bool nested) {
        std::vector<Element> out;
        parse_sequence(out, rule_name, nested);
        while (peek() == '|') {
            out.push_back({ElementType::alt, 0});
            ++pos_;
            skip_space(true);
            parse_sequence(out, rule_name, nested);
        }
        out.push_back({ElementType::end, 0});
        rules_[id] = std::move(out);
    }

    uint32_t parse_hex(size_t digits) {
        uint32_t value = 0;
        for (size_t i = 0; i < digits; ++i) {
            const char c = peek();
            uint32_t d;
            if (c >= '0' && c <= '9') {
                d = static_cast<uint32_t>(c - '0');
            } else if (c >= 'a' && c <= 'f') {
                d = static_cast<uint32_t>(c - 'a' + 10);
            } else if (c >= 'A' && c <= 'F') {
                d = static_cast<uint32_t>(c - 'A' + 10);
            } else {
                fail("expected " + std::to_string(digits) + " hex digits");
            }
            value = value * 16 + d;
            ++pos_;
        }
        if (value > 0x10FFFF) fail("code point above U+10FFFF");
        return value;
    }

    // One character of a literal or class: an escape or one UTF-8 character.
    uint32_t parse_char() {
        if (peek() == '\\') {
            ++pos_;
            const char c = peek();
            ++pos_;
            switch (c) {
                case 'x': return parse_hex(2);
                case 'u': return parse_hex(4);
                case 'U': return parse_hex(8);
                case 't': return '\t';
                case 'r': return '\r';
                case 'n': return '\n';
                case '\\':
                case '"':
                case '[':
                case ']':
                case '-':
                case '^': return static_cast<uint8_t>(c);
                default: --pos_; fail(std::string("unknown escape '\\") + c + "'");
            }
        }
        char32_t cp = 0;
        const size_t n = at_end() ? 0 : utf8::decode(text_, pos_, &cp);
        if (n == 0) fail("malformed UTF-8");
        pos_ += n;
        return static_cast<uint32_t>(cp);
    }

    int64_t parse_int() {
        const size_t start = pos_;
        int64_t value = 0;
        while (peek() >= '0' && peek() <= '9') {
            value = value * 10 + (peek() - '0');
            if (value > kMaxRepetitions) fail("repetition count above " + std::to_string(kMaxRepetitions));
            ++pos_;
        }
        if (pos_ == start) fail("expected a number");
        return value;
    }

    // Replaces out[last_start..] (one item) by min..max copies of it (max -1: unbounded).
    void repeat(std::vector<Element>& out, size_t last_start, int64_t min, int64_t max, const std::string& rule_name) {
        const std::vector<Element> item(out.begin() + static_cast<std::ptrdiff_t>(last_start), out.end());
        // Copies multiply ("x"{10000}{10000} is 10^8 elements): the total is bounded before any is made.
        // Each optional copy is a rule of the item, a reference and two ends.
        const uint64_t copies = static_cast<uint64_t>(min) + (max > min ? static_cast<uint64_t>(max - min) : 1);
        expanded_ += copies * (item.size() + 3);
        limits_.check_deadline();
        if (expanded_ > limits_.max_elements) {
            fail("the grammar expands to more than " + std::to_string(limits_.max_elements) +
                 " elements once its repetitions are written out (nested {m,n} multiply); use fewer or smaller "
                 "repetitions");
        }
        out.resize(last_start);
        for (int64_t i = 0; i < min; ++i) out.insert(out.end(), item.begin(), item.end());
        if (max < 0) {  // R ::= item R | (empty)
            const int32_t r = generated_symbol(rule_name);
            std::vector<Element> rule = item;
            rule.push_back({ElementType::rule_ref, static_cast<uint32_t>(r)});
            rule.push_back({ElementType::alt, 0});
            rule.push_back({ElementType::end, 0});
            rules_[r] = std::move(rule);
            out.push_back({ElementType::rule_ref, static_cast<uint32_t>(r)});
            return;
        }
        int32_t inner = -1;  // R_k ::= item R_{k-1} | (empty), innermost first
        if (max > min) chains_.emplace_back();
        for (int64_t i = min; i < max; ++i) {
            const int32_t r = generated_symbol(rule_name);
            chains_.back().push_back(r);
            std::vector<Element> rule = item;
            if (inner >= 0) rule.push_back({ElementType::rule_ref, static_cast<uint32_t>(inner)});
            rule.push_back({ElementType::alt, 0});
            rule.push_back({ElementType::end, 0});
            rules_[r] = std::move(rule);
            inner = r;
        }
        if (inner >= 0) out.push_back({ElementType::rule_ref, static_cast<uint32_t>(inner)});
    }

    void parse_sequence(std::vector<Element>& out, const std::string& rule_name, bool nested) {
        size_t last_start = out.size();
        bool have_item = false;
        while (!at_end()) {
            const char c = peek();
            if (c == '"') {
                last_start = out.size();
                ++pos_;
                while (peek() != '"') {
                    if (at_end() || peek() == '\n') fail("unterminated string literal (missing '\"')");
                    out.push_back({ElementType::chr, parse_char()});
                }
                ++pos_;
                have_item = out.size() > last_start;
            } else if (c == '[') {
                last_start = out.size();
                ++pos_;
                ElementType first = ElementType::chr;
                if (peek() == '^') {
                    first = ElementType::chr_not;
                    ++pos_;
                }
                while (peek() != ']') {
                    if (at_end() || peek() == '\n') fail("unterminated character class (missing ']')");
                    const uint32_t lo = parse_char();
                    out.push_back({out.size() == last_start ? first : ElementType::chr_alt, lo});
                    if (peek() == '-' && peek(1) != ']' && pos_ + 1 < text_.size()) {
                        ++pos_;
                        const uint32_t hi = parse_char();
                        if (hi < lo) fail("character range with its upper end below its lower end");
                        out.push_back({ElementType::chr_range_upper, hi});
                    }
                }
                if (out.size() == last_start) fail("empty character class");
                ++pos_;
                have_item = true;
            } else if (is_name_char(c)) {
                last_start = out.size();
                const size_t at = pos_;
                const std::string name = parse_name();
                out.push_back({ElementType::rule_ref, static_cast<uint32_t>(symbol(name, at))});
                have_item = true;
            } else if (c == '(') {
                last_start = out.size();
                if (++group_depth_ > limits_.max_group_depth) {
                    fail("groups ( ) nested deeper than " + std::to_string(limits_.max_group_depth) +
                         " levels; name the inner groups as rules instead");
                }
                ++pos_;
                skip_space(true);
                const int32_t sub = generated_symbol(rule_name);
                parse_alternates(rule_name, sub, true);
                if (peek() != ')') fail("expected ')'");
                ++pos_;
                --group_depth_;
                out.push_back({ElementType::rule_ref, static_cast<uint32_t>(sub)});
                have_item = true;
            } else if (c == '.') {
                last_start = out.size();
                ++pos_;
                out.push_back({ElementType::chr_any, 0});
                have_item = true;
            } else if (c == '*' || c == '+' || c == '?' || c == '{') {
                if (!have_item) fail(std::string("'") + c + "' with nothing before it to repeat");
                ++pos_;
                int64_t min = 0, max = -1;
                if (c == '+') min = 1;
                if (c == '?') max = 1;
                if (c == '{') {
                    skip_space(nested);
                    min = parse_int();
                    skip_space(nested);
                    max = min;
                    if (peek() == ',') {
                        ++pos_;
                        skip_space(nested);
                        max = (peek() >= '0' && peek() <= '9') ? parse_int() : -1;
                        skip_space(nested);
                    }
                    if (peek() != '}') fail("expected '}' closing the repetition");
                    ++pos_;
                    if (max >= 0 && max < min) fail("repetition {m,n} with n < m");
                }
                repeat(out, last_start, min, max, rule_name);
            } else {
                break;
            }
            skip_space(nested);
        }
    }

    void check_left_recursion(const ParsedGrammar& g) const {
        const size_t n = rules_.size();
        // Which rules can match nothing: a work list (a rule is looked at again when one it refers to turns
        // nullable), not passes until nothing changes, which cost n^2 on a chain of n rules.
        std::vector<bool> nullable(n, false);
        std::vector<std::vector<int32_t>> referrers(n);
        for (size_t r = 0; r < n; ++r) {
            for (const Element& e : rules_[r]) {
                if (e.type == ElementType::rule_ref) referrers[e.value].push_back(static_cast<int32_t>(r));
            }
        }
        std::vector<int32_t> work(n);
        for (size_t r = 0; r < n; ++r) work[r] = static_cast<int32_t>(n - 1 - r);
        while (!work.empty()) {
            const auto r = static_cast<size_t>(work.back());
            work.pop_back();
            if (nullable[r]) continue;
            bool all = true;  // the current alternative so far is all nullable references
            for (const Element& e : rules_[r]) {
                if (e.type == ElementType::alt || e.type == ElementType::end) {
                    if (all) {
                        nullable[r] = true;
                        break;
                    }
                    all = true;
                } else if (e.type != ElementType::rule_ref || !nullable[e.value]) {
                    all = false;
                }
            }
            if (nullable[r]) work.insert(work.end(), referrers[r].begin(), referrers[r].end());
        }
        // Edges r -> s where s can start r's match; a cycle is left recursion.
        std::vector<std::vector<int32_t>> starts(n);
        for (size_t r = 0; r < n; ++r) {
            bool at_start = true;
            for (const Element& e : rules_[r]) {
                if (e.type == ElementType::alt || e.type == ElementType::end) {
                    at_start = true;
                } else if (at_start) {
                    if (e.type == ElementType::rule_ref) {
                        starts[r].push_back(static_cast<int32_t>(e.value));
                        at_start = nullable[e.value];
                    } else {
                        at_start = false;
                    }
                }
            }
        }
        std::vector<uint8_t> color(n, 0);  // 0 unvisited, 1 on the DFS path, 2 done
        std::vector<std::pair<int32_t, size_t>> path;
        for (size_t s = 0; s < n; ++s) {
            if (color[s]) continue;
            path.push_back({static_cast<int32_t>(s), 0});
            color[s] = 1;
            while (!path.empty()) {
                auto& [r, next] = path.back();
                if (next == starts[r].size()) {
                    color[r] = 2;
                    path.pop_back();
                    continue;
                }
                const int32_t t = starts[r][next++];
                if (color[t] == 1) {
                    throw Error(ErrorCode::invalid_argument,
                                "grammar: rule '" + g.rule_names[t] +
                                    "' is left-recursive (it can reach itself before matching a character, e.g. "
                                    "a ::= a \"x\", or x* where x can match nothing); rewrite it with a repetition");
                }
                if (color[t] == 0) {
                    color[t] = 1;
                    path.push_back({t, 0});
                }
            }
        }
    }

    std::string_view text_;
    const GrammarLimits& limits_;
    size_t pos_ = 0;
    std::vector<std::vector<Element>> rules_;
    std::vector<std::string> names_;
    std::vector<bool> defined_;
    std::vector<size_t> first_use_;
    std::map<std::string, int32_t> ids_;
    std::vector<std::vector<int32_t>> chains_;  // ParsedGrammar::repeat_chains
    int group_depth_ = 0;                       // ( ) open at pos_: the parser recurses once per level
    uint64_t expanded_ = 0;                     // elements written by repetitions so far
};

// Calls f(lo, hi) for each range of the class at elements[pos] (not chr_any); returns the position after it.
template <typename F>
int32_t for_each_range(const std::vector<Element>& elements, int32_t pos, F&& f) {
    int32_t i = pos;
    while (true) {
        const uint32_t lo = elements[i].value;
        uint32_t hi = lo;
        if (elements[i + 1].type == ElementType::chr_range_upper) {
            hi = elements[i + 1].value;
            i += 2;
        } else {
            i += 1;
        }
        f(lo, hi);
        if (elements[i].type != ElementType::chr_alt) return i;
    }
}

}  // namespace

ParsedGrammar parse_gbnf(std::string_view text, const GrammarLimits& limits) { return Parser(text, limits).parse(); }

bool class_matches(const std::vector<Element>& elements, int32_t pos, uint32_t c) {
    if (elements[pos].type == ElementType::chr_any) return true;
    bool found = false;
    for_each_range(elements, pos, [&](uint32_t lo, uint32_t hi) { found = found || (lo <= c && c <= hi); });
    return found != (elements[pos].type == ElementType::chr_not);
}

int32_t class_end(const std::vector<Element>& elements, int32_t pos) {
    if (elements[pos].type == ElementType::chr_any) return pos + 1;
    return for_each_range(elements, pos, [](uint32_t, uint32_t) {});
}

bool class_intersects(const std::vector<Element>& elements, int32_t pos, uint32_t lo, uint32_t hi) {
    if (elements[pos].type == ElementType::chr_any) return true;
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    for_each_range(elements, pos, [&](uint32_t a, uint32_t b) { ranges.push_back({a, b}); });
    if (elements[pos].type == ElementType::chr) {
        for (const auto& [a, b] : ranges) {
            if (a <= hi && lo <= b) return true;
        }
        return false;
    }
    // Negated: some x in [lo, hi] outside every range.
    uint64_t x = lo;
    while (x <= hi) {
        bool moved = false;
        for (const auto& [a, b] : ranges) {
            if (a <= x && x <= b) {
                x = static_cast<uint64_t>(b) + 1;
                moved = true;
            }
        }
        if (!moved) return true;
    }
    return false;
}

}  // namespace kvstash::grammar
