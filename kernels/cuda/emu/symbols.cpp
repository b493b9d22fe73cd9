// What the emulation learns about a kernel from the running executable's ELF symbol table
// (/proc/self/exe's .symtab; see symbols.h): the kernel's own name as the compiler spelled it
// (for the launch ledger) and its function-local statics, which are its static `__shared__`
// variables (cuda_emu.h makes `__shared__` a C++ static; a kernel has no other function-local
// statics, since CUDA allows none in device code), so that each block's can be poisoned.
// GCC ignores a section attribute on a static of a template function, so the statics cannot be
// gathered in one linker section; their symbols name them instead: a function-local static
// of function _Z<encoding> is the object _ZZ<encoding>E<name>.
#include "kernels/cuda/emu/symbols.h"
#include <cxxabi.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <map>
#include <mutex>

namespace emu {
namespace {

struct symbol_table {
    bool loaded = false;
    uintptr_t bias = 0;  // load address of the executable (position-independent) or 0
    std::multimap<uintptr_t, const char *> functions;  // address -> mangled name
    struct object {
        const char *name;
        uintptr_t address;
        size_t size;
    };
    std::vector<object> locals;  // the _ZZ...E... objects: function-local statics
    std::map<const void *, kernel_symbols> kernels;
};

int main_program_bias(struct dl_phdr_info *info, size_t, void *data) {
    *(uintptr_t *)data = (uintptr_t)info->dlpi_addr;
    return 1;  // the first object is the main program
}

symbol_table &table() {
    static symbol_table t;
    static std::once_flag once;
    std::call_once(once, [] {
        int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
        if (fd < 0) return;
        struct stat st;
        void *map = fstat(fd, &st) == 0 ? mmap(nullptr, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
        close(fd);
        if (map == MAP_FAILED || (size_t)st.st_size < sizeof(Elf64_Ehdr)) return;
        // The mapping stays for the process: names point into it.
        const unsigned char *base = (const unsigned char *)map;
        const Elf64_Ehdr *eh = (const Elf64_Ehdr *)base;
        if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
            eh->e_shoff == 0 || eh->e_shoff + (size_t)eh->e_shnum * sizeof(Elf64_Shdr) > (size_t)st.st_size)
            return;
        const Elf64_Shdr *sh = (const Elf64_Shdr *)(base + eh->e_shoff);
        for (int s = 0; s < eh->e_shnum; s++) {
            if (sh[s].sh_type != SHT_SYMTAB || sh[s].sh_link >= eh->e_shnum) continue;
            const Elf64_Sym *sym = (const Elf64_Sym *)(base + sh[s].sh_offset);
            const char *names = (const char *)(base + sh[sh[s].sh_link].sh_offset);
            size_t n = sh[s].sh_size / sizeof(Elf64_Sym);
            for (size_t i = 0; i < n; i++) {
                if (sym[i].st_shndx == SHN_UNDEF || sym[i].st_name == 0) continue;
                const char *name = names + sym[i].st_name;
                int type = ELF64_ST_TYPE(sym[i].st_info);
                if (type == STT_FUNC)
                    t.functions.emplace((uintptr_t)sym[i].st_value, name);
                else if (type == STT_OBJECT && strncmp(name, "_ZZ", 3) == 0)
                    t.locals.push_back({name, (uintptr_t)sym[i].st_value, (size_t)sym[i].st_size});
            }
            t.loaded = !t.functions.empty();
        }
        if (eh->e_type == ET_DYN) dl_iterate_phdr(main_program_bias, &t.bias);
    });
    return t;
}

}  // namespace

const kernel_symbols &symbols_of(const void *kernel) {
    symbol_table &t = table();
    auto it = t.kernels.find(kernel);
    if (it != t.kernels.end()) return it->second;
    kernel_symbols &k = t.kernels[kernel];
    k.known = t.loaded;
    auto range = t.functions.equal_range((uintptr_t)kernel - t.bias);
    for (auto f = range.first; f != range.second; ++f) {
        const char *mangled = f->second;
        int status = 0;
        char *readable = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
        k.names.push_back(status == 0 && readable ? readable : mangled);
        free(readable);
        if (strncmp(mangled, "_Z", 2) != 0) continue;
        // _ZZ<encoding>E: the statics of this function (its encoding is self-delimiting).
        std::string prefix = std::string("_ZZ") + (mangled + 2) + "E";
        for (const symbol_table::object &o : t.locals)
            if (strncmp(o.name, prefix.c_str(), prefix.size()) == 0 && o.size > 0)
                k.statics.push_back({(void *)(o.address + t.bias), o.size});
    }
    return k;
}

}  // namespace emu
