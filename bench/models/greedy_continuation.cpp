// topotrain's own greedy continuation of chat prompts, for tests/hf/export_generate.py,
// which asks transformers' generate for the same from an exported folder: the target at
// TARGET (an exported folder, a checkpoint or its run directory, loaded as every tool loads
// it) decodes the first N prompts of PROMPTS (a prepared dataset: the text before each
// assistant turn; or topotrain-speculate's .jsonl of prompt ids) greedily with its KV cache, in
// fp32, up to MAX_NEW tokens, stopping where topotrain-speculate stops (a dataset's end of turn
// and eos, the target's eos ids: an exported folder's generation_config.json's).
//
//   greedy_continuation TARGET PROMPTS.h5|PROMPTS.jsonl N MAX_NEW OUT.jsonl [cpu|cuda|cuda:N]
//
// OUT.jsonl: one {"prompt": [ids], "response": [ids], "stopped": bool} per prompt, the
// response with its stop token where it met one. Exit status: 0 written, 2 bad input, 1 other.
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

#include "topotrain/core/error.h"
#include "topotrain/infer/cached_target.h"
#include "topotrain/infer/prompt_set.h"
#include "topotrain/infer/speculation_run.h"
#include "topotrain/infer/speculative_decoding.h"
#include "topotrain/train/trained_models.h"

int main(int argc, char** argv) {
  using namespace topotrain;
  if (argc < 6 || argc > 7) {
    std::fputs("usage: greedy_continuation TARGET PROMPTS.h5|PROMPTS.jsonl N MAX_NEW OUT.jsonl [cpu|cuda|cuda:N]\n",
               stderr);
    return 2;
  }
  try {
    infer::SpeculationOptions options;
    options.target = argv[1];
    options.prompts = argv[2];
    options.max_new_tokens = std::stoll(argv[4]);
    options.device = argc == 7 ? argv[6] : "";
    options.dtype = "fp32";
    const infer::Placement placement = infer::resolve_placement(options);
    const infer::PromptSet prompts = infer::read_prompts(options.prompts, std::stoll(argv[3]));
    model::CausalLM target = load_target_model(options.target);
    torch::NoGradGuard no_grad;
    target->to(placement.device);
    target->set_compute_dtype(placement.dtype);
    infer::DecodeOptions decode;
    decode.max_new_tokens = options.max_new_tokens;
    decode.stop_tokens = infer::stop_tokens(target->config(), prompts, options);
    infer::CachedTarget cached(*target, {});
    std::ofstream out(argv[5]);
    if (!out) throw ConfigError(cat("cannot write '", argv[5], "'"));
    for (const infer::Prompt& prompt : prompts.prompts) {
      const infer::Decoded decoded = infer::greedy_decode(cached, prompt.tokens, decode);
      const bool stopped = !decoded.tokens.empty() &&
                           std::find(decode.stop_tokens.begin(), decode.stop_tokens.end(), decoded.tokens.back()) !=
                               decode.stop_tokens.end();
      out << nlohmann::json{{"prompt", prompt.tokens}, {"response", decoded.tokens}, {"stopped", stopped}}.dump()
          << "\n";
    }
    std::printf("greedy_continuation: %zu prompts of %s decoded by %s on %s (stop tokens %zu)\n",
                prompts.prompts.size(), options.prompts.c_str(), options.target.c_str(),
                placement.device.str().c_str(), decode.stop_tokens.size());
    return 0;
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "greedy_continuation: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "greedy_continuation: %s\n", e.what());
    return 1;
  }
}
