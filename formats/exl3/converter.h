// The EXL3 converter (tandem/converter.h): `tandem convert --to exl3` from a BF16 HF folder into an
// EXL3 pack, resumable from OUTPUT.partial, byte-for-byte the same for the same settings.
// Owner: stateless. Thread: one caller per convert (quantize_linear fans out over the worker pool).
// Sync: the output folder is complete when convert() returns.
#pragma once
#include "tandem/converter.h"

namespace tandem::exl3 {

class Exl3Converter final : public Converter {
 public:
  std::vector<ConverterOption> options() const override;
  void validate(const ConvertRequest& request) const override;
  void convert(const ConvertRequest& request, ConvertHost& host) const override;
};

}  // namespace tandem::exl3
