// The emulation's view of a kernel from the executable's symbol table (symbols.cpp).
#pragma once
#include <stddef.h>
#include <string>
#include <utility>
#include <vector>

namespace emu {

struct kernel_symbols {
    bool known = false;              // the symbol table was read (the executable is not stripped)
    std::vector<std::string> names;  // demangled: one per function symbol at the kernel's address
    // The kernel's function-local statics: its static __shared__ variables (address, bytes).
    std::vector<std::pair<void *, size_t>> statics;
};

// Looked up once per kernel address and kept.
const kernel_symbols &symbols_of(const void *kernel);

}  // namespace emu
