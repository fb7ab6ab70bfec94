// masked_dataset IN.h5 OUT.h5 odd|even|none: IN's documents with a loss mask chosen by each
// token's position in its document (odd: 1 at positions 1, 3, 5, ...; even: 0, 2, 4, ...;
// none: 0 everywhere). Used by the moe_train end-to-end test of the loss mask: the losses of
// the two halves, weighted by their target counts, add up to the loss without a mask; and by
// the trainers' test that a file with nothing to train on is refused.
#include <cstdio>
#include <string>

#include "topotrain/data/token_dataset.h"

int main(int argc, char** argv) {
  using namespace topotrain::data;
  const std::string which = argc == 4 ? argv[3] : "";
  if (which != "odd" && which != "even" && which != "none") {
    std::fprintf(stderr, "usage: masked_dataset IN.h5 OUT.h5 odd|even|none\n");
    return 2;
  }
  TokenDatasetContents contents = TokenDataset::load(argv[1]).contents();
  contents.loss_mask.resize(contents.tokens.size());
  for (size_t d = 0; d + 1 < contents.offsets.size(); ++d)
    for (uint64_t t = contents.offsets[d]; t < contents.offsets[d + 1]; ++t)
      contents.loss_mask[t] = which != "none" && ((t - contents.offsets[d]) % 2 == 1) == (which == "odd");
  write_token_dataset(argv[2], contents);
  return 0;
}
