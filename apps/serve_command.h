// `tandem serve`: flags → ServerOptions, then run the server until SIGTERM/SIGINT.
// Owner: n/a. Thread: the main thread. Sync: none.
#pragma once
#include <string>
#include <vector>

#include "cli.h"

namespace tandem::cli {

// argv after the subcommand; returns the process exit status.
// The flags --help lists and the parser accepts.
const CommandSpec& serve_spec();
int cmd_serve(const std::vector<std::string>& argv);

}  // namespace tandem::cli
