// Per-op time of the CUDA backend. With BERTPRE_PROFILE set, backend_select
// (engine/backend.c) hands the model a copy of the CUDA table whose every op is wrapped: a timer
// mark is put on the stream before and after the op (a CUDA event on a GPU, the host clock
// in the emulation, where ops run synchronously), and the pairs are folded into per-op
// totals every few thousand calls and at the end: the report is written at the backend's
// shutdown (backend_t.shutdown), or at exit when nothing shut it down, or at an error exit
// (fatal, CHECK: check.h's fatal_report) of the thread that runs the ops, with the ops
// timed until then. Events do not stall
// the stream, so the profiled run keeps its speed apart from those occasional folds.
//
// The report (to the file BERTPRE_PROFILE names, or stderr for "1" or "-") lists every op
// with its calls, total and per-call time and share, then the same time grouped by kind:
// GEMMs (the matmul ops: cuBLASLt plus their bias-gradient sums), attention, LayerNorm,
// dropout, GELU/tanh, embeddings, gather, cross-entropy, optimizer, copies. Calls during the
// first BERTPRE_PROFILE_SKIP_STEPS optimizer steps (default 1: cuBLASLt plans and workspaces
// are made then) are left out; "per micro-batch" divides by the embeddings_forward calls
// counted.
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <chrono>
#include <string>
#include <type_traits>
#include <vector>
#include "kernels/cuda/ops.cuh"

namespace CUDA_NS {
namespace {

#ifdef BERTPRE_CUDA_EMULATION
typedef double mark_t;  // host milliseconds
mark_t mark_now() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double mark_ms(mark_t a, mark_t b) { return b - a; }
void mark_release(mark_t) {}
void marks_destroy() {}
#else
typedef cudaEvent_t mark_t;
std::vector<cudaEvent_t> spare_events;
mark_t mark_now() {
    cudaEvent_t e;
    if (spare_events.empty()) {
        if (cudaEventCreate(&e) != cudaSuccess) fatal("BERTPRE_PROFILE: cudaEventCreate failed");
    } else {
        e = spare_events.back();
        spare_events.pop_back();
    }
    cudaEventRecord(e, device_stream());
    return e;
}
double mark_ms(mark_t a, mark_t b) {
    float ms = 0.0f;
    cudaEventSynchronize(b);
    cudaEventElapsedTime(&ms, a, b);
    return ms;
}
void mark_release(mark_t e) { spare_events.push_back(e); }
void marks_destroy() {
    for (cudaEvent_t e : spare_events) cudaEventDestroy(e);
    spare_events.clear();
}
#endif

enum { MAX_OPS = 64 };
struct op_total {
    const char *name;
    long calls;
    double ms;
};
struct record {
    int op;
    mark_t begin, end;
};

op_total totals[MAX_OPS];
int n_ops;
std::vector<record> pending;
backend_t inner, wrapped;
long steps_seen, skip_steps = 1;
FILE *report_file;

void fold() {
    for (const record &r : pending) {
        totals[r.op].calls++;
        totals[r.op].ms += mark_ms(r.begin, r.end);
        mark_release(r.begin);
        mark_release(r.end);
    }
    pending.clear();
}

int op_index(const char *name) {
    for (int i = 0; i < n_ops; i++)
        if (!strcmp(totals[i].name, name)) return i;
    totals[n_ops].name = name;
    return n_ops++;
}

// The group an op belongs to in the summary, by its name in backend_t.
const char *group_of(const char *op) {
    static const char *const groups[][2] = {
        {"matmul", "GEMMs (matmul ops)"}, {"attention", "attention"},  {"layernorm", "LayerNorm"},
        {"dropout", "dropout"},           {"gelu", "GELU / tanh"},     {"tanh", "GELU / tanh"},
        {"embeddings", "embeddings"},     {"gather", "gather"},        {"crossentropy", "cross-entropy"},
        {"lamb", "optimizer"},            {"lars", "optimizer"},       {"adamw", "optimizer"},            {"params_to", "optimizer"},  {"upload", "copies"},
        {"download", "copies"},           {"zero", "copies"},
    };
    for (const auto &g : groups)
        if (strstr(op, g[0])) return g[1];
    return "other";
}

void report() {
    if (!report_file) return;
#ifndef BERTPRE_CUDA_EMULATION
    cudaDeviceSynchronize();
#endif
    fold();
    double total = 0.0;
    long micro = 0;
    for (int i = 0; i < n_ops; i++) {
        total += totals[i].ms;
        if (!strcmp(totals[i].name, "embeddings_forward")) micro = totals[i].calls;
    }
    FILE *f = report_file;
    fprintf(f, "# bertpre op profile: %s, %ld optimizer steps after the first %ld, %ld micro-batches, %.3f ms in ops\n",
            inner.name, std::max(0L, steps_seen - skip_steps), skip_steps, micro, total);
    std::vector<int> order;
    for (int i = 0; i < n_ops; i++)
        if (totals[i].calls) order.push_back(i);
    std::sort(order.begin(), order.end(), [](int a, int b) { return totals[a].ms > totals[b].ms; });
    fprintf(f, "op %-28s %10s %12s %12s %14s %7s\n", "name", "calls", "total_ms", "us_per_call", "ms_per_micro",
            "share");
    for (int i : order)
        fprintf(f, "op %-28s %10ld %12.3f %12.2f %14.4f %6.2f%%\n", totals[i].name, totals[i].calls, totals[i].ms,
                1e3 * totals[i].ms / totals[i].calls, micro ? totals[i].ms / micro : 0.0,
                total > 0 ? 100.0 * totals[i].ms / total : 0.0);
    std::vector<std::pair<std::string, double>> groups;
    for (int i : order) {
        std::string g = group_of(totals[i].name);
        auto it = std::find_if(groups.begin(), groups.end(), [&](const auto &p) { return p.first == g; });
        if (it == groups.end()) groups.push_back({g, totals[i].ms});
        else it->second += totals[i].ms;
    }
    std::sort(groups.begin(), groups.end(), [](const auto &a, const auto &b) { return a.second > b.second; });
    for (const auto &g : groups)
        fprintf(f, "group %-26s %12.3f ms %14.4f ms_per_micro %6.2f%%\n", g.first.c_str(), g.second,
                micro ? g.second / micro : 0.0, total > 0 ? 100.0 * g.second / total : 0.0);
    fflush(f);
    if (f != stderr) fclose(f);
    report_file = nullptr;
}

// An error exit: the report so far, when the failing thread is the one that runs the ops (on
// another thread, such as the loader's, an op may be half-way through the totals).
pthread_t ops_thread;
void report_on_fatal() {
    if (pthread_equal(pthread_self(), ops_thread)) report();
}

// The backend's shutdown: the report is written then (with every op so far), the timer
// marks go, then the inner backend's own shutdown.
size_t shutdown(size_t *live_bytes) {
    report();
    marks_destroy();
    return inner.shutdown(live_bytes);
}

// One wrapper per member of backend_t: the inner op between two marks.
template <auto Member>
struct timed;
template <typename R, typename... Args, R (*backend_t::*Member)(Args...)>
struct timed<Member> {
    static int id;
    static R call(Args... args) {
        if (pending.size() >= 4096) fold();
        bool counted = steps_seen >= skip_steps;
        mark_t begin = counted ? mark_now() : mark_t();
        if constexpr (std::is_void_v<R>) {
            (inner.*Member)(args...);
            if (counted) pending.push_back({id, begin, mark_now()});
        } else {
            R r = (inner.*Member)(args...);
            if (counted) pending.push_back({id, begin, mark_now()});
            return r;
        }
    }
};
template <typename R, typename... Args, R (*backend_t::*Member)(Args...)>
int timed<Member>::id;

// An optimizer step also counts the steps, for BERTPRE_PROFILE_SKIP_STEPS.
template <auto Member>
struct counted;
template <typename R, typename... Args, R (*backend_t::*Member)(Args...)>
struct counted<Member> {
    static R call(Args... args) {
        R r = timed<Member>::call(args...);
        steps_seen++;
        return r;
    }
};

template <auto Member>
void wrap(const char *name) {
    if (!(inner.*Member)) return;
    timed<Member>::id = op_index(name);
    wrapped.*Member = timed<Member>::call;
}

}  // namespace
}  // namespace CUDA_NS

