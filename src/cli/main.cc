// The `bulwark` executable: everything is in cli::Main (cli_main.h).
#include "cli/cli_main.h"

int main(int argc, char** argv) { return bulwark::cli::Main(argc, argv); }
