// JSON written as Python's json.dumps(value, ensure_ascii=False) writes it: ", " between
// items, ": " after keys, keys in the order they were read, non-ASCII characters as they
// are, control characters as \n, \t, ... or \u00XX. This is the `tojson` filter of Hugging
// Face chat templates, which is what renders tools and tool-call arguments. With indent >= 0,
// json.dumps(value, ensure_ascii=False, indent=indent): one item a line, "," between items
// (Llama 3.1's template lists its tools with tojson(indent=4)).
// Floats as Python's repr writes them (shortest round trip; 1e+16 but 1000000000000000.0).
// One known difference: an integer literal past 64 bits is read as a double and written as
// one (1.8446744073709552e+19), where Python keeps every digit.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <string>

namespace topotrain::data {

std::string python_json_dumps(const nlohmann::ordered_json& value, int indent = -1);

}  // namespace topotrain::data
