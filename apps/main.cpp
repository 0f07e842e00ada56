// The `tandem` executable: one binary, one subcommand per task.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "cli.h"
#include "cmd_bench.h"
#include "cmd_convert.h"
#include "cmd_eval.h"
#include "cmd_inspect.h"
#include "cmd_synth.h"
#include "draft_trace.h"
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

const cli::CommandSpec& generate_spec() {
  static const cli::CommandSpec spec{
      "generate",
      "Generate from a prompt (--prompt TEXT or --tokens FILE); the text (or ids) on stdout, speed on stderr.",
      cli::with_model_flags({
          {"prompt", "TEXT", "the prompt, through the model's tokenizer"},
          {"tokens", "FILE", "the prompt as whitespace-separated token ids"},
          {"max-tokens", "N", "tokens to generate"},
          {"prefill-chunk", "N", "prompt tokens per prefill pass (default 2048; the results depend on it)"},
          {"temperature", "T", "sampling temperature (0: greedy)"},
          {"top-k", "K", "sample from the K likeliest tokens"},
          {"top-p", "P", "nucleus sampling"},
          {"min-p", "P", "drop tokens below P times the likeliest"},
          {"seed", "S", "sampling seed"},
          {"print-ids", "", "print token ids instead of text"},
          {"draft", "NAME[,NAME...]|none", "speculative decoding with these drafters (stats on stderr)"},
          {"draft-k", "K", "verify K drafts every step instead of letting StairCut pick"},
          {"trace-drafts", "FILE.jsonl", "write one JSON line per drafted step (proposals, chain, k, accepted, bonus)"},
      }), "", ""};
  return spec;
}

const cli::CommandSpec& logits_spec() {
  static const cli::CommandSpec spec{"logits", "Write the float32 logits of every position, [n_tokens, vocab].",
                                     cli::with_model_flags({
                                         {"tokens", "FILE", "the input as whitespace-separated token ids (required)"},
                                         {"out", "FILE.npy", "where the logits go (required)"},
                                     }), "", ""};
  return spec;
}

const cli::CommandSpec& plugins_spec() {
  static const cli::CommandSpec spec{"plugins", "List the loaded plugins and what they provide.",
                                     cli::with_verbose_flag({}), "", ""};
  return spec;
}

std::vector<std::string> rest(int argc, char** argv) { return std::vector<std::string>(argv + 2, argv + argc); }

int cmd_plugins(const std::vector<std::string>& argv) {
  cli::Args a(argv, plugins_spec());
  PluginRegistry reg;
  reg.load_default();
  const char* kinds[] = {"", "backend", "format", "layer", "speculator"};
  for (const auto& p : reg.providers())
    std::printf("%-11s %-14s %-6s %s\n", kinds[p.kind], p.name.c_str(), p.device.empty() ? "-" : p.device.c_str(),
                p.file.c_str());
  for (const auto& s : reg.skipped()) std::printf("(skipped, cannot run here) %s\n", s.c_str());
  return 0;
}

int cmd_generate(const std::vector<std::string>& argv) {
  cli::Args a(argv, generate_spec());
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
  g.prefill_chunk = int(a.integer("prefill-chunk", g.prefill_chunk));
  check(g.max_tokens >= 1, "tandem generate: --max-tokens must be at least 1");
  check(g.prefill_chunk >= 1, "tandem generate: --prefill-chunk must be at least 1, found ", g.prefill_chunk);
  DraftOptions draft = cli::draft_options(a, p.draft, "generate");
  std::ofstream trace;
  if (a.has("trace-drafts")) {
    check(!draft.drafters.empty(), "tandem generate: --trace-drafts needs drafters (--draft NAME or the profile's draft:)");
    trace.open(a.str("trace-drafts"));
    check(trace.good(), "tandem generate: --trace-drafts '", a.str("trace-drafts"), "' cannot be written");
  }

  for (const auto& n : draft.drafters) reg.speculator(n, p.load.device);  // an unknown name fails before the load
  p.load.progress = cli::progress_printer("loading weights");
  auto model = Model::load(std::move(checkpoint), format_name, p.load, reg);
  GenerateResult r;
  if (draft.drafters.empty()) {
    r = generate(*model, prompt, g);
  } else {
    Drafting drafting(*model, reg, draft);
    int64_t traced = 0;
    if (trace.is_open())
      drafting.set_trace([&](const DraftStep& s) { trace << cli::draft_step_json(traced++, s) << '\n'; });
    DraftMetrics dm;
    r = drafting.generate(prompt, g, {}, &dm);
    std::fputs(dm.summary().c_str(), stderr);
    if (trace.is_open()) {
      trace.close();
      check(trace.good(), "tandem generate: --trace-drafts '", a.str("trace-drafts"), "': writing failed");
    }
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
  cli::Args a(argv, logits_spec());
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

struct Command {
  const cli::CommandSpec& (*spec)();
  int (*run)(const std::vector<std::string>&);
};

const Command kCommands[] = {
    {generate_spec, cmd_generate},      {logits_spec, cmd_logits},       {cli::inspect_spec, cli::cmd_inspect},
    {plugins_spec, cmd_plugins},        {cli::serve_spec, cli::cmd_serve}, {cli::synth_spec, cli::cmd_synth},
    {cli::bench_spec, cli::cmd_bench},  {cli::convert_spec, cli::cmd_convert}, {cli::eval_spec, cli::cmd_eval},
};

// The command list, one line each, from the same specs as each command's --help.
std::string overview() {
  std::string out = "usage: tandem <command> [options]\n       tandem <command> --help   (that command's flags)\n\ncommands:\n";
  for (const Command& c : kCommands) {
    const cli::CommandSpec& s = c.spec();
    // The summary's first sentence; `tandem CMD --help` has the rest.
    std::string first = s.summary.substr(0, s.summary.find(". "));
    out += "  " + s.name + std::string(10 - s.name.size(), ' ') + first + (first.back() == '.' ? "" : ".") + "\n";
  }
  out += "  help      this list; `tandem help <command>` for one command\n";
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  spdlog::set_default_logger(spdlog::stderr_color_mt("tandem"));
  spdlog::set_pattern("%^%l%$: %v");
  if (argc < 2) {
    std::fputs(overview().c_str(), stderr);
    return 2;
  }
  std::string cmd = argv[1];
  for (int i = 2; i < argc; ++i)
    if (std::string(argv[i]) == "--verbose") spdlog::set_level(spdlog::level::debug);
  try {
    if (cmd == "help" || cmd == "--help" || cmd == "-h") {
      if (argc == 2) {
        std::fputs(overview().c_str(), stdout);
        return 0;
      }
      cmd = argv[2];
      for (const Command& c : kCommands)
        if (c.spec().name == cmd) {
          std::fputs(cli::usage(c.spec()).c_str(), stdout);
          return 0;
        }
      std::fprintf(stderr, "error: tandem help: unknown command '%s'\n%s", cmd.c_str(), overview().c_str());
      return 2;
    }
    for (const Command& c : kCommands)
      if (c.spec().name == cmd) return c.run(rest(argc, argv));
    std::fprintf(stderr, "error: unknown command '%s'\n%s", cmd.c_str(), overview().c_str());
    return 2;
  } catch (const cli::HelpShown&) {
    return 0;  // the command's usage is on stdout
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
