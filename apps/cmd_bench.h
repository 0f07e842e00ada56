// `tandem bench`: decode, verify and prefill speed of one model, the bytes of weights a decode step
// reads, the device's copy bandwidth measured in the same run, and how much of that roofline the
// decode reaches. The model is a file (--model, --config) or a synthetic one built in memory (--synth).
#pragma once
#include <string>
#include <vector>

#include "cli.h"

namespace tandem::cli {

// argv after the subcommand. Prints a table on stdout; --json writes every number. Returns the exit
// status; errors throw tandem::Error.
// The flags --help lists and the parser accepts.
const CommandSpec& bench_spec();
int cmd_bench(const std::vector<std::string>& argv);

}  // namespace tandem::cli
