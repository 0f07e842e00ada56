// The `tandem` executable: one binary, one subcommand per task.
#include <cstdio>
#include <iostream>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "cli.h"
#include "serve_command.h"
#include "tandem/engine.h"
#include "tandem/error.h"
#include "tandem/npy.h"
#include "tandem/registry.h"

using namespace tandem;

namespace {

const char* kUsage = R"(usage: tandem <command> [options]

commands:
  generate  (--prompt TEXT | --tokens FILE) [--max-tokens N] [--temperature T] [--top-k K]
            [--top-p P] [--min-p P] [--seed S] [--print-ids]
  logits    --tokens FILE --out x.npy     float32 logits of every position, [n_tokens, vocab]
  inspect                                  print the checkpoint's metadata and tensor table
  plugins                                  list the loaded plugins and what they provide
  serve     [--host ADDR] [--port N] [--api-key K[,K…]] [--api-key-file FILE] [--metrics-key K]
            [--served-model-name NAME] [--alias NAME[,NAME…]] [--slots N] [--max-queue N]
            [--queue-timeout S] [--max-body-bytes N] [--default-max-tokens N] [--prefill-chunk N]
            [--drain-timeout S] [--sse-ping-interval S] [--strict-fields]
            OpenAI-compatible HTTP server (default 127.0.0.1:8000); SIGTERM/SIGINT drain, exit 0
  help

model options (every model command):
  --config PROFILE.yaml | --model PATH    a YAML profile, or a model folder/file (format detected)
  --device cpu|cuda   --format NAME|auto   --threads N   --context N
other:
  --verbose           debug logging
)";

std::vector<std::string> rest(int argc, char** argv) { return std::vector<std::string>(argv + 2, argv + argc); }

int cmd_plugins(const std::vector<std::string>& argv) {
  cli::Args a(argv, {}, {"verbose"}, "plugins");
  PluginRegistry reg;
  reg.load_default();
  const char* kinds[] = {"", "backend", "format", "layer", "speculator"};
  for (const auto& p : reg.providers())
    std::printf("%-11s %-14s %-6s %s\n", kinds[p.kind], p.name.c_str(), p.device.empty() ? "-" : p.device.c_str(),
                p.file.c_str());
  for (const auto& s : reg.skipped()) std::printf("(skipped, cannot run here) %s\n", s.c_str());
  return 0;
}

int cmd_inspect(const std::vector<std::string>& argv) {
  cli::Args a(argv, cli::kModelOptions, {"verbose"}, "inspect");
  Profile p = cli::resolve_profile(a);
  PluginRegistry reg;
  reg.load_default();
  std::fputs(open_checkpoint(p.load, reg)->dump().c_str(), stdout);
  return 0;
}

int cmd_generate(const std::vector<std::string>& argv) {
  auto opts = cli::kModelOptions;
  opts.insert({"prompt", "tokens", "max-tokens", "temperature", "top-k", "top-p", "min-p", "seed"});
  cli::Args a(argv, opts, {"print-ids", "verbose"}, "generate");
  Profile p = cli::resolve_profile(a);
  check(a.has("prompt") != a.has("tokens"), "tandem generate: give exactly one of --prompt or --tokens");
  check(!a.has("prompt"), "tandem generate: --prompt needs a tokenizer, which this build does not have yet; use --tokens");
  std::vector<int32_t> prompt = cli::read_tokens(a.str("tokens"));

  GenerateOptions g;
  g.context = p.context;
  g.max_tokens = int(a.integer("max-tokens", p.max_tokens));
  g.sampling = p.sampling;
  g.sampling.temperature = float(a.number("temperature", g.sampling.temperature));
  g.sampling.top_k = int(a.integer("top-k", g.sampling.top_k));
  g.sampling.top_p = float(a.number("top-p", g.sampling.top_p));
  g.sampling.min_p = float(a.number("min-p", g.sampling.min_p));
  g.sampling.seed = uint64_t(a.integer("seed", (long long)g.sampling.seed));
  check(g.max_tokens >= 1, "tandem generate: --max-tokens must be at least 1");

  PluginRegistry reg;
  reg.load_default();
  auto model = Model::load(p.load, reg);
  GenerateResult r = generate(*model, prompt, g);
  // Without a tokenizer the ids are the output either way; --print-ids keeps them on one line.
  for (size_t i = 0; i < r.tokens.size(); ++i) std::printf(i ? " %d" : "%d", r.tokens[i]);
  std::printf("\n");
  double tps = r.tokens.size() > 1 ? double(r.tokens.size() - 1) / r.decode_seconds : 0.0;
  std::fprintf(stderr, "prompt %zu tokens in %.3f s (%.1f tok/s); generated %zu tokens, %.2f tok/s%s\n", prompt.size(),
               r.prefill_seconds, double(prompt.size()) / r.prefill_seconds, r.tokens.size(), tps,
               r.stopped_at_eos ? " (stopped at eos)" : "");
  return 0;
}

int cmd_logits(const std::vector<std::string>& argv) {
  auto opts = cli::kModelOptions;
  opts.insert({"tokens", "out"});
  cli::Args a(argv, opts, {"verbose"}, "logits");
  Profile p = cli::resolve_profile(a);
  check(a.has("tokens") && a.has("out"), "tandem logits: --tokens FILE and --out FILE.npy are required");
  std::vector<int32_t> tokens = cli::read_tokens(a.str("tokens"));
  check(int64_t(tokens.size()) <= p.context, "tandem logits: ", tokens.size(), " tokens exceed --context ", p.context);
  PluginRegistry reg;
  reg.load_default();
  auto model = Model::load(p.load, reg);
  auto seq = model->new_sequence(p.context);
  std::vector<float> logits;
  model->forward(*seq, tokens, ForwardMode::Prefill, logits, true);
  write_npy(a.str("out"), logits.data(), {int64_t(tokens.size()), model->desc().vocab});
  std::fprintf(stderr, "wrote %s [%zu, %d]\n", a.str("out").c_str(), tokens.size(), model->desc().vocab);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  spdlog::set_default_logger(spdlog::stderr_color_mt("tandem"));
  spdlog::set_pattern("%^%l%$: %v");
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  std::string cmd = argv[1];
  for (int i = 2; i < argc; ++i)
    if (std::string(argv[i]) == "--verbose") spdlog::set_level(spdlog::level::debug);
  try {
    if (cmd == "generate") return cmd_generate(rest(argc, argv));
    if (cmd == "logits") return cmd_logits(rest(argc, argv));
    if (cmd == "inspect") return cmd_inspect(rest(argc, argv));
    if (cmd == "plugins") return cmd_plugins(rest(argc, argv));
    if (cmd == "serve") return server::cmd_serve(rest(argc, argv));
    if (cmd == "help" || cmd == "--help" || cmd == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    std::fprintf(stderr, "error: unknown command '%s'\n%s", cmd.c_str(), kUsage);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
