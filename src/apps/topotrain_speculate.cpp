// topotrain-speculate --target T --drafter D --prompts P: a DFlash drafter measured as users
// will see it, by greedy speculative decoding of its target on held-out prompts beside plain
// greedy decoding of the same prompts (infer/speculation_run.h does the work).
// Exit status: 0 measured, 2 bad input (a missing or empty prompt file, an empty prompt, a token
// id outside the target's vocabulary, a drafter that does not fit the target, a model path that
// holds the other kind of model), 1 any other failure.
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "tool_cli.h"
#include "topotrain/core/error.h"
#include "topotrain/infer/speculation_run.h"
#include "topotrain/train/progress.h"
#include "topotrain/train/trained_models.h"

int main(int argc, char** argv) {
  using namespace topotrain;
  infer::SpeculationOptions options;
  int64_t num_prompts = 64;
  std::string json_path, responses_path;
  CLI::App app{"topotrain-speculate: tau, target forwards and tokens/s of a DFlash drafter by greedy speculative "
               "decoding, checked token for token against plain greedy decoding",
               "topotrain-speculate"};
  app.add_option("--target", options.target, "the target: a Hugging Face folder, a topotrain checkpoint or run dir")
      ->required();
  app.add_option("--drafter", options.drafter, "the drafter: an exported DFlash folder, a checkpoint or run dir")
      ->required();
  app.add_option("--prompts", options.prompts,
                 "a prepared dataset (.h5; a prompt before each assistant turn) or a .jsonl of {\"tokens\": [...]}")
      ->required();
  app.add_option("--num-prompts", num_prompts, "prompts to decode (the file's first ones)")
      ->check(at_least(1))->capture_default_str();
  app.add_option("--max-new-tokens", options.max_new_tokens, "tokens to generate per prompt at most")
      ->check(at_least(1))->capture_default_str();
  app.add_option("--device", options.device, "cpu, cuda or cuda:N (default: cuda where present, else cpu)");
  app.add_option("--dtype", options.dtype, "compute dtype: auto is bf16 on CUDA, fp32 on CPU")
      ->check(CLI::IsMember({"auto", "bf16", "fp32"}))->capture_default_str();
  app.add_option("--stop-token", options.stop_tokens,
                 "a token id that ends a response, besides the target's eos ids and the dataset's eos_id and end of turn (repeatable)")
      ->check(at_least(0));
  app.add_option("--json", json_path, "also write the numbers to this file as JSON");
  app.add_option("--responses", responses_path,
                 "also write one JSON line per prompt to this file: {\"prompt\", \"greedy\", \"speculative\": [ids], "
                 "\"acceptance_lengths\": [accepted drafts + 1 per verification]}");
  return run_tool(app, argc, argv, [&] {
    // Opened before the models load, so that an unwritable path fails at once.
    const auto open_output = [](const std::string& path, const char* option) {
      std::ofstream out;
      if (path.empty()) return out;
      out.open(path);
      if (!out) throw ConfigError(cat(option, ": cannot write '", path, "'"));
      return out;
    };
    std::ofstream json = open_output(json_path, "--json"), responses = open_output(responses_path, "--responses");
    const infer::Placement placement = infer::resolve_placement(options);
    const infer::PromptSet prompts = infer::read_prompts(options.prompts, num_prompts);
    model::CausalLM target = load_target_model(options.target);
    model::DFlashDrafter drafter = load_drafter_model(options.drafter, *target);
    const bool terminal = isatty(STDERR_FILENO);
    const auto report = infer::run_speculation(
        *target, *drafter, prompts, options, placement, [&](int64_t done, int64_t total, double seconds) {
          const double left = seconds / static_cast<double>(done) * static_cast<double>(total - done);
          std::fprintf(stderr, "%sprompt %lld/%lld | %s%s%s", terminal ? "\r" : "", static_cast<long long>(done),
                       static_cast<long long>(total), format_duration(seconds).c_str(),
                       done < total ? (" | ETA " + format_duration(left)).c_str() : "",
                       terminal && done < total ? " " : "\n");
          std::fflush(stderr);
        });
    std::fputs(infer::report_text(report).c_str(), stdout);
    if (json.is_open()) json << infer::report_json(report);
    if (responses.is_open()) responses << infer::responses_jsonl(report, prompts);
  });
}
