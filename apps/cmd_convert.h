// `tandem convert --to NAME …`: a BF16 safetensors checkpoint folder → a folder in the format a
// converter plugin offers (EXL3 today).
// Owner: none. Thread: the main thread (quantization fans out over the core's worker pool). Sync: files
// are complete when it returns.
#pragma once
#include <string>
#include <vector>

#include "cli.h"

namespace tandem::cli {

// argv after the subcommand. Returns the process exit status; errors throw (one line).
// The flags --help lists and the parser accepts: the common ones and each loaded converter's own
// (the default plugins', read once).
const CommandSpec& convert_spec();
int cmd_convert(const std::vector<std::string>& argv);

}  // namespace tandem::cli
