// `tandem inspect`: a checkpoint's metadata and tensor table, or one tensor decoded to float32 .npy.
#pragma once
#include <string>
#include <vector>

#include "cli.h"

namespace tandem::cli {

// The flags --help lists and the parser accepts.
const CommandSpec& inspect_spec();
// argv after the subcommand. Returns the exit status; errors throw tandem::Error.
int cmd_inspect(const std::vector<std::string>& argv);

}  // namespace tandem::cli
