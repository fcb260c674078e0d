#include "agent/python_command.h"

#include <regex>
#include <set>

namespace bulwark {

std::optional<PythonCommand> ParsePythonCommand(const std::vector<std::string>& argv) {
  if (argv.empty()) return std::nullopt;
  const std::string& exe = argv[0];
  const std::string base = exe.substr(exe.rfind('/') == std::string::npos ? 0 : exe.rfind('/') + 1);
  static const std::regex kPython("python([0-9]+(\\.[0-9]+)?)?");
  if (!std::regex_match(base, kPython)) return std::nullopt;
  // Options without an argument, and those that take one (CPython 3.x).
  static const std::set<std::string> kFlags = {"-u", "-O", "-OO", "-B", "-E", "-s", "-S",
                                               "-I", "-b", "-bb", "-q", "-v", "-d", "-R"};
  static const std::set<std::string> kWithArg = {"-X", "-W"};
  PythonCommand c;
  c.interpreter = exe;
  size_t i = 1;
  for (; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "-m") {
      if (i + 1 >= argv.size()) return std::nullopt;
      c.module = argv[i + 1];
      i += 2;
      break;
    }
    if (kFlags.count(a)) {
      c.options.push_back(a);
    } else if (kWithArg.count(a)) {
      if (i + 1 >= argv.size()) return std::nullopt;
      c.options.push_back(a);
      c.options.push_back(argv[++i]);
    } else if (!a.empty() && a[0] == '-') {
      return std::nullopt;  // -c CODE, -, or an option we do not know
    } else {
      c.script = a;
      ++i;
      break;
    }
  }
  if (c.script.empty() && c.module.empty()) return std::nullopt;
  c.args.assign(argv.begin() + static_cast<long>(i), argv.end());
  return c;
}

std::vector<std::string> PythonModuleArgv(const PythonCommand& cmd, const std::string& module) {
  std::vector<std::string> out = {cmd.interpreter};
  out.insert(out.end(), cmd.options.begin(), cmd.options.end());
  out.push_back("-m");
  out.push_back(module);
  return out;
}

}  // namespace bulwark
