// libFuzzer target for the parsers of user-supplied trees (issue 34): the first byte picks the parser,
// the rest is its input — 0: GBNF (then the matcher over bytes), 1: JSON Schema -> GBNF -> parse,
// 2: config.json of a model directory (depth check, JSON, read_hf_config), 3: the same config.json in a
// whole model directory (Model::load: the reader of tests/fuzz/hf_directory_input.h). An Error is an
// answer; a crash, a sanitizer report or a stack overflow is a bug.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/json_depth.h"
#include "fuzz/hf_directory_input.h"
#include "grammar/gbnf_parse.h"
#include "grammar/grammar_matcher.h"
#include "grammar/json_schema_gbnf.h"
#include "kvstash/error.h"
#include "model/hf_config.h"

namespace {

std::shared_ptr<const kvstash::grammar::TokenTrie> byte_trie() {
    static const auto trie = [] {
        std::vector<std::string> pieces;
        for (int b = 0; b < 256; ++b) pieces.emplace_back(1, static_cast<char>(b));
        pieces.push_back("</s>");
        return std::make_shared<const kvstash::grammar::TokenTrie>(pieces, std::vector<uint8_t>{},
                                                                   std::vector<int32_t>{256});
    }();
    return trie;
}

void run_gbnf(const std::string& gbnf) {
    auto parsed = std::make_shared<kvstash::grammar::ParsedGrammar>(kvstash::grammar::parse_gbnf(gbnf));
    kvstash::grammar::GrammarMatcher matcher(parsed, byte_trie());
    matcher.accept_bytes("{\"a\": 1}");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
    try {
        switch (data[0] % 4) {
            case 0: run_gbnf(text); break;
            case 1: run_gbnf(kvstash::grammar::json_schema_to_gbnf(text)); break;
            case 3: kvstash::fuzz::load_hf_directory_with_config(text, KVSTASH_SOURCE_DIR); break;
            default: {
                kvstash::json_depth::require_depth_at_most(text, "config.json", kvstash::ErrorCode::bad_format);
                const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
                if (!j.is_discarded()) kvstash::read_hf_config(j, "config.json");
            }
        }
    } catch (const kvstash::Error&) {}
    return 0;
}
