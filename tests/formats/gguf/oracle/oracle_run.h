// Runs the llama.cpp oracle (tests/oracle/llama_logits.mjs under node) and compares its logits with
// tandem's (whose plugins come from gguf_test_util.h's host_plugins).
// Owner: plain values. Thread: one caller at a time (it spawns node). Sync: run_oracle returns when
// node has exited and every output file is written.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tandem::gguf::oracle {

// Empty when node and the installed node-llama-cpp are both found; else why not, with the fix.
std::string oracle_missing();
// True when TANDEM_SKIP_ORACLE=1: tests then skip instead of failing when the oracle is missing.
bool oracle_skip_requested();

struct OracleJob {
  std::string model;                            // a GGUF file
  std::vector<std::vector<int32_t>> prompts;    // each one batch from an emptied sequence
  std::vector<std::string> outs;                // one .npy per prompt: [n_tokens, n_vocab] float32
};
// One node process for all jobs. Throws a one-line error (with node's last output) on failure. One
// thread: the models are tiny, and llama.cpp's thread pool would mostly spin on a busy 2-core box.
void run_oracle(const std::vector<OracleJob>& jobs, const std::string& work_dir, int threads = 1);

// How far `ours` is from the reference `ref`, both [n, vocab] logits.
struct Comparison {
  int positions = 0;
  double mean_kl = 0;          // mean over positions of KL(softmax(ref) ‖ softmax(ours)), nats
  double max_kl = 0;
  double max_abs_dlogit = 0;   // max |ours − ref| over all logits
  int top1_mismatches = 0;     // positions whose argmax differs
  double min_ref_margin = 1e30;  // smallest top-1 − top-2 gap of ref over the positions
  double max_mismatch_margin = 0;  // largest such gap of ref where the argmax differs (0: none)
  void add(const Comparison& o);  // pools positions (mean_kl weighted by positions)
};
Comparison compare_logits(const std::vector<float>& ref, const std::vector<float>& ours, int64_t vocab);

}  // namespace tandem::gguf::oracle
