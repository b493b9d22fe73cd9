// Prints the SHA-256 of each file argument (engine/sha256.c), one hex digest per line, and of
// the same bytes fed in pieces of 1, 7, 64 and 1000 bytes, for tests/test_sha256.py.
#include <stdio.h>
#include <stdlib.h>
#include "engine/sha256.h"

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        char hex[65];
        if (sha256_file(argv[i], hex) != 0) {
            fprintf(stderr, "cannot read %s\n", argv[i]);
            return 1;
        }
        printf("%s", hex);
        FILE *fp = fopen(argv[i], "rb");
        fseek(fp, 0, SEEK_END);
        long n = ftell(fp);
        rewind(fp);
        unsigned char *data = malloc(n ? n : 1);
        if (fread(data, 1, n, fp) != (size_t)n) return 1;
        fclose(fp);
        static const long pieces[] = {1, 7, 64, 1000};
        for (int k = 0; k < 4; k++) {
            sha256_ctx c;
            sha256_init(&c);
            for (long at = 0; at < n; at += pieces[k]) sha256_update(&c, data + at, at + pieces[k] <= n ? pieces[k] : n - at);
            sha256_final_hex(&c, hex);
            printf(" %s", hex);
        }
        printf("\n");
        free(data);
    }
    return 0;
}
