// Calibration for `tandem convert` (ConvertHost::calibrate): runs the BF16 model on the CPU over a text and collects each
// linear's input Hessian XᵀX / rows. A format registered in-process (PluginRegistry::add_format)
// claims the linears with a higher score than the format that stores them and wraps the loaded
// weight, so that every matmul also accumulates its rows; routed experts see the rows routed to them.
// Owner: the Hessians are returned by value. Thread: one caller. Sync: none (CPU only).
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tandem/converter.h"

namespace tandem::cli {

using CalibrationResult = Calibration;  // tandem/converter.h: what a converter asks its host for

// Tokenizes `text` with the checkpoint's tokenizer (tokenizer.json + tokenizer_config.json beside
// it), keeps the first `max_tokens`, runs them as sequences of at most `sequence_tokens` and returns
// the Hessians of the linears named in `linears`. `threads` as LoadOptions::threads (-1 keeps the
// current pool). Errors: no tokenizer, empty text.
CalibrationResult calibrate(const std::string& model_dir, const std::string& text, const std::set<std::string>& linears,
                            int64_t max_tokens, int64_t sequence_tokens, int threads);

}  // namespace tandem::cli
