#include "topotrain/data/byte_tokenizer.h"

namespace topotrain::data {

void ByteTokenizer::encode(std::string_view text, std::vector<uint32_t>& out) const {
  for (char c : text) out.push_back(static_cast<unsigned char>(c));
}

std::optional<uint32_t> ByteTokenizer::special_token(const std::string& content) const {
  if (content == "<|endoftext|>") return kEndOfText;
  if (content == "<|im_start|>") return kImStart;
  if (content == "<|im_end|>") return kImEnd;
  return std::nullopt;
}

}  // namespace topotrain::data
