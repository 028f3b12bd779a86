// The JSON Schema -> GBNF converter of json_schema_gbnf.h: one rule per schema node, named after its
// path, with shared primitive rules.
#include "grammar/json_schema_gbnf.h"

#include <cctype>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "base/json_depth.h"
#include "grammar/gbnf_parse.h"
#include "kvstash/error.h"
#include "kvstash/grammar.h"

namespace kvstash::grammar {

namespace {

using ojson = nlohmann::ordered_json;

constexpr size_t kMaxRuleNameChars = 64;

// Primitive rules, added to the grammar when used (name -> (body, dependencies)).
const std::map<std::string, std::pair<std::string, std::vector<std::string>>>& primitives() {
    static const std::map<std::string, std::pair<std::string, std::vector<std::string>>> table = {
        {"space", {"| \" \" | \"\\n\" [ \\t]{0,20}", {}}},
        {"char", {"[^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})", {}}},
        {"string", {"\"\\\"\" char* \"\\\"\" space", {"char", "space"}}},
        {"integral-part", {"[0] | [1-9] [0-9]{0,15}", {}}},
        {"number",
         {"(\"-\"? integral-part) (\".\" [0-9]+)? ([eE] [-+]? [0-9]{1,4})? space", {"integral-part", "space"}}},
        {"integer", {"(\"-\"? integral-part) space", {"integral-part", "space"}}},
        {"boolean", {"(\"true\" | \"false\") space", {"space"}}},
        {"null", {"\"null\" space", {"space"}}},
        {"value",
         {"object | array | string | number | boolean | null",
          {"object", "array", "string", "number", "boolean", "null"}}},
        {"object",
         {"\"{\" space ( string \":\" space value (\",\" space string \":\" space value)* )? \"}\" space",
          {"string", "space", "value"}}},
        {"array", {"\"[\" space ( value (\",\" space value)* )? \"]\" space", {"value", "space"}}},
        // A calendar date: years 0001-9999; February has 28 days (the 29th, valid only in leap years, is
        // never generated: stricter than the format, so output always validates).
        {"date",
         {"date-year \"-\" ( (\"0\" [13578] | \"1\" [02]) \"-\" (date-day | \"29\" | \"30\" | \"31\") | "
          "(\"0\" [469] | \"11\") \"-\" (date-day | \"29\" | \"30\") | \"02\" \"-\" date-day )",
          {"date-year", "date-day"}}},
        {"date-year", {"[1-9] [0-9]{3} | \"0\" [1-9] [0-9]{2} | \"00\" [1-9] [0-9] | \"000\" [1-9]", {}}},
        {"date-day", {"\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]", {}}},
        {"time",
         {"([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,6} )? ( \"Z\" | [+-] ([01] "
          "[0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] )",
          {}}},
        {"uuid",
         {"[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12}", {}}},
    };
    return table;
}

const std::set<std::string>& ignored_keywords() {
    static const std::set<std::string> words = {"title", "description", "default",    "examples", "$schema",
                                                "$id",   "$comment",    "deprecated", "readOnly", "writeOnly",
                                                "$defs", "definitions", "strict"};
    return words;
}

// A GBNF string literal for `bytes` (UTF-8 passes through; quotes, backslashes, controls escaped).
std::string literal(const std::string& bytes) {
    static const char* hex = "0123456789ABCDEF";
    std::string out = "\"";
    for (const char c : bytes) {
        const auto u = static_cast<uint8_t>(c);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += c;
        } else if (c == '\n') {
            out += "\\n";
        } else if (u < 0x20 || u == 0x7F) {
            out += "\\x";
            out += hex[u >> 4];
            out += hex[u & 15];
        } else {
            out += c;
        }
    }
    return out + "\"";
}

class Converter {
public:
    Converter(const ojson& root, const GrammarLimits& limits) : root_(root), limits_(limits) {}

    std::string convert() {
        const std::string top = visit(root_, "root", "");
        if (top != "root") rules_["root"] = top;
        if (!unsupported_.empty()) {
            std::string names;
            for (const auto& u : unsupported_) names += (names.empty() ? "" : ", ") + u;
            throw Error(ErrorCode::unsupported, "JSON Schema: not supported: " + names +
                                                    " (see docs/constrained-output.md for the supported subset)");
        }
        std::string out;
        out += "root ::= " + rules_["root"] + "\n";
        for (const auto& [name, body] : rules_) {
            if (name != "root") out += name + " ::= " + body + "\n";
        }
        return out;
    }

private:
    [[noreturn]] static void invalid(const std::string& message) {
        throw Error(ErrorCode::invalid_argument, "JSON Schema: " + message);
    }

