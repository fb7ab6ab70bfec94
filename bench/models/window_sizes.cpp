// Which cuDNN document-window sizes (model::document_windows) a dataset's micro-batches bring,
// step by step: the packer's layouts of one rank at grad_accum 1 in moe_train's order
// (train.seed's shuffle), each step's documents, whether they run in windows
// (model::runs_in_windows), and the window sizes not seen in an earlier step (cuDNN builds a
// plan for each on first use). No GPU, no model: the layouts alone.
//
//   window_sizes DATA.h5 [TOKEN_BUDGET=16384] [STEPS=150] [SEED=1234]
#include <cstdio>
#include <exception>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "topotrain/data/token_budget_packer.h"
#include "topotrain/model/attention.h"

namespace data = topotrain::data;
namespace mdl = topotrain::model;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DATA.h5 [TOKEN_BUDGET=16384] [STEPS=150] [SEED=1234]\n", argv[0]);
    return 2;
  }
  try {
    const uint64_t budget = argc > 2 ? std::stoull(argv[2]) : 16384;
    const int steps = argc > 3 ? std::stoi(argv[3]) : 150;
    data::PackerConfig packing;
    packing.token_budget = budget;
    data::DataPosition start;
    start.seed = argc > 4 ? std::stoull(argv[4]) : 1234;
    data::TokenBudgetPacker packer(std::make_shared<const data::TokenDataset>(data::TokenDataset::load(argv[1])),
                                   packing, start);
    std::set<int64_t> seen;
    int last_new = 0;
    for (int step = 1; step <= steps && !packer.ended(); ++step) {
      std::vector<int64_t> lengths;
      for (const auto& piece : packer.next_layout().pieces) lengths.push_back(static_cast<int64_t>(piece.end - piece.begin));
      const bool windows = mdl::runs_in_windows(lengths);
      std::string fresh;
      if (windows)
        for (const auto& window : mdl::document_windows(lengths))
          if (seen.insert(window.rows).second) fresh += " " + std::to_string(window.rows);
      if (!fresh.empty()) last_new = step;
      std::printf("step %d: %zu documents, %s%s%s\n", step, lengths.size(), windows ? "windows" : "no windows",
                  fresh.empty() ? "" : ", new sizes:", fresh.c_str());
    }
    std::printf("%zu window sizes, the last new one at step %d\n", seen.size(), last_new);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "window_sizes: %s\n", e.what());
    return 2;
  }
  return 0;
}
