// The `tandem` executable: one binary, one subcommand per task.
#include <cstdio>
#include <iostream>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "cli.h"
#include "cmd_bench.h"
#include "cmd_convert.h"
#include "cmd_synth.h"
#include "serve_command.h"
#include "tandem/text/text_codec.h"
#include "tandem/text/text_stream.h"
#include "tandem/generate.h"
#include "tandem/error.h"
#include "tandem/npy.h"
#include "tandem/registry.h"
#include "tandem/drafting.h"
#include "tandem/text/tokenizer.h"
#include "tandem/weights.h"

using namespace tandem;

namespace {

const char* kUsage = R"(usage: tandem <command> [options]

commands:
  generate  (--prompt TEXT | --tokens FILE) [--max-tokens N] [--temperature T] [--top-k K]
            [--top-p P] [--min-p P] [--seed S] [--print-ids] [--draft NAME[,NAME…]|none] [--draft-k K]
            --draft: speculative decoding with these drafters (stats on stderr); --draft-k: verify K drafts
            every step instead of letting StairCut pick
  logits    --tokens FILE --out x.npy     float32 logits of every position, [n_tokens, vocab]
  inspect                                  print the checkpoint's metadata and tensor table
  plugins                                  list the loaded plugins and what they provide
  serve     [--host ADDR] [--port N] [--api-key K[,K…]] [--api-key-file FILE] [--metrics-key K]
            [--served-model-name NAME] [--alias NAME[,NAME…]] [--slots N] [--max-queue N]
            [--queue-timeout S] [--max-body-bytes N] [--default-max-tokens N] [--prefill-chunk N]
            [--drain-timeout S] [--sse-ping-interval S] [--strict-fields] [--reasoning-budget N]
            [--reasoning-budget-message TEXT] [--reasoning-effort none|low|medium|high|…]
            [--draft NAME[,NAME…]|none] [--draft-k K]
            OpenAI-compatible HTTP server (default 127.0.0.1:8000); SIGTERM/SIGINT drain, exit 0;
            flags win over the profile's server: and draft: sections
  synth     --shape tiny|nano|bolt|super [--uniform] --mix gguf-iq2|bf16 (--out PATH | --dry-run)
            [--seed S]   a model with random weights in a real shape and type mix (no model options)
  bench     (--config P | --model PATH | --synth SHAPE [--mix M] [--uniform]) [--json FILE]
            [--decode-tokens N] [--prompt-tokens N] [--verify-max K] [--prefill N,N,…]
            [--prefill-budget S] [--prefill-chunk N] [--profile-layers | --no-profile]
            [--draft SET[:SET…]] [--draft-k K] [--draft-max-k K] [--draft-cost-context N]
            [--asks [--asks-tokens N] [--asks-runs N]]   (context 32768 unless given)
            --draft: drafted decode of the same prompt per SET (NAME[,NAME…]; test drafters oracle, wrong)
            --asks: the five-ask protocol of docs/benchmarks.md (needs --model/--config, a chat template)
  convert   --to exl3 --bits B [--head-bits H|16] [--other-bits O] [--codebook mul1|mcg|3inst]
            [--calibration FILE] [--rows N] [--seed S] [--threads N] [--force] INPUT_DIR OUTPUT_DIR
            quantize a BF16 safetensors folder to EXL3 (routed experts at B bits; other linears at O
            when B < 4; lm_head at H, default 6; an interrupted run resumes from OUTPUT_DIR.partial)
  help

model options (every model command):
  --config PROFILE.yaml | --model PATH    a YAML profile, or a model folder/file (format detected)
  --device cpu|cuda   --format NAME|auto   --threads N   --context N
  --tokenizer tokenizer.json   --chat-template FILE.jinja   replace the model's own
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
  opts.insert({"prompt", "tokens", "max-tokens", "temperature", "top-k", "top-p", "min-p", "seed", "draft", "draft-k"});
  cli::Args a(argv, opts, {"print-ids", "verbose"}, "generate");
  Profile p = cli::resolve_profile(a);
  check(a.has("prompt") != a.has("tokens"), "tandem generate: give exactly one of --prompt or --tokens");
  // --prompt goes through the model's tokenizer: its side files, or the profile's / --tokenizer's file.
  // The checkpoint is opened once: its side files give the codec, then the model loads from it.
  PluginRegistry reg;
  reg.load_default();
  std::string format_name;
  std::unique_ptr<Checkpoint> checkpoint = open_checkpoint(p.load, reg, &format_name);
  std::shared_ptr<TextCodec> codec;
  std::vector<int32_t> prompt;
  if (a.has("prompt")) {
    codec = make_text_codec(p, *checkpoint);
    if (auto m = codec->missing_tokenizer(); !m.empty())
      fail("tandem generate: --prompt needs a tokenizer, and this model has none (", m, "); give --tokenizer FILE or use --tokens");
    prompt = codec->encode(a.str("prompt"), true, true);
    check(!prompt.empty(), "tandem generate: --prompt is empty");
  } else {
    prompt = cli::read_tokens(a.str("tokens"));
  }

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
  DraftOptions draft = cli::draft_options(a, p.draft, "generate");

  for (const auto& n : draft.drafters) reg.speculator(n, p.load.device);  // an unknown name fails before the load
  p.load.progress = cli::progress_printer("loading weights");
  auto model = Model::load(std::move(checkpoint), format_name, p.load, reg);
  GenerateResult r;
  if (draft.drafters.empty()) {
    r = generate(*model, prompt, g);
  } else {
    Drafting drafting(*model, reg, draft);
    DraftMetrics dm;
    r = drafting.generate(prompt, g, {}, &dm);
    std::fputs(dm.summary().c_str(), stderr);
  }
  if (codec && !a.flag("print-ids")) {
    // The server's TextStream (no stop strings), so both print the same text for the same tokens;
    // control tokens (EOS) have none.
    TextStream stream(*codec, {});
    std::string text;
    for (int32_t t : r.tokens) text += stream.push(t);
    text += stream.flush();
    std::printf("%s\n", text.c_str());
  } else {
    // With --tokens the ids are the output; --print-ids keeps them on one line.
    for (size_t i = 0; i < r.tokens.size(); ++i) std::printf(i ? " %d" : "%d", r.tokens[i]);
    std::printf("\n");
  }
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
    if (cmd == "serve") return cli::cmd_serve(rest(argc, argv));
    if (cmd == "synth") return cli::cmd_synth(rest(argc, argv));
    if (cmd == "bench") return cli::cmd_bench(rest(argc, argv));
    if (cmd == "convert") return cli::cmd_convert(rest(argc, argv));
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
