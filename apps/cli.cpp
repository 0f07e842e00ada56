// Command-line parsing and the profile/flag merge.
#include "cli.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include <unistd.h>

#include "tandem/error.h"
#include "tandem/drafting.h"

namespace tandem::cli {

std::vector<Flag> with_verbose_flag(std::vector<Flag> own) {
  own.push_back({"verbose", "", "debug logging"});
  return own;
}

std::vector<Flag> with_model_flags(std::vector<Flag> own) {
  const Flag model[] = {
    {"config", "PROFILE.yaml", "a YAML profile (configs/); flags given win over it"},
    {"model", "PATH", "a model folder or file (format detected)"},
    {"device", "cpu|cuda", "where the model runs"},
    {"format", "NAME|auto", "the checkpoint format (default: detected)"},
    {"threads", "N", "CPU threads (0: all cores)"},
    {"context", "N", "the context window in tokens"},
    {"chat-template", "FILE.jinja", "replaces the model's own chat template"},
    {"tokenizer", "tokenizer.json", "replaces the model's own tokenizer"},
  };
  own.insert(own.end(), std::begin(model), std::end(model));
  return with_verbose_flag(std::move(own));
}

std::string usage(const CommandSpec& spec) {
  std::string out = "usage: tandem " + spec.name + (spec.flags.empty() ? "" : " [options]");
  if (!spec.positional.empty()) out += " " + spec.positional;
  out += "\n" + spec.summary + "\n";
  if (!spec.flags.empty()) out += "\noptions:\n";
  std::vector<std::string> lefts;
  size_t width = 0;
  for (const Flag& f : spec.flags) {
    lefts.push_back("--" + f.name + (f.value.empty() ? "" : " " + f.value));
    width = std::max(width, lefts.back().size());
  }
  width = std::min<size_t>(width, 32);  // a longer flag pushes only its own help right
  for (size_t i = 0; i < spec.flags.size(); ++i)
    out += "  " + lefts[i] + std::string(std::max(width, lefts[i].size()) - lefts[i].size() + 2, ' ') +
           spec.flags[i].help + "\n";
  if (!spec.notes.empty()) out += "\n" + spec.notes + (spec.notes.back() == '\n' ? "" : "\n");
  return out;
}

Args::Args(const std::vector<std::string>& argv, const CommandSpec& spec) : command_(spec.name) {
  const std::string& command = spec.name;
  auto find = [&](const std::string& k) -> const Flag* {
    for (const Flag& f : spec.flags)
      if (f.name == k) return &f;
    return nullptr;
  };
  // Help wins over everything else on the line, a mistyped flag included: that is when it is wanted.
  for (const std::string& a : argv)
    if (a == "--help" || a == "-h") {
      std::fputs(usage(spec).c_str(), stdout);
      std::fflush(stdout);
      throw HelpShown{};
    }
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.rfind("--", 0) != 0 || a.size() <= 2) {
      check(!spec.positional.empty(), "tandem ", command, ": unexpected argument '", a, "' (see 'tandem ", command,
            " --help')");
      positional_.push_back(a);
      continue;
    }
    std::string k = a.substr(2), v;
    bool inline_value = false;
    if (auto eq = k.find('='); eq != std::string::npos) {
      v = k.substr(eq + 1);
      k = k.substr(0, eq);
      inline_value = true;
    }
    const Flag* f = find(k);
    if (!f) fail("tandem ", command, ": unknown option '--", k, "' (see 'tandem ", command, " --help')");
    if (f->value.empty()) {
      check(!inline_value, "tandem ", command, ": --", k, " takes no value");
      flags_.insert(k);
    } else {
      if (!inline_value) {
        check(i + 1 < argv.size(), "tandem ", command, ": --", k, " needs a value (", f->value, ")");
        v = argv[++i];
      }
      values_[k] = v;
    }
  }
}

std::string Args::str(const std::string& k, const std::string& def) const {
  auto it = values_.find(k);
  return it == values_.end() ? def : it->second;
}

