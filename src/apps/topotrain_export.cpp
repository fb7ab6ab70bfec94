// topotrain-export RUN_DIR|CHECKPOINT OUT_DIR: a trained model checkpoint (Qwen3, Qwen3-MoE, Llama, Qwen2) as a
// Hugging Face model directory, a DFlash drafter's as the DFlash folder serving stacks load
// (train/hf_export.h does the work).
// Exit status: 0 written, 2 bad input (a missing path, no complete checkpoint, a config-less
// checkpoint, a drafter no serving stack could run, a non-empty OUT_DIR without --force), 1
// any other failure.
#include <cstdio>

#include "tool_cli.h"
#include "topotrain/train/hf_export.h"

int main(int argc, char** argv) {
  CLI::App app{"topotrain-export: write a topotrain checkpoint as a Hugging Face model (config.json + safetensors); "
               "a dflash_train drafter's as a DFlash drafter folder",
               "topotrain-export"};
  topotrain::HfExportOptions options;
  std::string dtype = "bf16";
  app.add_option("source", options.source, "run directory (its newest complete checkpoint) or a step-*.h5 file")
      ->required();
  app.add_option("out_dir", options.out_dir, "directory to write config.json and the safetensors into")->required();
  app.add_option("--dtype", dtype, "dtype of the written weights")->check(CLI::IsMember({"bf16", "fp32"}))
      ->capture_default_str();
  app.add_option("--max-shard-gb", options.max_shard_gib, "largest safetensors shard in GiB")
      ->check(topotrain::greater_than(0))->capture_default_str();
  app.add_flag("--force", options.force, "replace an earlier export in a non-empty OUT_DIR (other files are kept)");
  return topotrain::run_tool(app, argc, argv, [&] {
    options.dtype = dtype == "fp32" ? torch::kFloat32 : torch::kBFloat16;
    std::fputs(topotrain::describe(topotrain::export_hf(options)).c_str(), stdout);
  });
}