    std::string use(const std::string& primitive) {
        if (rules_.count(primitive)) return primitive;
        const auto& [body, deps] = primitives().at(primitive);
        rules_[primitive] = body;
        for (const auto& d : deps) use(d);
        return primitive;
    }

    // Names are the hint's first kMaxRuleNameChars characters (a hint is a path of property names, which
    // a hostile schema makes long) and a number when taken; the next number to try is kept per name, so
    // 20k properties of one object cost 20k lookups, not 20k^2/2.
    std::string new_rule(const std::string& hint, const std::string& body) {
        std::string name;
        for (const char c : hint.substr(0, kMaxRuleNameChars))
            name += (std::isalnum(static_cast<unsigned char>(c)) ? c : '-');
        if (name.empty()) name = "r";
        std::string unique = name;
        for (int& i = next_suffix_[name]; rules_.count(unique) || primitives().count(unique);)
            unique = name + "-" + std::to_string(++i);
        rules_[unique] = body;
        return unique;
    }

    // Counts one more schema node (visit) against the limits of json_schema_gbnf.h.
    void enter(const std::string& path) {
        limits_.check_deadline();
        if (++depth_ > limits_.max_schema_depth) {
            invalid("schemas nest deeper than " + std::to_string(limits_.max_schema_depth) + " levels at '" +
                    path.substr(0, 200) + "' (counting $ref); flatten the schema");
        }
        if (++nodes_ > limits_.max_schema_nodes) {
            invalid("the schema has more than " + std::to_string(limits_.max_schema_nodes) +
                    " subschemas (properties, items, anyOf entries together); split or simplify it");
        }
    }

    // A path segment for messages and rule names: long keys are cut so that paths stay short.
    static std::string segment(const std::string& key) {
        return key.size() <= kMaxRuleNameChars ? key : key.substr(0, kMaxRuleNameChars) + "...";
    }

    // A rule name (or a parenthesised expression) matching `schema`. `path` names unsupported keywords.
    std::string visit(const ojson& schema, const std::string& name, const std::string& path) {
        enter(path);
        const std::string rule = visit_node(schema, name, path);
        --depth_;
        return rule;
    }

    std::string visit_node(const ojson& schema, const std::string& name, const std::string& path) {
        if (schema.is_boolean()) {
            if (!schema.get<bool>())
                invalid("the schema at '" + (path.empty() ? "/" : path) + "' is false: nothing matches");
            return use("value");
        }
        if (!schema.is_object()) invalid("a schema must be an object or a boolean, at '" + path + "'");
        for (const auto& [key, _] : schema.items()) {
            static const std::set<std::string> handled = {"type",      "properties", "required", "additionalProperties",
                                                          "items",     "minItems",   "maxItems", "enum",
                                                          "const",     "anyOf",      "$ref",     "minLength",
                                                          "maxLength", "format"};
            if (!handled.count(key) && !ignored_keywords().count(key)) unsupported_.insert(path + "/" + key);
        }
        if (const auto ref = schema.find("$ref"); ref != schema.end()) return visit_ref(*ref, path);
        if (const auto c = schema.find("const"); c != schema.end())
            return "(" + literal(c->dump()) + " " + use("space") + ")";
        if (const auto e = schema.find("enum"); e != schema.end()) {
            if (!e->is_array() || e->empty()) invalid("'enum' at '" + path + "' must be a non-empty array");
            std::string body;
            for (const auto& v : *e) body += (body.empty() ? "" : " | ") + literal(v.dump());
            return new_rule(name, "(" + body + ") " + use("space"));
        }
        if (const auto any = schema.find("anyOf"); any != schema.end()) {
            if (!any->is_array() || any->empty()) invalid("'anyOf' at '" + path + "' must be a non-empty array");
            std::string body;
            for (size_t i = 0; i < any->size(); ++i) {
                body += (body.empty() ? "" : " | ") +
                        visit((*any)[i], name + "-" + std::to_string(i), path + "/anyOf/" + std::to_string(i));
            }
            return new_rule(name, body);
        }
        const auto type = schema.find("type");
        if (type == schema.end()) {
            if (schema.contains("properties") || schema.contains("additionalProperties"))
                return visit_object(schema, name, path);
            if (schema.contains("items")) return visit_array(schema, name, path);
            return use("value");
        }
        if (type->is_array()) {
            std::string body;
            for (const auto& t : *type) {
                if (!t.is_string()) invalid("'type' at '" + path + "' must name types");
                body += (body.empty() ? "" : " | ") +
                        visit_type(t.get<std::string>(), schema, name + "-" + t.get<std::string>(), path);
            }
            if (body.empty()) invalid("'type' at '" + path + "' is an empty list");
            return new_rule(name, body);
        }
        if (!type->is_string()) invalid("'type' at '" + path + "' must be a string or a list of strings");
        return visit_type(type->get<std::string>(), schema, name, path);
    }

