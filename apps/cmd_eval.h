// `tandem eval`: perplexity, KL divergence and top-1 agreement of a model against a reference.
#pragma once
#include <string>
#include <vector>

#include "cli.h"

namespace tandem::cli {

// The flags --help lists and the parser accepts.
const CommandSpec& eval_spec();
// argv after the subcommand. Returns the exit status; errors throw tandem::Error.
int cmd_eval(const std::vector<std::string>& argv);

}  // namespace tandem::cli
