// Key function of tandem::Error, so its type info lives in the core and is shared by every plugin.
#include "tandem/error.h"

namespace tandem {
Error::Error(const std::string& msg) : std::runtime_error(msg) {}
Error::~Error() = default;
}  // namespace tandem
