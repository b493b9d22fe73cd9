#include "engine/release.h"
#include <stdio.h>

void backend_release(const backend_t *be) {
    if (!be || !be->shutdown) return;
    size_t bytes = 0, live = be->shutdown(&bytes);
    if (live)
        fprintf(stderr, "bertpre: warning: %s: %zu device allocation%s (%zu bytes) still live at shutdown\n",
                be->name, live, live == 1 ? "" : "s", bytes);
}