long long Args::integer(const std::string& k, long long def) const {
  if (!has(k)) return def;
  std::string v = str(k);
  size_t pos = 0;
  long long r = 0;
  try {
    r = std::stoll(v, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  check(pos == v.size() && !v.empty(), "tandem ", command_, ": --", k, " expects an integer, found '", v, "'");
  return r;
}

double Args::number(const std::string& k, double def) const {
  if (!has(k)) return def;
  std::string v = str(k);
  size_t pos = 0;
  double r = 0;
  try {
    r = std::stod(v, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  check(pos == v.size() && !v.empty(), "tandem ", command_, ": --", k, " expects a number, found '", v, "'");
  return r;
}

Profile resolve_profile(const Args& a) {
  Profile p;
  if (a.has("config")) p = load_profile(a.str("config"));
  if (a.has("model")) p.load.path = a.str("model");
  check(!p.load.path.empty(), "no model: give --config <profile.yaml> or --model <path>");
  p.load.device = a.str("device", p.load.device);
  p.load.format = a.str("format", p.load.format);
  p.load.threads = int(a.integer("threads", p.load.threads));
  p.context = a.integer("context", p.context);
  p.chat_template = a.str("chat-template", p.chat_template);
  p.tokenizer = a.str("tokenizer", p.tokenizer);
  check(p.load.threads >= 0, "--threads must be non-negative");
  check(p.context > 0, "--context must be positive");
  return p;
}

std::function<void(double)> progress_printer(const std::string& what) {
  const bool tty = ::isatty(2);
  auto last = std::make_shared<int>(-1);  // the last step printed: percent on a terminal, tenths otherwise
  return [tty, what, last](double f) {
    int pct = int(f * 100.0 + 0.5);
    if (tty) {
      if (pct == *last) return;
      *last = pct;
      const int width = 30, full = pct * width / 100;
      std::fprintf(stderr, "\r%s [%s%s] %3d%%%s", what.c_str(), std::string(size_t(full), '#').c_str(),
                   std::string(size_t(width - full), ' ').c_str(), pct, pct >= 100 ? "\n" : "");
    } else {
      if (pct / 10 == *last) return;
      *last = pct / 10;
      std::fprintf(stderr, "%s: %d%%\n", what.c_str(), pct);
    }
    std::fflush(stderr);
  };
}

std::vector<int32_t> read_tokens(const std::string& path) {
  std::ifstream f(path);
  check(f.good(), "token file '", path, "' cannot be read");
  std::vector<int32_t> out;
  std::string w;
  while (f >> w) {
    size_t pos = 0;
    long long v = -1;
    try {
      v = std::stoll(w, &pos);
    } catch (const std::exception&) {
      pos = 0;
    }
    check(pos == w.size() && v >= 0 && v <= INT32_MAX, "token file '", path, "': '", w,
          "' is not a token id (expected whitespace-separated non-negative integers)");
    out.push_back(int32_t(v));
  }
  check(!out.empty(), "token file '", path, "' holds no tokens");
  return out;
}

DraftOptions draft_options(const Args& a, DraftOptions draft, const std::string& command) {
  if (a.has("draft")) {
    draft.drafters = parse_drafter_names(a.str("draft"));
    std::erase_if(draft.settings, [&](const auto& kv) {
      return std::find(draft.drafters.begin(), draft.drafters.end(), kv.first) == draft.drafters.end();
    });
  }
  draft.staircut.force_k = int(a.integer("draft-k", draft.staircut.force_k));
  check(!a.has("draft-k") || draft.staircut.force_k >= 0, "tandem ", command, ": --draft-k must be at least 0");
  check(!a.has("draft-k") || !draft.drafters.empty(), "tandem ", command, ": --draft-k needs drafters (--draft NAME)");
  return draft;
}

std::vector<int64_t> positive_list(const std::string& list, const std::string& what, const std::string& noun) {
  std::vector<int64_t> v;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t pos = 0;
    long long n = -1;
    try {
      n = std::stoll(item, &pos);
    } catch (const std::exception&) {
      pos = 0;
    }
    check(pos == item.size() && n > 0, what, " expects a comma-separated list of positive ", noun, ", found '", item,
          "'");
    v.push_back(n);
  }
  return v;
}

}  // namespace tandem::cli
