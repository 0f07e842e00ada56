// `tandem generate --trace-drafts FILE.jsonl`: one JSON object per drafted step (docs/adding-a-drafter.md).
// Owner: free function, value in and string out. Thread: any. Sync: none.
#pragma once
#include <cstdint>
#include <string>

#include "tandem/drafting.h"

namespace tandem::cli {

// {"step":…,"committed":…,"proposals":{NAME:[…],…},"chain":NAME|null,"k":…,"accepted":…,
//  "accepted_tokens":[…],"bonus":TOKEN|null} on one line, without the newline.
std::string draft_step_json(int64_t step, const DraftStep& s);

}  // namespace tandem::cli
