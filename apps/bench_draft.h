// `tandem bench --draft`: plain and drafted decode of the same prompt, compared token for token, with
// StairCut's numbers (acceptance, tokens per step, chosen k, T_v(m)); and the bench's test drafters,
// `oracle` (proposes the plain run's own continuation) and `wrong` (never proposes it), which bound
// what drafting can gain and what it may cost on a machine, and `oracle=P` (each token right with
// probability P, seeded), which gives partial acceptance at a chosen rate.
// Owner: free functions; the test drafters share the truth they are given. Thread: the caller's (the
// one that drives the Model). Sync: none.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <rapidjson/prettywriter.h>
#include <rapidjson/stringbuffer.h>

#include "tandem/generate.h"
#include "tandem/drafting.h"

namespace tandem {
class PluginRegistry;
}

namespace tandem::cli {

// The bench's test drafters are built in here and never registered as plugins, so a profile or
// `tandem serve` cannot name them (a test facility, not a drafter).
bool is_test_drafter(const std::string& name);
// The probability that a test drafter's token is right: oracle 1, wrong 0, oracle=P P (checked).
double test_drafter_right(const std::string& name);

// Factories for `names`: the test drafters from `truth` (prompt + the plain output; set it before
// each drafted run), every other name from the registry for `device`.
std::vector<Drafting::NamedFactory> drafter_factories(const std::vector<std::string>& names, PluginRegistry& registry,
                                                      const std::string& device,
                                                      std::shared_ptr<std::vector<int32_t>> truth);

// "oracle:wrong:lookup,oracle" → {{oracle}, {wrong}, {lookup, oracle}}: one drafted run per set.
std::vector<std::vector<std::string>> parse_draft_sets(const std::string& list);

// Fails (tandem::Error) unless `drafted` equals `plain`, naming the first differing position.
void check_same_tokens(const std::vector<int32_t>& plain, const std::vector<int32_t>& drafted, const std::string& what);

struct DraftRun {
  std::string drafters;              // "lookup,oracle"
  int tokens = 0;                    // decoded tokens after the first (the tok/s numerator)
  double plain_seconds = 0, drafted_seconds = 0;
  DraftMetrics metrics;
  std::vector<double> verify_costs;  // T_v(m), seconds, [m − 1], as StairCut started with them

  double plain_tps() const { return plain_seconds > 0 ? tokens / plain_seconds : 0; }
  double drafted_tps() const { return drafted_seconds > 0 ? tokens / drafted_seconds : 0; }
};

// One drafted run of `options.drafters` on `prompt` after the plain run `plain` (same options `g`,
// greedy); its tokens must equal the plain ones. Verify costs are measured unless `options` has them.
DraftRun bench_drafting(Model& model, PluginRegistry& registry, const DraftOptions& options,
                        const std::vector<int32_t>& prompt, const GenerateResult& plain, const GenerateOptions& g);

void print_draft_run(const DraftRun& run);
void write_draft_runs(rapidjson::PrettyWriter<rapidjson::StringBuffer>& w, const std::vector<DraftRun>& runs);

}  // namespace tandem::cli
