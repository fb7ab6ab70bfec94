#include "topotrain/data/tokenizer.h"

#include "topotrain/core/error.h"
#include "topotrain/data/bpe_tokenizer.h"
#include "topotrain/data/byte_tokenizer.h"

namespace topotrain::data {

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec, const std::string& eos) {
  if (spec == "byte") {
    auto byte = std::make_unique<ByteTokenizer>();
    if (!eos.empty() && byte->special_token(eos) != byte->eos_id()) {
      throw ConfigError(cat("--eos '", eos, "': the byte tokenizer ends documents with <|endoftext|> (id ",
                            byte->eos_id(), ") and no other token; drop --eos, or pass --tokenizer with a "
                            "tokenizer.json that has '", eos, "'"));
    }
    return byte;
  }
  return BpeTokenizer::load(spec, eos);
}

}  // namespace topotrain::data
