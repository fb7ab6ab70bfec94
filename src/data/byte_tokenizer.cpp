#include "topotrain/data/byte_tokenizer.h"

#include <array>

namespace topotrain::data {
namespace {

struct Special {
  std::string_view content;
  uint32_t id;
};
constexpr std::array<Special, 3> kSpecials = {{{"<|endoftext|>", ByteTokenizer::kEndOfText},
                                               {"<|im_start|>", ByteTokenizer::kImStart},
                                               {"<|im_end|>", ByteTokenizer::kImEnd}}};

}  // namespace

void ByteTokenizer::encode(std::string_view text, std::vector<uint32_t>& out) const {
  for (char c : text) out.push_back(static_cast<unsigned char>(c));
}

void ByteTokenizer::encode_with_spans(std::string_view text, std::vector<uint32_t>& ids,
                                      std::vector<ByteRange>& spans) const {
  size_t at = 0;
  while (at < text.size()) {
    size_t length = 1;
    uint32_t id = static_cast<unsigned char>(text[at]);
    if (text[at] == '<') {
      for (const Special& special : kSpecials) {
        if (text.compare(at, special.content.size(), special.content) == 0) {
          length = special.content.size();
          id = special.id;
          break;
        }
      }
    }
    ids.push_back(id);
    spans.push_back({at, at + length});
    at += length;
  }
}

std::optional<uint32_t> ByteTokenizer::special_token(const std::string& content) const {
  for (const Special& special : kSpecials) {
    if (content == special.content) return special.id;
  }
  return std::nullopt;
}

}  // namespace topotrain::data
