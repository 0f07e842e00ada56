// `tandem convert --to NAME`: finds the converter a loaded plugin offers under NAME, reads the common
// options (calibration text, rows, seed, threads, force) and the converter's own, and runs it with a
// host that opens the input and runs the model for calibration (convert_calibration.h).
#include "cmd_convert.h"

#include <algorithm>
#include <memory>
#include <set>

#include "cli.h"
#include "convert_calibration.h"
#include "tandem/converter.h"
#include "tandem/error.h"
#include "tandem/model.h"
#include "tandem/parallel.h"
#include "tandem/registry.h"
#include "tandem/weights.h"

namespace tandem::cli {

namespace {

constexpr const char* kUsage =
    "usage: tandem convert --to NAME [converter options] [--calibration FILE] [--rows N] [--seed S] [--threads N] "
    "[--force] INPUT_DIR OUTPUT_DIR";

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s.empty() ? "none" : s;
}

// The input folder, opened on first use (after the converter has checked its output), and the model
// run over the calibration text.
class Host final : public ConvertHost {
 public:
  Host(PluginRegistry& reg, std::string input) : reg_(reg), input_(std::move(input)) {}
  PluginRegistry& registry() override { return reg_; }
  const Checkpoint& input() override {
    if (!ckpt_) {
      LoadOptions lo;
      lo.path = input_;
      lo.format = "safetensors";  // converters read HF folders
      ckpt_ = open_checkpoint(lo, reg_);
    }
    return *ckpt_;
  }
  Calibration calibrate(const std::string& text, const std::set<std::string>& linears, int64_t max_tokens,
                        int64_t sequence_tokens) override {
    return cli::calibrate(input_, text, linears, max_tokens, sequence_tokens, -1);
  }

 private:
  PluginRegistry& reg_;
  std::string input_;
  std::unique_ptr<Checkpoint> ckpt_;
};

}  // namespace

int cmd_convert(const std::vector<std::string>& argv) {
  // --to first: the converter names the options it reads.
  std::string to;
  bool have_to = false;
  for (size_t i = 0; i < argv.size(); ++i) {
    if (argv[i] == "--to" && i + 1 < argv.size()) to = argv[i + 1], have_to = true;
    else if (argv[i].rfind("--to=", 0) == 0) to = argv[i].substr(5), have_to = true;
  }
  PluginRegistry reg;
  reg.load_default();
  const std::vector<std::string> available = reg.names(TANDEM_KIND_CONVERTER);
  check(have_to, "tandem convert: --to is required (converters: ", joined(available), ")\n", kUsage);
  check(std::find(available.begin(), available.end(), to) != available.end(), "tandem convert: --to '", to,
        "' is not supported (no loaded plugin converts to it; converters: ", joined(available), ")");
  const std::shared_ptr<Converter> converter = reg.converter(to);

  std::set<std::string> options = {"to", "calibration", "rows", "seed", "threads"};
  const std::vector<std::string> own = converter->options();
  options.insert(own.begin(), own.end());
  std::vector<std::string> flags, positional;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.rfind("--", 0) == 0) {
      flags.push_back(a);
      if (a.find('=') == std::string::npos && options.count(a.substr(2)) && i + 1 < argv.size()) flags.push_back(argv[++i]);
    } else {
      positional.push_back(a);
    }
  }
  cli::Args a(flags, options, {"force", "verbose"}, "convert");
  check(positional.size() == 2, "tandem convert: expected INPUT_DIR and OUTPUT_DIR, found ", positional.size(),
        " positional argument", positional.size() == 1 ? "" : "s", "\n", converter->usage());
  ConvertRequest r;
  r.input = positional[0], r.output = positional[1];
  for (const std::string& o : own)
    if (a.has(o)) r.options[o] = a.str(o);
  converter->validate(r);
  r.calibration = a.str("calibration");
  r.rows = a.integer("rows", 0);
  check(!a.has("rows") || r.rows >= 1, "tandem convert: --rows must be at least 1, found ", a.str("rows"));
  check(!a.has("rows") || a.has("calibration"), "tandem convert: --rows needs --calibration FILE");
  r.seed = uint64_t(a.integer("seed", 0));
  const int threads = int(a.integer("threads", 0));
  check(threads >= 0, "tandem convert: --threads must be non-negative, found ", threads);
  set_thread_count(threads);
  r.force = a.flag("force");

  Host host(reg, r.input);
  converter->convert(r, host);
  return 0;
}

}  // namespace tandem::cli
