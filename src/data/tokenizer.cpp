#include "topotrain/data/tokenizer.h"

#include "topotrain/data/bpe_tokenizer.h"
#include "topotrain/data/byte_tokenizer.h"

namespace topotrain::data {

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec, const std::string& eos) {
  if (spec == "byte") return std::make_unique<ByteTokenizer>();
  return BpeTokenizer::load(spec, eos);
}

}  // namespace topotrain::data
