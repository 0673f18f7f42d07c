//===- Main.cpp - The main() of libloomrt_main ----------------------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Kept apart from Program.cpp so that the unit tests link the rank program's logic
// without this main().
//
//===----------------------------------------------------------------------===//

#include "runtime/rank/Program.h"

int main(int argc, char **argv) { return loom::rank::rankMain(argc, argv); }
