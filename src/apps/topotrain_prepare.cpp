// topotrain-prepare: tokenizes text or JSONL files into a topotrain dataset file (HDF5).
// Exit status (tool_cli.h): 0 written, 2 bad arguments or input, 1 any other failure.
#include <unistd.h>

#include <cstdio>

#include "tool_cli.h"
#include "topotrain/core/log.h"
#include "topotrain/data/prepare.h"

int main(int argc, char** argv) {
  using namespace topotrain;
  using namespace topotrain::data;
  PrepareConfig config;
  std::string format = "auto", split = "file";
  bool quiet = false;
  CLI::App app{"topotrain-prepare: tokenize text or JSONL files into a dataset file (HDF5)", "topotrain-prepare"};
  app.add_option("inputs", config.inputs,
                 "text files, or JSONL files of \"text\", \"messages\", ShareGPT \"conversations\", "
                 "\"prompt\"/\"completion\" or Alpaca \"instruction\"/\"input\"/\"output\" records")
      ->required();
  app.add_option("-o,--output", config.output, "dataset file to write, e.g. data/train.h5")->required();
  app.add_option("-t,--tokenizer", config.tokenizer, "\"byte\" (built in) or the path of a HF tokenizer.json")
      ->capture_default_str();
  app.add_option("--eos", config.eos, "end-of-document token of a tokenizer.json (default <|endoftext|>)");
  app.add_option("--format", format, "auto (by extension: .jsonl/.json are JSONL), text or jsonl")
      ->check(CLI::IsMember({"auto", "text", "jsonl"}))
      ->capture_default_str();
  app.add_option("--split", split, "text files: one document per 'file' or per blank-line separated 'paragraph'")
      ->check(CLI::IsMember({"file", "paragraph"}))
      ->capture_default_str();
  app.add_option("-j,--threads", config.threads, "tokenizing threads (0: every core)")
      ->check(at_least(0))
      ->capture_default_str();
  app.add_option("--gzip", config.write.gzip_level, "deflate level of /tokens and /loss_mask (0: none)")
      ->check(CLI::Range(0, 9))
      ->capture_default_str();
  app.add_flag("-q,--quiet", quiet, "no progress bar");
  return run_tool(app, argc, argv, [&] {
    config.format =
        format == "text" ? InputFormat::text : format == "jsonl" ? InputFormat::jsonl : InputFormat::by_extension;
    config.split = split == "paragraph" ? TextSplit::paragraph : TextSplit::file;
    config.progress = !quiet && isatty(STDERR_FILENO);
    const PrepareTotals t = prepare_dataset(config);
    std::printf("wrote %s: %llu documents, %llu tokens (%llu with loss mask 1) from %llu files, %.1f MB\n",
                config.output.c_str(), (unsigned long long)t.documents, (unsigned long long)t.tokens,
                (unsigned long long)t.loss_tokens, (unsigned long long)t.files, t.bytes / 1e6);
    std::printf("tokenizer %s, vocab_size %llu; %.2f s, %s, %s\n", t.tokenizer.c_str(),
                (unsigned long long)t.vocab_size, t.seconds, format_rate(t.tokens / t.seconds).c_str(),
                format_rate(t.bytes / t.seconds, "B/s").c_str());
    if (t.chat_documents > 0) {
      std::printf("%llu conversations rendered with the %s chat template\n", (unsigned long long)t.chat_documents,
                  t.chat_template.c_str());
    }
  });
}
