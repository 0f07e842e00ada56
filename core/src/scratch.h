// Growable scratch memory on a backend, reused across forwards.
#pragma once
#include <memory>

#include "tandem/backend.h"

namespace tandem {

class Scratch {
 public:
  // A [rows, cols] f32 tensor in this scratch slot, grown when needed (contents undefined).
  Tensor f32(Backend& be, int64_t rows, int64_t cols) {
    size_t bytes = size_t(rows * cols) * sizeof(float);
    if (!buf_ || buf_->bytes() < bytes) buf_ = be.alloc(std::max<size_t>(bytes, 64));
    return Tensor::f32(static_cast<float*>(buf_->data()), rows, cols);
  }

 private:
  std::unique_ptr<Buffer> buf_;
};

}  // namespace tandem
