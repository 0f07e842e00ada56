#include "tandem/device_queue.h"

namespace tandem {

DeviceQueue& current_device_queue() {
  thread_local DeviceQueue q;
  return q;
}

}  // namespace tandem
