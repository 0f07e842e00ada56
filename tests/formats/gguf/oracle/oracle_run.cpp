// The oracle process and the logits comparison (see oracle_run.h).
#include "oracle_run.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace tandem::gguf::oracle {
namespace {

std::string oracle_dir() { return std::string(TANDEM_SOURCE_DIR) + "/tests/oracle"; }

std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string json_str(const std::string& s) {
  std::string q = "\"";
  for (char c : s) q += c == '"' || c == '\\' ? std::string("\\") + c : std::string(1, c);
  return q + "\"";
}

std::string tail_of(const std::string& path, size_t max_chars) {
  std::ifstream f(path);
  std::string s((std::istreambuf_iterator<char>(f)), {});
  if (s.size() > max_chars) s = "…" + s.substr(s.size() - max_chars);
  for (char& c : s)
    if (c == '\n') c = ' ';
  return s;
}

}  // namespace

std::string oracle_missing() {
  if (std::system("node --version > /dev/null 2>&1") != 0)
    return "node (Node.js ≥ 20) is not on PATH: run scripts/setup.sh, which installs it and the llama.cpp oracle "
           "(tests/oracle, npm package node-llama-cpp 3.22.1); TANDEM_SKIP_ORACLE=1 skips these tests";
  if (std::system("node -e 'process.exit(parseInt(process.versions.node) >= 20 ? 0 : 1)' > /dev/null 2>&1") != 0)
    return "node on PATH is older than 20, which node-llama-cpp 3.22.1 (the llama.cpp oracle) requires: install "
           "Node.js ≥ 20; TANDEM_SKIP_ORACLE=1 skips these tests";
  const std::string pkg = oracle_dir() + "/node_modules/node-llama-cpp/package.json";
  const std::string bin = oracle_dir() + "/node_modules/@node-llama-cpp/linux-x64/package.json";
  if (!std::filesystem::exists(pkg) || !std::filesystem::exists(bin))
    return "the llama.cpp oracle is not installed (" + oracle_dir() +
           "/node_modules lacks node-llama-cpp or @node-llama-cpp/linux-x64): run scripts/setup.sh, or "
           "`cd tests/oracle && npm ci --omit=optional --ignore-scripts`; TANDEM_SKIP_ORACLE=1 skips these tests";
  return "";
}

bool oracle_skip_requested() {
  const char* v = std::getenv("TANDEM_SKIP_ORACLE");
  return v && std::string(v) == "1";
}

void run_oracle(const std::vector<OracleJob>& jobs, const std::string& work_dir, int threads) {
  std::ostringstream j;
  j << "{\"threads\": " << threads << ", \"runs\": [";
  for (size_t r = 0; r < jobs.size(); ++r) {
    j << (r ? ",\n" : "\n") << "{\"model\": " << json_str(jobs[r].model) << ", \"prompts\": [";
    for (size_t p = 0; p < jobs[r].prompts.size(); ++p) {
      j << (p ? ", " : "") << "{\"tokens\": [";
      for (size_t t = 0; t < jobs[r].prompts[p].size(); ++t) j << (t ? "," : "") << jobs[r].prompts[p][t];
      j << "], \"out\": " << json_str(jobs[r].outs[p]) << "}";
    }
    j << "]}";
  }
  j << "]}\n";
  const std::string job = work_dir + "/oracle_job.json", log = work_dir + "/oracle.log";
  std::ofstream(job) << j.str();
  const std::string cmd = "node " + quoted(oracle_dir() + "/llama_logits.mjs") + " " + quoted(job) + " > " +
                          quoted(log) + " 2>&1";
  const int rc = std::system(cmd.c_str());
  if (rc != 0)
    throw std::runtime_error("llama.cpp oracle failed (exit status " + std::to_string(rc) + ") running `" + cmd +
                             "`: " + tail_of(log, 1500));
}

void Comparison::add(const Comparison& o) {
  const int n = positions + o.positions;
  mean_kl = n ? (mean_kl * positions + o.mean_kl * o.positions) / n : 0;
  positions = n;
  max_kl = std::max(max_kl, o.max_kl);
  max_abs_dlogit = std::max(max_abs_dlogit, o.max_abs_dlogit);
  top1_mismatches += o.top1_mismatches;
  min_ref_margin = std::min(min_ref_margin, o.min_ref_margin);
  max_mismatch_margin = std::max(max_mismatch_margin, o.max_mismatch_margin);
}

Comparison compare_logits(const std::vector<float>& ref, const std::vector<float>& ours, int64_t vocab) {
  if (ref.size() != ours.size() || vocab <= 0 || ref.size() % size_t(vocab) != 0)
    throw std::runtime_error("compare_logits: " + std::to_string(ref.size()) + " reference and " +
                             std::to_string(ours.size()) + " tandem logits for a vocabulary of " + std::to_string(vocab));
  Comparison c;
  c.positions = int(ref.size() / size_t(vocab));
  double kl_sum = 0;
  for (int t = 0; t < c.positions; ++t) {
    const float* p = ref.data() + size_t(t) * size_t(vocab);
    const float* q = ours.data() + size_t(t) * size_t(vocab);
    // log-softmax of each in double
    auto lse = [&](const float* v) {
      double m = *std::max_element(v, v + vocab), s = 0;
      for (int64_t i = 0; i < vocab; ++i) s += std::exp(double(v[i]) - m);
      return m + std::log(s);
    };
    const double lp = lse(p), lq = lse(q);
    double kl = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      const double a = double(p[i]) - lp, b = double(q[i]) - lq;
      kl += std::exp(a) * (a - b);
      const double d = std::fabs(double(q[i]) - double(p[i]));
      c.max_abs_dlogit = std::isfinite(d) ? std::max(c.max_abs_dlogit, d) : HUGE_VAL;
    }
    kl = std::isfinite(kl) ? std::max(kl, 0.0) : HUGE_VAL;  // NaN logits count as infinitely far
    kl_sum += kl;
    c.max_kl = std::max(c.max_kl, kl);
    const int64_t ap = std::max_element(p, p + vocab) - p, aq = std::max_element(q, q + vocab) - q;
    double second = -1e300;
    for (int64_t i = 0; i < vocab; ++i)
      if (i != ap) second = std::max(second, double(p[i]));
    const double margin = double(p[ap]) - second;
    c.min_ref_margin = std::min(c.min_ref_margin, margin);
    if (ap != aq) {
      ++c.top1_mismatches;
      c.max_mismatch_margin = std::max(c.max_mismatch_margin, margin);
    }
  }
  c.mean_kl = c.positions ? kl_sum / c.positions : 0;
  return c;
}

}  // namespace tandem::gguf::oracle
