//===- Main.cpp - The main() of libloomrt_main ----------------------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Kept apart from Driver.cpp so that the unit tests link the driver's logic
// without this main().
//
//===----------------------------------------------------------------------===//

#include "runtime/driver/Driver.h"

int main(int argc, char **argv) { return loom::driver::driverMain(argc, argv); }
