// Which of `bulwark`'s subcommands a command line builds in full.
//
// Adding a subcommand's options and flags to CLI11 is most of the work of a short command
// (each add_option compares the new names with every earlier option's). cli::Main builds
// in full only the subcommand the command line names; every other one is added
// by name and description alone: what `bulwark --help` lists and what a mistyped name is
// matched against, never parsed. `bulwark` has no options of its own but the flags
// --help and --version, so the subcommand the parse picks is the first word that is not
// an option (`bulwark --help get` prints get's help), and none after a `--`; when that
// word is not a subcommand's name (a typo) or there is none, no subcommand is parsed
// and the usage error or the help is what it would be with every subcommand built.
//
// Value type; thread-compatible.
#pragma once

#include <string>
#include <string_view>

namespace bulwark::cli {

class CommandFilter {
 public:
  CommandFilter() = default;  // every subcommand in full (what tests of one command use)

  // Only the subcommand the command line names: its first word (after argv[0]) that
  // does not start with '-', if no `--` comes before it; else none.
  static CommandFilter FromArgv(int argc, char** argv) {
    CommandFilter f;
    f.all_ = false;
    for (int i = 1; i < argc && argv[i] != nullptr; ++i) {
      const std::string_view word = argv[i];
      if (word == "--") break;
      if (!word.empty() && word[0] == '-') continue;
      f.only_ = word;
      break;
    }
    return f;
  }

  // Whether the top-level subcommand `name` gets its options, flags, nested subcommands
  // and callback; otherwise the caller adds it by name and description alone.
  bool Full(std::string_view name) const { return all_ || name == only_; }

 private:
  bool all_ = true;
  std::string only_;
};

}  // namespace bulwark::cli
