// topotrain-export RUN_DIR|CHECKPOINT OUT_DIR: a trained Qwen3 / Qwen3-MoE checkpoint as a
// Hugging Face model directory (train/hf_export.h does the work).
// Exit status: 0 written, 2 bad input (a missing path, no complete checkpoint, a drafter or
// config-less checkpoint, a non-empty OUT_DIR without --force), 1 any other failure.
#include <cstdio>

#include <CLI/CLI.hpp>

#include "topotrain/core/error.h"
#include "topotrain/train/hf_export.h"

int main(int argc, char** argv) {
  CLI::App app{"topotrain-export: write a topotrain checkpoint as a Hugging Face model (config.json + safetensors)",
               "topotrain-export"};
  topotrain::HfExportOptions options;
  std::string dtype = "bf16";
  app.add_option("source", options.source, "run directory (its newest complete checkpoint) or a step-*.h5 file")
      ->required();
  app.add_option("out_dir", options.out_dir, "directory to write config.json and the safetensors into")->required();
  app.add_option("--dtype", dtype, "dtype of the written weights")->check(CLI::IsMember({"bf16", "fp32"}))
      ->capture_default_str();
  app.add_option("--max-shard-gb", options.max_shard_gib, "largest safetensors shard in GiB")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_flag("--force", options.force, "replace an earlier export in a non-empty OUT_DIR (other files are kept)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  options.dtype = dtype == "fp32" ? torch::kFloat32 : torch::kBFloat16;
  try {
    std::fputs(topotrain::describe(topotrain::export_hf(options)).c_str(), stdout);
  } catch (const topotrain::ConfigError& e) {
    std::fprintf(stderr, "topotrain-export: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "topotrain-export: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
