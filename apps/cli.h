// Command-line parsing shared by the subcommands: `--key value` options and `--flag` switches, each
// declared up front so that an unknown or malformed flag is an error that names it.
#pragma once
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tandem/profile.h"

namespace tandem::cli {

class Args {
 public:
  // argv after the subcommand. `options` take a value, `flags` do not.
  Args(const std::vector<std::string>& argv, const std::set<std::string>& options, const std::set<std::string>& flags,
       const std::string& command);
  bool has(const std::string& k) const { return values_.count(k) > 0; }
  bool flag(const std::string& k) const { return flags_.count(k) > 0; }
  std::string str(const std::string& k, const std::string& def = "") const;
  long long integer(const std::string& k, long long def) const;
  double number(const std::string& k, double def) const;

 private:
  std::map<std::string, std::string> values_;
  std::set<std::string> flags_;
  std::string command_;
};

// Options every model subcommand takes.
extern const std::set<std::string> kModelOptions;
// The profile from --config (if given) with --model/--device/--format/--threads/--context/
// --chat-template/--tokenizer applied.
Profile resolve_profile(const Args& a);
// Load progress on stderr: a bar redrawn in place on a terminal, otherwise a line every 10 %.
std::function<void(double)> progress_printer(const std::string& what);
// The profile's `draft:` section with --draft NAME[,NAME…]|none and --draft-k K applied (the
// profile's settings of drafters not named in --draft are dropped); errors name `command`.
DraftOptions draft_options(const Args& a, DraftOptions profile, const std::string& command);
// Whitespace-separated token ids.
std::vector<int32_t> read_tokens(const std::string& path);

}  // namespace tandem::cli
