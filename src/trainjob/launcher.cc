#include "trainjob/launcher.h"

#include <set>

namespace bulwark::trainjob {
namespace {

std::string Basename(const std::string& p) {
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

bool IsPython(const std::string& p) {
  const std::string b = Basename(p);
  return b == "python" || b.rfind("python3", 0) == 0;
}

bool IsShell(const std::string& p) {
  const std::string b = Basename(p);
  return b == "sh" || b == "bash" || b == "dash";
}

bool MentionsLauncher(const std::string& s) {
  return s.find("torchrun") != std::string::npos ||
         s.find("torch.distributed.run") != std::string::npos ||
         s.find("torch.distributed.launch") != std::string::npos;
}

// Splits a plain command line (words, '...' and "..." quoting); false when it uses
// anything a shell would interpret (;, &, |, $, redirections, substitutions, escapes).
bool SplitPlain(const std::string& s, std::vector<std::string>* out) {
  std::string word;
  bool in_word = false;
  char quote = 0;
  for (char c : s) {
    if (quote != 0) {
      if (c == quote) {
        quote = 0;
      } else if (quote == '"' && (c == '$' || c == '`' || c == '\\')) {
        return false;
      } else {
        word += c;
      }
      continue;
    }
    if (c == '\'' || c == '"') {
      quote = c;
      in_word = true;
    } else if (c == ' ' || c == '\t') {
      if (in_word) out->push_back(word);
      word.clear();
      in_word = false;
    } else if (std::string(";&|$<>`()\\\n*?~{}").find(c) != std::string::npos) {
      return false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (quote != 0) return false;
  if (in_word) out->push_back(word);
  return true;
}

// Parses the launcher's flags from argv[start] on; the script follows them.
Result<Launch> StripFlags(const std::vector<std::string>& argv, size_t start,
                          const std::string& launcher, const std::string& python) {
  static const std::set<std::string> kBoolFlags = {"--standalone", "--module",    "-m",
                                                   "--no_python",  "--no-python", "--run_path",
                                                   "--run-path",   "--use_env",   "--use-env"};
  Launch l;
  l.launcher = launcher;
  bool module = false, no_python = false;
  size_t i = start;
  while (i < argv.size() && argv[i].size() > 1 && argv[i][0] == '-') {
    const std::string& flag = argv[i];
    const size_t eq = flag.find('=');
    const std::string name = flag.substr(0, eq);
    std::string value;
    if (name == "--") {
      ++i;
      break;
    }
    if (eq != std::string::npos) {
      value = flag.substr(eq + 1);
      l.dropped_flags.push_back(flag);
      ++i;
    } else if (kBoolFlags.contains(name)) {
      l.dropped_flags.push_back(flag);
      ++i;
    } else {
      if (i + 1 >= argv.size()) break;
      value = argv[i + 1];
      l.dropped_flags.push_back(flag + " " + value);
      i += 2;
    }
    if (name == "--module" || name == "-m") module = true;
    if (name == "--no_python" || name == "--no-python") no_python = true;
    if ((name == "--nproc_per_node" || name == "--nproc-per-node") && !value.empty() &&
        value.find_first_not_of("0123456789") == std::string::npos && value.size() < 5) {
      l.nproc_per_node = std::stoi(value);
    }
  }
  if (i >= argv.size()) {
    return InvalidArgument(launcher + " has no training script after its flags");
  }
  if (module) {
    l.argv = {python, "-m", argv[i]};
  } else if (no_python) {
    l.argv = {argv[i]};
  } else {
    l.argv = {python, argv[i]};
  }
  l.program_args = l.argv.size();
  l.argv.insert(l.argv.end(), argv.begin() + static_cast<long>(i) + 1, argv.end());
  return l;
}

Result<Launch> Strip(const std::vector<std::string>& argv, size_t command_size, int depth) {
  if (!argv.empty() && Basename(argv[0]) == "torchrun") {
    return StripFlags(argv, 1, "torchrun", "python");
  }
  if (argv.size() >= 3 && IsPython(argv[0]) && argv[1] == "-m" &&
      (argv[2] == "torch.distributed.run" || argv[2] == "torch.distributed.launch")) {
    return StripFlags(argv, 3, argv[0] + " -m " + argv[2], argv[0]);
  }
  if (depth == 0 && argv.size() == 3 && IsShell(argv[0]) && argv[1] == "-c" &&
      MentionsLauncher(argv[2])) {
    std::vector<std::string> words;
    if (!SplitPlain(argv[2], &words)) {
      return InvalidArgument(
          "runs the launcher inside a shell script that Bulwark cannot take "
          "apart (got \"" +
          argv[2].substr(0, 80) + "\")");
    }
    Result<Launch> inner = Strip(words, words.size(), depth + 1);
    if (inner.ok() && !inner->launcher.empty())
      inner->launcher = argv[0] + " -c " + inner->launcher;
    return inner;
  }
  Launch l;
  l.argv = argv;
  l.program_args = command_size;
  return l;
}

}  // namespace

Result<Launch> StripLauncher(const std::vector<std::string>& command,
                             const std::vector<std::string>& args) {
  std::vector<std::string> argv = command;
  argv.insert(argv.end(), args.begin(), args.end());
  return Strip(argv, command.size(), 0);
}

}  // namespace bulwark::trainjob