    std::string visit_type(const std::string& type, const ojson& schema, const std::string& name,
                           const std::string& path) {
        if (type == "object") return visit_object(schema, name, path);
        if (type == "array") return visit_array(schema, name, path);
        if (type == "string") return visit_string(schema, name, path);
        if (type == "number" || type == "integer" || type == "boolean" || type == "null") return use(type);
        invalid("unknown type '" + type + "' at '" + path + "'");
    }

    std::string visit_ref(const ojson& ref, const std::string& path) {
        if (!ref.is_string()) invalid("'$ref' at '" + path + "' must be a string");
        const std::string target = ref.get<std::string>();
        std::string key;
        for (const std::string prefix : {"#/$defs/", "#/definitions/"}) {
            if (target.rfind(prefix, 0) == 0) key = prefix.substr(2, prefix.size() - 3);
        }
        if (key.empty()) {
            unsupported_.insert(path + "/$ref (only #/$defs/NAME and #/definitions/NAME)");
            return use("value");
        }
        const std::string def = target.substr(key.size() + 3);
        if (const auto it = refs_.find(target); it != refs_.end()) return it->second;
        const auto defs = root_.find(key);
        if (defs == root_.end() || !defs->contains(def))
            invalid("'$ref' at '" + path + "' names '" + target + "', which is not defined");
        // Name the rule before visiting it, so that a recursive reference finds it.
        const std::string rule = new_rule("def-" + def, "");
        refs_[target] = rule;
        rules_[rule] = visit((*defs)[def], rule + "-body", "/" + key + "/" + def);
        return rule;
    }

    std::string visit_string(const ojson& schema, const std::string& name, const std::string& path) {
        if (const auto f = schema.find("format"); f != schema.end()) {
            const std::string format = f->is_string() ? f->get<std::string>() : "";
            if (format == "date" || format == "time" || format == "uuid") {
                return new_rule(name, "\"\\\"\" " + use(format) + " \"\\\"\" " + use("space"));
            }
            if (format == "date-time") {
                return new_rule(name,
                                "\"\\\"\" " + use("date") + " \"T\" " + use("time") + " \"\\\"\" " + use("space"));
            }
            unsupported_.insert(path + "/format '" + format + "' (supported: date, time, date-time, uuid)");
        }
        const auto min = schema.find("minLength"), max = schema.find("maxLength");
        if (min == schema.end() && max == schema.end()) return use("string");
        const int64_t lo = min == schema.end() ? 0 : min->get<int64_t>();
        const int64_t hi = max == schema.end() ? -1 : max->get<int64_t>();
        if (lo < 0 || (hi >= 0 && hi < lo) || hi > 10000 || lo > 10000)
            invalid("bad minLength/maxLength at '" + path + "'");
        const std::string count = "{" + std::to_string(lo) + "," + (hi >= 0 ? std::to_string(hi) : "") + "}";
        return new_rule(name, "\"\\\"\" " + use("char") + count + " \"\\\"\" " + use("space"));
    }

    std::string visit_array(const ojson& schema, const std::string& name, const std::string& path) {
        const auto items = schema.find("items");
        const std::string item = items == schema.end() ? use("value") : visit(*items, name + "-item", path + "/items");
        const int64_t lo = schema.value("minItems", int64_t{0});
        const int64_t hi = schema.contains("maxItems") ? schema["maxItems"].get<int64_t>() : -1;
        if (lo < 0 || (hi >= 0 && hi < lo) || lo > 1000 || hi > 1000)
            invalid("bad minItems/maxItems at '" + path + "'");
        const std::string open = "\"[\" " + use("space"), close = "\"]\" " + use("space");
        if (hi == 0) return new_rule(name, open + " " + close);
        const std::string rest_count =
            "{" + std::to_string(lo > 0 ? lo - 1 : 0) + "," + (hi >= 0 ? std::to_string(hi - 1) : "") + "}";
        const std::string list = item + " (\",\" space " + item + ")" + rest_count;
        return new_rule(name, open + (lo > 0 ? " " + list : " (" + list + ")?") + " " + close);
    }

