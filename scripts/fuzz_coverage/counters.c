/* Coverage counting without libFuzzer, for scripts/fuzz_coverage/measure.py: the hooks an
 * object built with Zig's -ffuzz calls (comparisons ignored), and at exit the PCs whose
 * 8-bit counter is set, written to $ZIGCORN_COVERAGE_OUT as "0xPC 1" lines, and the
 * others as "0xPC 0" (the instrumented code, hit or not). With
 * -DREPLAY_MAIN it is also a main() that runs a libFuzzer target's entry point once on
 * each file of the directories named on its command line. Link with -no-pie, so that the
 * PCs are the executable's own addresses. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern uint8_t __start___sancov_cntrs[], __stop___sancov_cntrs[];
extern uintptr_t __start___sancov_pcs1[];
__thread uintptr_t __sancov_lowest_stack;

void __sanitizer_cov_trace_cmp1(uint8_t a, uint8_t b) { (void)a; (void)b; }
void __sanitizer_cov_trace_cmp2(uint16_t a, uint16_t b) { (void)a; (void)b; }
void __sanitizer_cov_trace_cmp4(uint32_t a, uint32_t b) { (void)a; (void)b; }
void __sanitizer_cov_trace_cmp8(uint64_t a, uint64_t b) { (void)a; (void)b; }
void __sanitizer_cov_trace_const_cmp1(uint8_t a, uint8_t b) { (void)a; (void)b; }
void __sanitizer_cov_trace_const_cmp2(uint16_t a, uint16_t b) { (void)a; (void)b; }
void __sanitizer_cov_trace_const_cmp4(uint32_t a, uint32_t b) { (void)a; (void)b; }
void __sanitizer_cov_trace_const_cmp8(uint64_t a, uint64_t b) { (void)a; (void)b; }
void __sanitizer_cov_trace_switch(uint64_t v, uint64_t *cases) { (void)v; (void)cases; }
void __sanitizer_cov_8bit_counters_init(uint8_t *a, uint8_t *b) { (void)a; (void)b; }
void __sanitizer_cov_pcs_init(const uintptr_t *a, const uintptr_t *b) { (void)a; (void)b; }

__attribute__((destructor)) static void dump(void) {
    const char *path = getenv("ZIGCORN_COVERAGE_OUT");
    if (!path) return;
    FILE *f = fopen(path, "w");
    if (!f) return;
    size_t n = (size_t)(__stop___sancov_cntrs - __start___sancov_cntrs);
    for (size_t i = 0; i < n; i++)
        fprintf(f, "0x%lx %d\n", (unsigned long)__start___sancov_pcs1[i], __start___sancov_cntrs[i] != 0);
    fclose(f);
}

#ifdef REPLAY_MAIN
int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

static void run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return;
    static uint8_t buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    LLVMFuzzerTestOneInput(buf, n);
}

int main(int argc, char **argv) {
    LLVMFuzzerInitialize(&argc, &argv);
    for (int i = 1; i < argc; i++) {
        DIR *d = opendir(argv[i]);
        if (!d) { run_file(argv[i]); continue; }
        struct dirent *e;
        char path[4096];
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.') continue;
            snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
            run_file(path);
        }
        closedir(d);
    }
    return 0;
}
#endif
