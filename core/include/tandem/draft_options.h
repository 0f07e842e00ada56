// What a profile or a command line asks of drafting: which drafters, their settings, and the
// StairCut picker's knobs. Plain options only: the drafting loop and StairCut live in schedulers/,
// which read these; core parses them from profiles (tandem/profile.h) and never runs them.
// Owner: value types. Thread: any. Sync: none.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tandem/speculator.h"

namespace tandem {

struct StairCutOptions {
  double margin = 0.03;         // h: move between drafting levels only when the new one wins by this
  double margin_plain = 0.05;   // h0: start drafting only when it beats plain by this; stop once plain wins
  int persist_steps = 2;        // w: ... for this many consecutive steps
  int probe_every = 16;         // run an expensive drafter every this many plain steps (retro-scoring) ...
  double probe_budget = 0.02;   // ... or more, so that probing costs at most this fraction of plain decoding
                                // (its measured propose time / (this · T_v(1)) plain steps); 0 = off
  int force_k = -1;             // −1 = off; else verify min(force_k, proposal) drafts every step
  int max_k = 31;               // longest chain verified (rows = k + 1)
  int halve_after = 4000;       // acceptance counts halve past this many trials per cell
  double cost_ewma = 0.1;       // weight of a new step time in T_v(m); 0 = keep the start-up table
  int guard_window = 64;        // never slower than plain: drafted steps looked at ...
  double guard_ratio = 0.97;    // ... whose throughput must reach this fraction of plain's ...
  int guard_plain_steps = 32;   // ... or plain steps are forced for this many steps
};

struct DraftOptions {
  std::vector<std::string> drafters;                   // speculator names; empty = plain decoding
  std::map<std::string, SpeculatorSettings> settings;  // per drafter name (profile `draft.<name>`)
  StairCutOptions staircut;
  // T_v(m) in seconds, [m − 1]; empty = measured at start-up on this machine for these weights.
  std::vector<double> verify_costs;
  int64_t cost_context = 1024;  // committed tokens the start-up measurement verifies after
  int cost_reps = 5;            // repetitions per m (median)
};

// "lookup,lilicorr" → {"lookup", "lilicorr"}; "none" → {}. Empty or repeated names are errors.
TANDEM_API std::vector<std::string> parse_drafter_names(const std::string& list);

}  // namespace tandem
