#include "topotrain/data/python_json.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace topotrain::data {
namespace {

// Python's repr of a float: the shortest digits that read back as the same double, written
// fixed (with ".0" when whole) while the decimal point falls within -4 < point <= 16 of
// the first digit, else as d.ddde+XX.
std::string python_float(double x) {
  char buffer[32];
  std::string digits;
  int exponent = 0;
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof buffer, "%.*e", precision - 1, x);
    if (std::strtod(buffer, nullptr) == x || precision == 17) break;
  }
  // buffer: [-]d[.ddd]e[+-]XX
  const std::string e = buffer;
  const size_t e_at = e.find('e');
  for (size_t i = 0; i < e_at; ++i) {
    if (e[i] >= '0' && e[i] <= '9') digits += e[i];
  }
  exponent = std::atoi(e.c_str() + e_at + 1);
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out = e[0] == '-' ? "-" : "";
  const int point = exponent + 1;  // digits before the decimal point
  const int n = static_cast<int>(digits.size());
  if (point > -4 && point <= 16) {
    if (point <= 0) return out + "0." + std::string(-point, '0') + digits;
    if (point >= n) return out + digits + std::string(point - n, '0') + ".0";
    return out + digits.substr(0, point) + "." + digits.substr(point);
  }
  out += digits.substr(0, 1);
  if (n > 1) out += "." + digits.substr(1);
  std::snprintf(buffer, sizeof buffer, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + buffer;
}

// indent < 0: on one line, ", " between items; else each item on its own line, `indent`
// spaces deeper than its container, "," between items (Python's indent=N).
void dump(const nlohmann::ordered_json& value, int indent, int depth, std::string& out) {
  const auto open_item = [&](bool first) {
    if (!first) out += indent < 0 ? ", " : ",";
    if (indent >= 0) out += "\n" + std::string(size_t(indent) * size_t(depth + 1), ' ');
  };
  const auto close = [&](char bracket) {
    if (indent >= 0) out += "\n" + std::string(size_t(indent) * size_t(depth), ' ');
    out += bracket;
  };
  switch (value.type()) {
    case nlohmann::ordered_json::value_t::object: {
      out += '{';
      if (value.empty()) {
        out += '}';
        return;
      }
      bool first = true;
      for (const auto& [key, item] : value.items()) {
        open_item(first);
        first = false;
        out += nlohmann::ordered_json(key).dump();
        out += ": ";
        dump(item, indent, depth + 1, out);
      }
      close('}');
      return;
    }
    case nlohmann::ordered_json::value_t::array: {
      out += '[';
      if (value.empty()) {
        out += ']';
        return;
      }
      for (size_t i = 0; i < value.size(); ++i) {
        open_item(i == 0);
        dump(value[i], indent, depth + 1, out);
      }
      close(']');
      return;
    }
    case nlohmann::ordered_json::value_t::number_float:
      out += python_float(value.get<double>());
      return;
    default:
      // nlohmann escapes strings exactly as Python does with ensure_ascii=False (", \, \b,
      // \f, \n, \r, \t and \u00XX with lower-case hex for other control characters);
      // integers, booleans and null are spelled alike.
      out += value.dump();
  }
}

}  // namespace

std::string python_json_dumps(const nlohmann::ordered_json& value, int indent) {
  std::string out;
  dump(value, indent, 0, out);
  return out;
}

}  // namespace topotrain::data
