// checkpoint_diff A.h5 B.h5 TOLERANCE [PREFIX]: compares the tensors two checkpoints hold
// (optionally only those whose name starts with PREFIX) and exits 1 when a tensor is
// missing from either or differs by more than TOLERANCE (max absolute difference). It also
// prints each integer both hold as "NAME: A and B" (e.g. optimizer_steps), for tests to check.
// Used by the trainers' end-to-end tests to compare runs.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "topotrain/store/checkpoint_reader.h"

int main(int argc, char** argv) {
  using namespace topotrain;
  if (argc < 4) {
    std::fprintf(stderr, "usage: checkpoint_diff A.h5 B.h5 TOLERANCE [PREFIX]\n");
    return 2;
  }
  const double tolerance = std::atof(argv[3]);
  const std::string prefix = argc > 4 ? argv[4] : "";
  CheckpointState a = CheckpointReader::load(argv[1], {});
  CheckpointState b = CheckpointReader::load(argv[2], {});
  double worst = 0;
  std::string worst_name;
  int compared = 0;
  for (const auto& [name, tensor] : a.tensors) {
    if (name.rfind(prefix, 0) != 0) continue;
    auto other = b.tensors.find(name);
    if (other == b.tensors.end()) {
      std::fprintf(stderr, "%s is only in %s\n", name.c_str(), argv[1]);
      return 1;
    }
    double diff = (tensor.to(at::kDouble) - other->second.to(at::kDouble)).abs().max().item<double>();
    if (diff > worst) worst = diff, worst_name = name;
    ++compared;
  }
  for (const auto& [name, value] : a.ints) {
    auto other = b.ints.find(name);
    if (other != b.ints.end())
      std::printf("%s: %lld and %lld\n", name.c_str(), static_cast<long long>(value),
                  static_cast<long long>(other->second));
  }
  std::printf("compared %d tensors; max abs difference %.3g (%s)\n", compared, worst, worst_name.c_str());
  return compared > 0 && worst <= tolerance ? 0 : 1;
}
