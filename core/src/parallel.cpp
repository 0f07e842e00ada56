// The process-wide worker pool behind parallel_for: persistent threads, one job at a time.
#include "tandem/parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace tandem {
namespace {

class Pool {
 public:
  ~Pool() { stop(); }

  void resize(int n) {
    if (n <= 0) n = int(std::max(1u, std::thread::hardware_concurrency()));
    std::lock_guard<std::mutex> run(run_mu_);
    stop();
    size_ = n;
    quit_ = false;
    for (int i = 1; i < n; ++i) workers_.emplace_back([this] { work(); });
  }
  int size() {
    std::call_once(init_, [this] { if (size_ == 0) resize(0); });
    return size_;
  }

  void run(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    if (n <= 0) return;
    int threads = size();
    grain = std::max<int64_t>(grain, 1);
    int64_t chunks = std::min<int64_t>((n + grain - 1) / grain, int64_t(threads) * 4);
    if (threads == 1 || chunks <= 1 || in_job_) {
      fn(0, n);
      return;
    }
    std::lock_guard<std::mutex> run(run_mu_);
    {
      std::lock_guard<std::mutex> lk(mu_);
      fn_ = &fn;
      n_ = n;
      chunks_ = chunks;
      next_.store(0);
      done_ = 0;
      ++generation_;
    }
    cv_.notify_all();
    in_job_ = true;
    drain();
    in_job_ = false;
    std::unique_lock<std::mutex> lk(mu_);
    done_cv_.wait(lk, [this] { return done_ == chunks_; });
    fn_ = nullptr;
  }

 private:
  void drain() {
    for (;;) {
      int64_t c = next_.fetch_add(1);
      if (c >= chunks_) return;
      int64_t b = n_ * c / chunks_, e = n_ * (c + 1) / chunks_;
      (*fn_)(b, e);
      std::lock_guard<std::mutex> lk(mu_);
      if (++done_ == chunks_) done_cv_.notify_all();
    }
  }
  void work() {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return quit_ || (generation_ != seen && fn_); });
        if (quit_) return;
        seen = generation_;
      }
      in_job_ = true;
      drain();
      in_job_ = false;
    }
  }
  void stop() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  std::once_flag init_;
  std::mutex run_mu_, mu_;
  std::condition_variable cv_, done_cv_;
  std::vector<std::thread> workers_;
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, chunks_ = 0, done_ = 0;
  std::atomic<int64_t> next_{0};
  uint64_t generation_ = 0;
  bool quit_ = false;
  int size_ = 0;
  static thread_local bool in_job_;
};
thread_local bool Pool::in_job_ = false;

Pool& pool() {
  static Pool p;
  return p;
}

}  // namespace

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  pool().run(n, grain, fn);
}
void set_thread_count(int n) { pool().resize(n); }
int thread_count() { return pool().size(); }

}  // namespace tandem
