#include "topotrain/model/dflash_anchors.h"

#include <algorithm>
#include <stdexcept>

#include "topotrain/core/error.h"

namespace topotrain::model {
namespace {

struct HostBatch {
  std::vector<int64_t> cu;
  std::vector<uint8_t> loss_mask;
};

HostBatch read_host_batch(const torch::Tensor& cu_seqlens, const torch::Tensor& loss_mask, int64_t block_size) {
  if (block_size < 2) throw std::invalid_argument(cat("DFlash blocks: block_size must be >= 2, got ", block_size));
  if (!cu_seqlens.defined() || cu_seqlens.dim() != 1 || cu_seqlens.size(0) < 2) {
    throw std::invalid_argument("DFlash blocks: cu_seqlens must be [docs + 1] with at least one document");
  }
  auto cu = cu_seqlens.to(torch::kCPU, torch::kInt64).contiguous();
  auto mask = loss_mask.to(torch::kCPU, torch::kUInt8).contiguous();
  HostBatch host{{cu.data_ptr<int64_t>(), cu.data_ptr<int64_t>() + cu.numel()},
                 {mask.data_ptr<uint8_t>(), mask.data_ptr<uint8_t>() + mask.numel()}};
  if (host.cu.front() != 0 || host.cu.back() != static_cast<int64_t>(host.loss_mask.size())) {
    throw std::invalid_argument(cat("DFlash blocks: cu_seqlens must run from 0 to the number of tokens (",
                                    host.loss_mask.size(), " loss-mask entries), got ", host.cu.front(), "..",
                                    host.cu.back()));
  }
  for (size_t d = 1; d < host.cu.size(); ++d) {
    if (host.cu[d] <= host.cu[d - 1]) throw std::invalid_argument(cat("DFlash blocks: document ", d - 1, " is empty"));
  }
  return host;
}

// Anchors must already be grouped by document and ascending.
DFlashBlocks build_blocks(const HostBatch& host, int64_t block_size, std::vector<int64_t> anchor_rows) {
  DFlashBlocks b;
  b.block_size = block_size;
  b.anchor_rows = std::move(anchor_rows);
  const int64_t docs = static_cast<int64_t>(host.cu.size()) - 1;
  b.document_blocks.assign(1, 0);
  b.document_begin.assign(host.cu.begin(), host.cu.end() - 1);
  b.slot_valid.assign(b.anchor_rows.size() * block_size, 0);
  size_t block = 0;
  for (int64_t d = 0; d < docs; ++d) {
    const int64_t begin = host.cu[d], end = host.cu[d + 1];
    for (; block < b.anchor_rows.size() && b.anchor_rows[block] < end; ++block) {
      const int64_t anchor = b.anchor_rows[block];
      if (anchor < begin || anchor + 1 >= end || (block > 0 && b.anchor_rows[block - 1] >= anchor)) {
        throw std::invalid_argument(cat("DFlash blocks: anchor row ", anchor, " of document ", d, " [", begin, ", ", end,
                                        ") needs a following token, and anchors must ascend"));
      }
      b.visible_context.push_back(anchor - begin);
      for (int64_t k = 1; k < block_size && anchor + k < end; ++k) {
        b.slot_valid[block * block_size + k] = host.loss_mask[anchor + k] != 0;
      }
    }
    b.document_blocks.push_back(static_cast<int64_t>(block));
  }
  if (block != b.anchor_rows.size()) {
    throw std::invalid_argument(cat("DFlash blocks: anchor row ", b.anchor_rows[block], " is past the last token"));
  }
  return b;
}

}  // namespace

int64_t DFlashBlocks::num_valid_slots() const {
  return std::count_if(slot_valid.begin(), slot_valid.end(), [](uint8_t v) { return v != 0; });
}

DFlashBlocks sample_anchors(const torch::Tensor& cu_seqlens, const torch::Tensor& loss_mask, int64_t block_size,
                            int64_t max_per_document, at::Generator& generator) {
  if (max_per_document <= 0) {
    throw std::invalid_argument(cat("sample_anchors: max_per_document must be positive, got ", max_per_document));
  }
  const HostBatch host = read_host_batch(cu_seqlens, loss_mask, block_size);
  std::vector<int64_t> anchors, eligible;
  for (size_t d = 0; d + 1 < host.cu.size(); ++d) {
    eligible.clear();
    for (int64_t row = host.cu[d]; row + 1 < host.cu[d + 1]; ++row) {
      if (host.loss_mask[row] != 0) eligible.push_back(row);
    }
    const auto count = static_cast<int64_t>(eligible.size());
    const size_t first = anchors.size();
    if (count <= max_per_document) {
      anchors.insert(anchors.end(), eligible.begin(), eligible.end());
    } else {
      auto order = torch::randperm(count, generator, torch::kInt64);
      const auto* picked = order.data_ptr<int64_t>();
      for (int64_t i = 0; i < max_per_document; ++i) anchors.push_back(eligible[picked[i]]);
      std::sort(anchors.begin() + static_cast<std::ptrdiff_t>(first), anchors.end());
    }
  }
  return build_blocks(host, block_size, std::move(anchors));
}

DFlashBlocks blocks_at(const torch::Tensor& cu_seqlens, const torch::Tensor& loss_mask, int64_t block_size,
                       std::vector<int64_t> anchor_rows) {
  return build_blocks(read_host_batch(cu_seqlens, loss_mask, block_size), block_size, std::move(anchor_rows));
}

}  // namespace topotrain::model
