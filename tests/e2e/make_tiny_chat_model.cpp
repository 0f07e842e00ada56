// tandem-make-tiny-chat-model DIR TEMPLATE.jinja: writes the tiny chat model and DIR.yaml (the e2e
// test's first step; also handy for trying `tandem serve` by hand).
#include <cstdio>
#include <exception>

#include "tiny_chat_model.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s DIR CHAT_TEMPLATE.jinja\n", argv[0]);
    return 2;
  }
  try {
    auto m = tandem::test::write_tiny_chat_model(argv[1], argv[2]);
    std::printf("%s\n", m.profile.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
