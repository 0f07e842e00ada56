// The device queue a thread's work goes to. A backend with concurrent lanes (Backend::fork, lane,
// join) sets it; every module that queues device work reads it, so work issued between lane(i) and
// the next switch lands on lane i whichever plugin issues it. It lives in the core library because
// the modules are separate shared objects: one thread-local for all of them.
// Owner: the thread. Thread: each thread has its own. Sync: none (a plain value).
#pragma once

namespace tandem {

struct DeviceQueue {
  void* native = nullptr;  // the backend's native queue (CUDA: a cudaStream_t); null = the thread's default
  int lane = 0;            // 0 = the main lane; modules with per-call scratch keep one set per lane
};

// The calling thread's current queue.
DeviceQueue& current_device_queue();

// The most lanes a backend opens at once (per-lane scratch is sized by it).
constexpr int kMaxLanes = 4;

}  // namespace tandem
