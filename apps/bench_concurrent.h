// `tandem bench --concurrent S,S,...`: aggregate decode of S streams at once through
// Model::forward_batch (one pass for every stream's row, the server's batched step), each stream's
// greedy tokens checked against its solo run of the same prompt.
// Owner: free functions. Thread: the caller's (the one that drives the Model). Sync: none.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <rapidjson/prettywriter.h>
#include <rapidjson/stringbuffer.h>

namespace tandem {
class Model;
}

namespace tandem::cli {

struct ConcurrentRun {
  int streams = 0;
  int steps = 0;          // timed batched steps (each stream decodes one token a step)
  double seconds = 0;     // those steps' time
  int forwards = 0;       // Model passes the timed steps took
  double solo_tps = 0;    // one stream alone, same loop (the streams == 1 run, or measured for it)
  // With a profile: ms per batched step by layer kind ("embedding", "mamba", "moe", "attention",
  // "head", "logits+host"), over profile_steps further steps synchronized after every layer (eager:
  // the per-layer synchronizations keep those steps out of the batch graph).
  int profile_steps = 0;
  std::map<std::string, double> ms_per_step;
  double aggregate_tps() const { return seconds > 0 ? double(streams) * steps / seconds : 0; }
};

// Parses "1,4,8": each in [1, Model::batch_max_rows], ascending, no repeats.
std::vector<int> parse_stream_counts(const std::string& list);

// For each count S: S sequences, each prefilled with its own random prompt of prompt_tokens tokens
// (in passes of prefill_chunk tokens),
// then `steps` batched greedy steps (after two untimed ones, which record the batch's graph); fails
// (tandem::Error) unless every stream's tokens equal its solo run's. profile_steps > 0: then that many
// more steps per count, timed by layer kind (ConcurrentRun::ms_per_step).
std::vector<ConcurrentRun> bench_concurrent(Model& model, const std::vector<int>& counts, int prompt_tokens, int steps,
                                            int64_t context, int prefill_chunk, uint64_t seed, int profile_steps = 0);

void print_concurrent(const std::vector<ConcurrentRun>& runs);
void write_concurrent(rapidjson::PrettyWriter<rapidjson::StringBuffer>& w, const std::vector<ConcurrentRun>& runs);

}  // namespace tandem::cli
