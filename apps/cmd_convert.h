// `tandem convert --to exl3 …`: a BF16 safetensors checkpoint folder → an EXL3 pack folder.
// Owner: none. Thread: the main thread (quantization fans out over the core's worker pool). Sync: files
// are complete when it returns.
#pragma once
#include <string>
#include <vector>

#include "cli.h"

namespace tandem::cli {

// argv after the subcommand. Returns the process exit status; errors throw (one line).
// The flags --help lists and the parser accepts.
const CommandSpec& convert_spec();
int cmd_convert(const std::vector<std::string>& argv);

}  // namespace tandem::cli
