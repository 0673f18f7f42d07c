//===- ListFlags.cpp - Megatron's space-separated list flags -----*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "compiler/Support/ListFlags.h"

#include <cctype>

using namespace loom;

bool loom::isDecimal(const std::string &word) {
  if (word.empty())
    return false;
  for (char c : word)
    if (!std::isdigit(static_cast<unsigned char>(c)))
      return false;
  return true;
}

std::vector<const char *>
loom::joinListFlags(int argc, char **argv, const std::vector<ListFlag> &flags,
                    std::vector<std::string> &storage) {
  storage.clear();
  storage.reserve(argc);
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    const ListFlag *flag = nullptr;
    std::string value;
    for (const ListFlag &f : flags) {
      for (const std::string &dashes : {"-", "--"}) {
        std::string spelled = dashes + f.name;
        if (arg == spelled) {
          flag = &f;
        } else if (arg.rfind(spelled + "=", 0) == 0) {
          flag = &f;
          value = arg.substr(spelled.size() + 1);
        }
      }
      if (flag)
        break;
    }
    // Only `--flag v1 v2 ...` needs joining; `--flag=v1` may still be
    // followed by more values.
    if (flag) {
      bool joined = !value.empty();
      while (i + 1 < argc && flag->isValue(argv[i + 1])) {
        value += (joined ? "," : "") + std::string(argv[++i]);
        joined = true;
      }
      if (joined) {
        storage.push_back("--" + flag->name + "=" + value);
        continue;
      }
    }
    storage.push_back(arg);
  }
  std::vector<const char *> out;
  for (const std::string &s : storage)
    out.push_back(s.c_str());
  return out;
}
