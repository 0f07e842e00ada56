// What `tandem eval` compares: log-probabilities of every position of a row (computed in double from
// f32 logits, stored f32), a file of them (--save-logits / --ref-logits; format in docs/eval.md), and
// the running statistics (perplexity, KL(ref || model), top-1 agreement) over the scored positions.
// Owner: value types; a LogprobFile owns its stream. Thread: one per object. Sync: none.
#pragma once
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace tandem::cli {

// out[v] = logits[v] − log Σ exp(logits), the sum in double, each value rounded to f32 once.
void log_softmax(const float* logits, int vocab, float* out);

// A logprob file: a 64-byte header (magic "TNDMLGP1", then little-endian uint32 version 1, vocab,
// rows, row_tokens, 0 × 10), rows·row_tokens int32 token ids, then for each row its row_tokens − 1
// predicting positions 0 … row_tokens − 2, vocab f32 log-probabilities each.
struct LogprobHeader {
  int vocab = 0;
  int rows = 0;
  int row_tokens = 0;
  size_t row_floats() const { return size_t(row_tokens - 1) * size_t(vocab); }
};

class LogprobWriter {
 public:
  // Writes the header and the tokens ([rows · row_tokens]); rows follow through write_row().
  LogprobWriter(const std::string& path, const LogprobHeader& h, const std::vector<int32_t>& tokens);
  void write_row(const float* logprobs);  // row_floats() values
  void close();                           // errors: fewer rows written than the header says, a failed write
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  LogprobHeader h_;
  std::ofstream f_;
  int written_ = 0;
};

class LogprobReader {
 public:
  // Errors name the file: not a logprob file, an unknown version, a size that disagrees with the header.
  explicit LogprobReader(const std::string& path);
  const LogprobHeader& header() const { return h_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  void read_row(int row, std::vector<float>& out);  // row_floats() values

 private:
  std::string path_;
  LogprobHeader h_;
  std::vector<int32_t> tokens_;
  std::ifstream f_;
};

// The reference's log-probabilities of every row, kept in host memory up to `memory_limit` bytes,
// else in a temporary logprob file (removed with the store).
class RefStore {
 public:
  RefStore(const LogprobHeader& h, const std::vector<int32_t>& tokens, size_t memory_limit);
  ~RefStore();
  void put(int row, const float* logprobs);
  const float* get(int row);  // valid until the next get()
  bool on_disk() const { return writer_ != nullptr || reader_ != nullptr; }
  std::string file() const { return tmp_; }

 private:
  LogprobHeader h_;
  std::vector<std::vector<float>> rows_;
  std::string tmp_;
  std::unique_ptr<LogprobWriter> writer_;
  std::unique_ptr<LogprobReader> reader_;
  std::vector<float> buf_;
};

// Sums over scored positions, in double.
struct EvalStats {
  int64_t positions = 0;
  double nll_model = 0, nll_ref = 0;  // Σ −log p(next token)
  double kl = 0, kl_sq = 0, kl_max = 0;
  int64_t top1_same = 0;
  bool has_ref = false;

  // `count` consecutive positions: the model's and (optional, else nullptr) the reference's
  // log-probabilities, [count, vocab], and each one's next token. The positions run on the worker
  // pool; their sums are added in position order, so the totals do not depend on the thread count.
  void add(const float* model, const float* ref, int vocab, const int32_t* next, int count);
  double perplexity() const;
  double ref_perplexity() const;
  double mean_kl() const;
  double kl_stderr() const;  // standard error of the mean KL
  double top1() const;
};

}  // namespace tandem::cli
