// Log-softmax, the logprob file and the eval statistics (eval_logprobs.h).
#include "eval_logprobs.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <unistd.h>

#include "tandem/error.h"
#include "tandem/parallel.h"

namespace tandem::cli {

namespace {

constexpr char kMagic[8] = {'T', 'N', 'D', 'M', 'L', 'G', 'P', '1'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 64;

int argmax(const float* v, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (v[i] > v[best]) best = i;
  return best;
}

}  // namespace

void log_softmax(const float* logits, int vocab, float* out) {
  double mx = logits[0];
  for (int v = 1; v < vocab; ++v) mx = std::max(mx, double(logits[v]));
  double sum = 0;
  for (int v = 0; v < vocab; ++v) sum += std::exp(double(logits[v]) - mx);
  const double lse = mx + std::log(sum);
  for (int v = 0; v < vocab; ++v) out[v] = float(double(logits[v]) - lse);
}

LogprobWriter::LogprobWriter(const std::string& path, const LogprobHeader& h, const std::vector<int32_t>& tokens)
    : path_(path), h_(h), f_(path, std::ios::binary | std::ios::trunc) {
  check(f_.good(), "logprob file '", path, "' cannot be written");
  check(tokens.size() == size_t(h.rows) * size_t(h.row_tokens), "logprob file '", path, "': ", tokens.size(),
        " tokens for ", h.rows, " rows of ", h.row_tokens);
  uint32_t head[14] = {kVersion, uint32_t(h.vocab), uint32_t(h.rows), uint32_t(h.row_tokens)};
  f_.write(kMagic, 8);
  f_.write(reinterpret_cast<const char*>(head), sizeof(head));
  static_assert(8 + sizeof(head) == kHeaderBytes);
  f_.write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(tokens.size() * 4));
}

void LogprobWriter::write_row(const float* logprobs) {
  check(written_ < h_.rows, "logprob file '", path_, "': more than ", h_.rows, " rows written");
  f_.write(reinterpret_cast<const char*>(logprobs), std::streamsize(h_.row_floats() * 4));
  check(f_.good(), "logprob file '", path_, "': write failed (disk full?)");
  ++written_;
}

void LogprobWriter::close() {
  check(written_ == h_.rows, "logprob file '", path_, "': ", written_, " of ", h_.rows, " rows written");
  f_.flush();
  check(f_.good(), "logprob file '", path_, "': write failed (disk full?)");
  f_.close();
}

LogprobReader::LogprobReader(const std::string& path) : path_(path), f_(path, std::ios::binary) {
  check(f_.good(), "logprob file '", path, "' cannot be read");
  char magic[8] = {};
  uint32_t head[14] = {};
  f_.read(magic, 8);
  f_.read(reinterpret_cast<char*>(head), sizeof(head));
  check(f_.good() && std::memcmp(magic, kMagic, 8) == 0, "logprob file '", path,
        "': not a tandem logprob file (expected magic TNDMLGP1, written by tandem eval --save-logits)");
  check(head[0] == kVersion, "logprob file '", path, "': version ", head[0], ", expected ", kVersion);
  h_.vocab = int(head[1]), h_.rows = int(head[2]), h_.row_tokens = int(head[3]);
  check(h_.vocab > 0 && h_.rows > 0 && h_.row_tokens >= 2, "logprob file '", path, "': bad header (vocab ", h_.vocab,
        ", rows ", h_.rows, ", row tokens ", h_.row_tokens, ")");
  const uintmax_t want = kHeaderBytes + uintmax_t(h_.rows) * uintmax_t(h_.row_tokens) * 4 +
                         uintmax_t(h_.rows) * h_.row_floats() * 4;
  const uintmax_t have = std::filesystem::file_size(path);
  check(have == want, "logprob file '", path, "': ", have, " bytes, expected ", want, " for ", h_.rows, " rows of ",
        h_.row_tokens, " tokens and vocab ", h_.vocab);
  tokens_.resize(size_t(h_.rows) * size_t(h_.row_tokens));
  f_.read(reinterpret_cast<char*>(tokens_.data()), std::streamsize(tokens_.size() * 4));
  check(f_.good(), "logprob file '", path, "': cannot read its tokens");
}

void LogprobReader::read_row(int row, std::vector<float>& out) {
  check(row >= 0 && row < h_.rows, "logprob file '", path_, "': row ", row, " of ", h_.rows);
  out.resize(h_.row_floats());
  const std::streamoff at = std::streamoff(kHeaderBytes + tokens_.size() * 4 + size_t(row) * h_.row_floats() * 4);
  f_.seekg(at);
  f_.read(reinterpret_cast<char*>(out.data()), std::streamsize(out.size() * 4));
  check(f_.good(), "logprob file '", path_, "': cannot read row ", row);
}

RefStore::RefStore(const LogprobHeader& h, const std::vector<int32_t>& tokens, size_t memory_limit) : h_(h) {
  if (size_t(h.rows) * h.row_floats() * 4 <= memory_limit) {
    rows_.resize(size_t(h.rows));
    return;
  }
  tmp_ = (std::filesystem::temp_directory_path() / ("tandem_eval_ref_" + std::to_string(::getpid()) + ".tlp")).string();
  writer_ = std::make_unique<LogprobWriter>(tmp_, h, tokens);
}

RefStore::~RefStore() {
  reader_.reset();
  writer_.reset();
  if (!tmp_.empty()) {
    std::error_code ec;
    std::filesystem::remove(tmp_, ec);
  }
}

void RefStore::put(int row, const float* logprobs) {
  if (writer_) return writer_->write_row(logprobs);
  rows_[size_t(row)].assign(logprobs, logprobs + h_.row_floats());
}

const float* RefStore::get(int row) {
  if (tmp_.empty()) return rows_[size_t(row)].data();
  if (writer_) {
    writer_->close();
    writer_.reset();
    reader_ = std::make_unique<LogprobReader>(tmp_);
  }
  reader_->read_row(row, buf_);
  return buf_.data();
}

void EvalStats::add(const float* model, const float* ref, int vocab, const int32_t* next, int count) {
  const size_t V = size_t(vocab);
  for (int i = 0; i < count; ++i) nll_model -= double(model[size_t(i) * V + size_t(next[i])]);
  positions += count;
  if (!ref) return;
  has_ref = true;
  std::vector<double> kls(static_cast<size_t>(count));
  std::vector<char> same(static_cast<size_t>(count));
  parallel_for(count, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float *m = model + size_t(i) * V, *r = ref + size_t(i) * V;
      double k = 0;
      for (size_t v = 0; v < V; ++v) {
        const double lr = r[v];
        k += std::exp(lr) * (lr - double(m[v]));
      }
      kls[size_t(i)] = k;
      same[size_t(i)] = argmax(m, vocab) == argmax(r, vocab);
    }
  });
  for (int i = 0; i < count; ++i) {
    nll_ref -= double(ref[size_t(i) * V + size_t(next[i])]);
    kl += kls[size_t(i)];
    kl_sq += kls[size_t(i)] * kls[size_t(i)];
    kl_max = std::max(kl_max, kls[size_t(i)]);
    top1_same += same[size_t(i)];
  }
}

double EvalStats::perplexity() const { return std::exp(nll_model / double(positions)); }
double EvalStats::ref_perplexity() const { return std::exp(nll_ref / double(positions)); }
double EvalStats::mean_kl() const { return kl / double(positions); }
double EvalStats::kl_stderr() const {
  if (positions < 2) return 0;
  const double n = double(positions), mean = kl / n;
  return std::sqrt(std::max(0.0, (kl_sq / n - mean * mean) / (n - 1)));
}
double EvalStats::top1() const { return double(top1_same) / double(positions); }

}  // namespace tandem::cli
