// Command-line parsing shared by the subcommands: `--key value` options and `--flag` switches, each
// declared up front with a help line, so that an unknown or malformed flag is an error that names it
// and `--help` prints the command's usage from the same table.
// Owner: callers own their CommandSpec and Args. Thread: any, one Args per thread. Sync: none.
#pragma once
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tandem/profile.h"

namespace tandem::cli {

// One flag of a command: `value` names its argument (`N`, `FILE`); empty for a switch.
struct Flag {
  std::string name;  // without the leading --
  std::string value;
  std::string help;  // one line
};

struct CommandSpec {
  std::string name;                 // `tandem NAME`
  std::string summary;              // one line: what the command does
  std::vector<Flag> flags;          // in the order --help lists them
  std::string positional;           // e.g. "INPUT_DIR OUTPUT_DIR"; empty: the command takes none
  std::string notes;                // more lines printed after the flags (may be empty)
};

// Thrown by Args after it printed a command's usage for --help or -h; main() exits 0 on it.
struct HelpShown {};

// `usage: tandem NAME …`, the summary, then one line per flag.
std::string usage(const CommandSpec& spec);

class Args {
 public:
  // argv after the subcommand, parsed against `spec`. `--help`/`-h` print usage(spec) to stdout and
  // throw HelpShown. Arguments without `--` are positional when the spec takes them, else an error.
  Args(const std::vector<std::string>& argv, const CommandSpec& spec);
  const std::vector<std::string>& positional() const { return positional_; }
  bool has(const std::string& k) const { return values_.count(k) > 0; }
  bool flag(const std::string& k) const { return flags_.count(k) > 0; }
  std::string str(const std::string& k, const std::string& def = "") const;
  long long integer(const std::string& k, long long def) const;
  double number(const std::string& k, double def) const;

 private:
  std::map<std::string, std::string> values_;
  std::set<std::string> flags_;
  std::vector<std::string> positional_;
  std::string command_;
};

// `own` followed by the flags every model command takes (--config, --model, --device, …) and
// --verbose. Functions, not globals: command specs are built during static initialisation elsewhere.
std::vector<Flag> with_model_flags(std::vector<Flag> own);
// `own` followed by --verbose, which every command takes.
std::vector<Flag> with_verbose_flag(std::vector<Flag> own);
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
// A comma-separated list of positive integers, in the order given ("512,8192"); anything else is an
// error "`what` expects a comma-separated list of positive `noun`, found 'item'".
std::vector<int64_t> positive_list(const std::string& list, const std::string& what, const std::string& noun);

}  // namespace tandem::cli
