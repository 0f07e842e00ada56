// `tandem bench --asks`: the benchmark protocol of spec/speculation.md §6 in one process: five chat
// asks (prose, chat, code, edit, copy), one request at a time, greedy, thinking off, a fixed number of
// tokens (EOS ignored), plain and drafted runs alternating, mean ± half range of decode tok/s per ask,
// and every drafted output checked against the plain one (and the plain runs against each other).
// Owner: free functions. Thread: the caller's (the one that drives the Model). Sync: none.
#pragma once
#include <string>
#include <vector>

#include "tandem/drafting.h"

namespace tandem {
class Model;
class PluginRegistry;
class TextCodec;
}  // namespace tandem

namespace tandem::cli {

// One ask: the chat messages of §6.2 (the edit and copy inputs are long enough that the first 512
// answer tokens stay inside the repeated text).
struct Ask {
  const char* name;
  const char* system;  // "" = no system message
  std::string user;
};
const std::vector<Ask>& bench_asks();

struct AsksOptions {
  int tokens = 512;        // generated per run
  int runs = 3;            // plain runs and drafted runs per ask, alternating P D P D …
  int64_t context = 32768;
  DraftOptions draft;      // drafters (`oracle` and `wrong` allowed) and StairCut settings
  std::string json;        // report file, "" = none
  std::string command, commit, date, model;
};

// Runs the protocol and prints its table on stdout; a drafted output that differs from the plain
// one, or plain runs that differ from each other, fail (tandem::Error).
void run_asks(Model& model, PluginRegistry& registry, const TextCodec& codec, const AsksOptions& options);

}  // namespace tandem::cli
