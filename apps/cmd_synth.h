// `tandem synth`: writes a model with random weights in a real shape and weight mix (tools/synth).
#pragma once
#include <string>
#include <vector>

#include "cli.h"

namespace tandem::cli {

// argv after the subcommand. Returns the exit status; errors throw tandem::Error.
// The flags --help lists and the parser accepts.
const CommandSpec& synth_spec();
int cmd_synth(const std::vector<std::string>& argv);

}  // namespace tandem::cli
