// JSON Schema (the subset people use for structured output) -> GBNF text for the grammar matcher.
//
// Supported: type (object, array, string, number, integer, boolean, null, or a list of them),
// properties, required, additionalProperties (false; or a schema / true for an object without
// properties: a map), items, minItems, maxItems, enum, const, anyOf, $ref to #/$defs/... or
// #/definitions/... (recursion allowed), string minLength / maxLength, string format date, time,
// date-time, uuid; annotations (title, description, default, examples, $schema, $id, $comment, ...) are
// ignored. Properties are generated in the schema's order; an object with properties but no
// additionalProperties gets no other keys (stricter than JSON Schema, so output always validates).
// Whitespace between tokens is limited (a space, or a newline and up to 20 spaces/tabs) so that a model
// cannot pad forever.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kvstash/grammar.h"

namespace kvstash::grammar {

// Throws Error(invalid_argument) for text that is not JSON or a schema that is not an object/boolean
// or is inconsistent (a $ref to nothing, minItems > maxItems), Error(unsupported) naming every
// unsupported keyword (or format) found. Limits on hostile schemas (docs/constrained-output.md,
// "Limits"): subschemas nest at most limits.max_schema_depth deep, $ref chains included (the converter
// recurses once per level), a schema has at most limits.max_schema_nodes subschemas (each becomes rules
// the matcher walks), past either Error(invalid_argument) naming it; past limits.deadline
// PreparationExpired. The JSON text itself nests at most base/json_depth.h's 256 levels.
std::string json_schema_to_gbnf(std::string_view schema_json, const GrammarLimits& limits = {});

// Any JSON object, with the same primitive rules.
std::string json_object_gbnf();

}  // namespace kvstash::grammar