#ifdef BERTPRE_CUDA_EMULATION
#define PROFILE_WRAP cuda_emu_profile_wrap
#else
#define PROFILE_WRAP cuda_profile_wrap
#endif

extern "C" const backend_t *PROFILE_WRAP(const backend_t *be, const char *destination) {
    using namespace CUDA_NS;
    if (report_file) fatal("BERTPRE_PROFILE: only one backend can be profiled per process");
    report_file = (!strcmp(destination, "1") || !strcmp(destination, "-")) ? stderr : fopen(destination, "w");
    if (!report_file) fatal("BERTPRE_PROFILE=%s: cannot open the file for writing: %s", destination, strerror(errno));
    const char *skip = getenv("BERTPRE_PROFILE_SKIP_STEPS");
    if (skip) {
        char *end;
        skip_steps = strtol(skip, &end, 10);
        if (*end || end == skip || skip_steps < 0)
            fatal("BERTPRE_PROFILE_SKIP_STEPS='%s' is not a count of steps (0 or more)", skip);
    }
    inner = wrapped = *be;
    // Every op of the table timed: BACKEND_OPS lists them all (kernels/backend.h holds the list
    // to backend_t at compile time).
#define WRAP(member) wrap<&backend_t::member>(#member);
    BACKEND_OPS(WRAP)
#undef WRAP
    wrapped.lamb_step = counted<&backend_t::lamb_step>::call;
    wrapped.lars_step = counted<&backend_t::lars_step>::call;
    wrapped.adamw_step = counted<&backend_t::adamw_step>::call;
    wrapped.stableadamw_step = counted<&backend_t::stableadamw_step>::call;
    if (inner.shutdown) wrapped.shutdown = shutdown;
    atexit(report);
    ops_thread = pthread_self();
    fatal_report = report_on_fatal;
    return &wrapped;
}