    std::string visit_object(const ojson& schema, const std::string& name, const std::string& path) {
        const auto props = schema.find("properties");
        const auto additional = schema.find("additionalProperties");
        const std::string open = "\"{\" " + use("space"), close = "\"}\" " + use("space");
        if (props == schema.end() || props->empty()) {
            if (additional == schema.end() || (additional->is_boolean() && additional->get<bool>())) {
                if (schema.contains("required") && !schema["required"].empty())
                    unsupported_.insert(path + "/required (without properties)");
                return use("object");
            }
            if (additional->is_boolean()) return new_rule(name, open + " " + close);  // false: {}
            const std::string value = visit(*additional, name + "-value", path + "/additionalProperties");
            const std::string kv = use("string") + " \":\" space " + value;
            return new_rule(name, open + " (" + kv + " (\",\" space " + kv + ")*)? " + close);
        }
        if (additional != schema.end() && !(additional->is_boolean() && !additional->get<bool>())) {
            unsupported_.insert(path + "/additionalProperties (other than false, with properties)");
        }
        std::set<std::string> required;
        if (const auto r = schema.find("required"); r != schema.end()) {
            for (const auto& k : *r) {
                if (!props->contains(k.get<std::string>()))
                    unsupported_.insert(path + "/required '" + k.get<std::string>() + "' (not in properties)");
                required.insert(k.get<std::string>());
            }
        }
        std::vector<std::string> req, opt;  // key-value expressions, in the schema's order
        for (const auto& [key, sub] : props->items()) {
            const std::string value = visit(sub, name + "-" + segment(key), path + "/properties/" + segment(key));
            const std::string kv = literal(ojson(key).dump()) + " space \":\" space " + value;
            (required.count(key) ? req : opt).push_back(kv);
        }
        std::string body = open;
        for (size_t i = 0; i < req.size(); ++i) body += (i ? " \",\" space " : " ") + req[i];
        if (!opt.empty()) {
            // opt_i: a non-empty ordered subset of opt[i..]: kv_i ("," opt_{i+1})? | opt_{i+1}
            std::string next;
            for (size_t i = opt.size(); i-- > 0;) {
                const std::string b = next.empty() ? opt[i] : opt[i] + " (\",\" space " + next + ")? | " + next;
                next = new_rule(name + "-opt", b);
            }
            body += req.empty() ? " " + next + "?" : " (\",\" space " + next + ")?";
        }
        return new_rule(name, body + " " + close);
    }

    const ojson& root_;
    const GrammarLimits& limits_;
    int depth_ = 0;      // visits open now: the converter recurses once per level and per $ref
    int64_t nodes_ = 0;  // visits so far
    std::map<std::string, int> next_suffix_;
    std::map<std::string, std::string> rules_;
    std::map<std::string, std::string> refs_;
    std::set<std::string> unsupported_;
};

}  // namespace

std::string json_schema_to_gbnf(std::string_view schema_json, const GrammarLimits& limits) {
    json_depth::require_depth_at_most(schema_json, "JSON Schema:");
    ojson schema;
    try {
        schema = ojson::parse(schema_json);
    } catch (const ojson::exception& e) {
        throw Error(ErrorCode::invalid_argument, std::string("JSON Schema: not valid JSON: ") + e.what());
    }
    try {
        return Converter(schema, limits).convert();
    } catch (const ojson::exception& e) {
        throw Error(ErrorCode::invalid_argument,
                    std::string("JSON Schema: a keyword has a value of the wrong type: ") + e.what());
    }
}

std::string json_object_gbnf() {
    std::string out = "root ::= object\n";
    for (const auto& [name, rule] : primitives()) {
        if (name.starts_with("date") || name == "time" || name == "uuid") continue;
        out += name + " ::= " + rule.first + "\n";
    }
    return out;
}

}  // namespace kvstash::grammar

namespace kvstash {

namespace {

// A JSON document's grammar: generation ends when the root value is complete (GrammarEnd).
std::shared_ptr<const Grammar> json_document(std::string gbnf, const GrammarLimits& limits = {}) {
    auto parsed = std::make_shared<const grammar::ParsedGrammar>(grammar::parse_gbnf(gbnf, limits));
    return std::make_shared<const Grammar>(std::move(gbnf), std::move(parsed), GrammarEnd::only_whitespace_may_follow);
}

}  // namespace

std::shared_ptr<const Grammar> Grammar::from_json_schema(std::string_view schema_json, const GrammarLimits& limits) {
    return json_document(grammar::json_schema_to_gbnf(schema_json, limits), limits);
}

std::shared_ptr<const Grammar> Grammar::json_object() {
    static const std::shared_ptr<const Grammar> grammar = json_document(grammar::json_object_gbnf());
    return grammar;
}

}  // namespace kvstash
