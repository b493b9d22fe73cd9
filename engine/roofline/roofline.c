// The roofline model of a training step (see roofline.h): the step recorded (record.c), each
// op costed in launches (cost.c), each launch timed against the GPU's peaks, and the report.
#include "engine/roofline.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "engine/roofline/roofline_parts.h"
#include "kernels/common/check.h"

roofline_options roofline_defaults(void) {
    return (roofline_options){.gemm_eff = 0.70, .dram_eff = 0.80, .sync_us = 10.0, .baseline = 0, .act_size = 2};
}

static void time_launch(roofline_launch *l, const gpu_spec *gpu, const roofline_options *o) {
    double t_flops = l->flops / (gpu->tflops * 1e12 * o->gemm_eff);
    double t_bytes = l->bytes / (gpu->dram_gbs * 1e9 * o->dram_eff);
    double t_instr = l->instructions / ((double)gpu->sms * INSTR_PER_SM_CLOCK * gpu->clock_mhz * 1e6);
    double t_host = l->host_syncs * o->sync_us * 1e-6;
    l->time_s = fmax(fmax(t_flops, t_bytes), fmax(t_instr, t_host));
    l->bound = t_host > 0 ? BOUND_HOST : l->time_s == t_flops && t_flops > 0 ? BOUND_COMPUTE
             : l->time_s == t_instr && t_instr > 0 ? BOUND_INSTRUCTIONS : BOUND_MEMORY;
}

// What the unpadded costing needs: per record, which arguments count tokens (they grow with
// T), the real-token fraction and the length distribution.
typedef struct {
    const unsigned char *token_args;  // per record, bit k: argument k counts tokens
    double fraction;                  // mean length / T
    const roofline_lengths *h;
    int B;
} unpad_ctx;

// Attention over each sequence's own length: the launches of one sequence of length L,
// weighted by the micro-batch's expected count of such sequences (B x share of L), summed
// into one launch per kernel (a varlen kernel is one launch over the whole micro-batch).
static void cost_attention_unpadded(cost_ctx *c, const unpad_ctx *u) {
    roofline_result *r = c->r;
    int before = r->n_launches;
    for (int L = 1; L <= u->h->T; L++) {
        if (!u->h->count[L]) continue;
        c->n[0] = 1, c->n[1] = L;
        c->weight = (double)u->B * (double)u->h->count[L] / (double)u->h->rows;
        roofline_cost(c);
    }
    int kept = before;
    for (int i = before; i < r->n_launches; i++) {
        int k = before;
        while (k < kept && strcmp(r->launches[k].kernel, r->launches[i].kernel)) k++;
        if (k == kept) {
            r->launches[kept++] = r->launches[i];
            snprintf(r->launches[k].shape, sizeof r->launches[k].shape, "B=%d T<=%d C=%ld NH=%ld", u->B, u->h->T,
                     c->rec->n[2], c->rec->n[3]);
            continue;
        }
        r->launches[k].flops += r->launches[i].flops;
        r->launches[k].bytes += r->launches[i].bytes;
        r->launches[k].instructions += r->launches[i].instructions;
        r->launches[k].host_syncs += r->launches[i].host_syncs;
    }
    r->n_launches = kept;
}

// Costs the recorded step: the micro-batch (forward, backward and their transfers), then the
// optimizer step. With u, as the unpadded micro-batch (see roofline_run_unpadded).
static void cost_records(roofline_result *r, const record *list, int n, const unpad_ctx *u) {
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) r->n_micro = r->n_launches;
        for (int i = 0; i < n; i++) {
            const record *x = &list[i];
            // An upload belongs to the op after it (the forward's inputs), a download to the op
            // before it (the forward's losses).
            int phase = roofline_op_phase(x->op), step = x->op == R_download ? -1 : 1;
            for (int k = i; phase < 0 && k >= 0 && k < n; k += step) phase = roofline_op_phase(list[k].op);
            if (phase < 0) phase = ROOF_OPTIMIZER;
            if ((pass == 0) != (phase != ROOF_OPTIMIZER)) continue;
            cost_ctx c = {.r = r, .rec = x, .weight = 1.0, .A = (double)r->opt.act_size,
                          .baseline = r->opt.baseline, .bias_grad_epilogue = r->opt.bias_grad_epilogue, .clusters = r->gpu->clusters, .phase = phase};
            for (int k = 0; k < 6; k++)
                c.n[k] = (double)x->n[k] * (u && (u->token_args[i] >> k & 1) ? u->fraction : 1.0);
            int before = r->n_launches;
            if (u && (x->op == R_attention_forward || x->op == R_attention_backward)) cost_attention_unpadded(&c, u);
            else roofline_cost(&c);
            for (int k = before; k < r->n_launches; k++) {
                r->launches[k].op = roofline_op_name(x->op);
                time_launch(&r->launches[k], r->gpu, &r->opt);
            }
        }
    }
}

static void result_init(roofline_result *r, int B, int T, int P, int accumulation, const gpu_spec *gpu,
                        roofline_options opt) {
    memset(r, 0, sizeof *r);
    r->gpu = gpu;
    r->opt = opt;
    r->B = B, r->T = T, r->P = P, r->R = B * P;
    r->accumulation = accumulation;
    r->layout = "padded";
}

void roofline_run(roofline_result *r, const bert_config *cfg, int B, int T, int P, int accumulation,
                  const gpu_spec *gpu, roofline_options opt) {
    result_init(r, B, T, P, accumulation, gpu, opt);
    int n;
    record *list = roofline_record_step(cfg, B, T, P, opt, &n);
    cost_records(r, list, n, NULL);
    free(list);
    r->model_flops = model_flops(cfg, B, T, (long)B * P);
    r->real_tokens = (double)B * T;
    r->real_model_flops = r->model_flops;
}

double roofline_lengths_mean(const roofline_lengths *h, int power) {
    double sum = 0.0;
    for (int L = 0; L <= h->T; L++) sum += (double)h->count[L] * (power == 2 ? (double)L * L : (double)L);
    return sum / (double)h->rows;
}

void roofline_run_unpadded(roofline_result *r, const bert_config *cfg, int B, int T, int P, int accumulation,
                           const gpu_spec *gpu, roofline_options opt, const roofline_lengths *h) {
    CHECK(h->T == T && h->rows > 0, "roofline: a length distribution for T = %d with %ld rows, for seq %d", h->T,
          h->rows, T);
    result_init(r, B, T, P, accumulation, gpu, opt);
    r->layout = "unpadded";
    // Which arguments count tokens: those that change when the step is recorded at T + 1
    // (each must scale with T exactly); the rest (masked positions, the pooler's B rows, the
    // weights, the optimizer) do not shrink.
    int n, n1;
    record *list = roofline_record_step(cfg, B, T, P, opt, &n), *grown = roofline_record_step(cfg, B, T + 1, P, opt, &n1);
    CHECK(n == n1, "roofline: %d ops recorded at seq %d, %d at seq %d", n, T, n1, T + 1);
    unsigned char *token_args = xcalloc((size_t)(n > 0 ? n : 1), 1);
    for (int i = 0; i < n; i++) {
        CHECK(list[i].op == grown[i].op, "roofline: op %d differs between seq %d and %d", i, T, T + 1);
        for (int k = 0; k < 6; k++) {
            if (list[i].n[k] == grown[i].n[k]) continue;
            CHECK(list[i].n[k] * (T + 1) == grown[i].n[k] * T,
                  "roofline: argument %d of %s is %ld at seq %d and %ld at seq %d: not a token count", k,
                  roofline_op_name(list[i].op), list[i].n[k], T, grown[i].n[k], T + 1);
            token_args[i] |= (unsigned char)(1u << k);
        }
    }
    double mean = roofline_lengths_mean(h, 1);
    unpad_ctx u = {.token_args = token_args, .fraction = mean / T, .h = h, .B = B};
    cost_records(r, list, n, &u);
    free(token_args), free(list), free(grown);
    r->model_flops = model_flops(cfg, B, T, (long)B * P);
    r->real_tokens = B * mean;
    r->real_model_flops = model_flops_real(cfg, B, B * mean, B * roofline_lengths_mean(h, 2), (long)B * P);
}

void roofline_free(roofline_result *r) {
    free(r->launches);
    memset(r, 0, sizeof *r);
}

roofline_totals roofline_sum(const roofline_result *r, int first, int last) {
    roofline_totals t = {0};
    for (int i = first; i < last; i++) {
        const roofline_launch *l = &r->launches[i];
        t.flops += l->flops;
        t.bytes += l->bytes;
        t.time_s += l->time_s;
        t.host_syncs += l->host_syncs;
        if (l->gemm) {
            t.gemm_flops += l->flops;
            t.gemm_bytes += l->bytes;
            t.gemm_time_s += l->time_s;
        }
        if (!l->host_syncs) t.launches++;
    }
    return t;
}

static const char *phase_name(int phase) {
    return phase == ROOF_FORWARD ? "fwd" : phase == ROOF_BACKWARD ? "bwd" : "opt";
}

static void print_launch(const roofline_launch *l, int count, int tsv, const char *layout, FILE *out) {
    if (tsv) {
        fprintf(out, "%s\t%s\t%s\t%d\t%s\t%.17g\t%.17g\t%.17g\t%d\t%.17g\t%c\t%s\n", phase_name(l->phase), l->op,
                l->kernel, count, l->shape, l->flops, l->bytes, l->instructions, l->host_syncs, l->time_s, l->bound,
                layout);
        return;
    }
    char instr[32] = "-";
    if (l->instructions > 0) snprintf(instr, sizeof instr, "%.3f", l->instructions * 1e-9);
    fprintf(out, "%-4s %-26s %-34s %5d %-30s %11.3f %11.3f %9s %11.1f   %c\n", phase_name(l->phase), l->op,
            l->kernel, count, l->shape, l->flops * 1e-9, l->bytes * 1e-6, instr, l->time_s * 1e6, l->bound);
}

void roofline_print(const roofline_result *r, int by_kernel, int tsv, FILE *out) {
    const gpu_spec *g = r->gpu;
    const roofline_options *o = &r->opt;
    roofline_totals mb = roofline_sum(r, 0, r->n_micro), op = roofline_sum(r, r->n_micro, r->n_launches);
    double step = r->accumulation * mb.time_s + op.time_s;
    double seqs = (double)r->accumulation * r->B;
    double mfu = r->accumulation * r->model_flops / step / (g->tflops * 1e12);
    if (tsv) {
        fprintf(out, "phase\top\tlaunch\tcount\tshape\tflops\tbytes\tinstructions\thost_syncs\ttime_s\tbound\t"
                     "layout\n");
        for (int i = 0; i < r->n_launches; i++) print_launch(&r->launches[i], 1, 1, r->layout, out);
        fprintf(out, "# gpu\t%s\t%.17g\t%.17g\n", g->key, g->tflops * 1e12, g->dram_gbs * 1e9);
        fprintf(out, "# micro_batch\t%d\t%d\t%d\t%d\n", r->B, r->T, r->P, r->accumulation);
        fprintf(out, "# model_flops\t%.17g\n", r->model_flops);
        fprintf(out, "# micro_batch_time_s\t%.17g\n# optimizer_time_s\t%.17g\n# step_time_s\t%.17g\n", mb.time_s,
                op.time_s, step);
        fprintf(out, "# sequences_per_s\t%.17g\n# mfu\t%.17g\n", seqs / step, mfu);
        return;
    }
    fprintf(out, "roofline model: %s (dense FP16 %.1f TFLOP/s, HBM %.0f GB/s, %d SMs at %.0f MHz)\n", g->name,
            g->tflops, g->dram_gbs, g->sms, g->clock_mhz);
    fprintf(out, "efficiencies: GEMMs %.0f%% of the tensor peak, streaming kernels %.0f%% of DRAM bandwidth; "
                 "host round trip %.1f us; kernels: %s\n",
            o->gemm_eff * 100, o->dram_eff * 100, o->sync_us, o->baseline ? "baseline (the unfused kernels the fused ones replaced)" : "current");
    fprintf(out, "micro-batch %d x seq %d, %d masked positions (all %d per sequence), activations %zu bytes\n", r->B,
            r->T, r->R, r->P, o->act_size);
    fprintf(out, "bound: C compute (tensor cores), M memory (DRAM bytes), I instructions, H host round trip\n\n");
    fprintf(out, "%-4s %-26s %-34s %5s %-30s %11s %11s %9s %11s   %s\n", "", "op", "launch", "count", "shape",
            "GFLOP", "MB", "Ginstr", "time (us)", "bound");
    if (!by_kernel) {
        for (int i = 0; i < r->n_launches; i++) print_launch(&r->launches[i], 1, 0, r->layout, out);
    } else {
        // One line per (phase, op, launch, shape), in order of first appearance.
        int *done = xcalloc(r->n_launches, sizeof(int));
        for (int i = 0; i < r->n_launches; i++) {
            if (done[i]) continue;
            roofline_launch sum = r->launches[i];
            int count = 1;
            for (int j = i + 1; j < r->n_launches; j++) {
                const roofline_launch *l = &r->launches[j];
                if (done[j] || l->phase != sum.phase || strcmp(l->op, sum.op) || strcmp(l->kernel, sum.kernel) ||
                    strcmp(l->shape, sum.shape))
                    continue;
                done[j] = 1;
                count++;
                sum.flops += l->flops, sum.bytes += l->bytes, sum.instructions += l->instructions;
                sum.time_s += l->time_s;
            }
            print_launch(&sum, count, 0, r->layout, out);
        }
        free(done);
    }
    fprintf(out, "\nmicro-batch: %d launches, %d host round trips, %.1f GFLOP on tensor cores (model %.1f), %.1f MB "
                 "DRAM (%.1f MB in tensor-core launches, %.1f MB in the rest), %.3f ms (tensor-core launches %.3f ms, "
                 "%.0f%%)\n",
            mb.launches, mb.host_syncs, mb.gemm_flops * 1e-9, r->model_flops * 1e-9, mb.bytes * 1e-6,
            mb.gemm_bytes * 1e-6, (mb.bytes - mb.gemm_bytes) * 1e-6, mb.time_s * 1e3, mb.gemm_time_s * 1e3,
            mb.time_s > 0 ? 100 * mb.gemm_time_s / mb.time_s : 0.0);
    fprintf(out, "optimizer step: %d launches, %d host round trips, %.1f MB DRAM, %.3f ms\n", op.launches,
            op.host_syncs, op.bytes * 1e-6, op.time_s * 1e3);
    fprintf(out, "step (%d accumulated micro-batches + optimizer): %.3f ms predicted, %.1f sequences/s, MFU %.1f%%\n",
            r->accumulation, step * 1e3, seqs / step, 100 * mfu);
}

// Predicted step of r: accumulation micro-batches and the optimizer.
static double step_time(const roofline_result *r) {
    return r->accumulation * roofline_sum(r, 0, r->n_micro).time_s + roofline_sum(r, r->n_micro, r->n_launches).time_s;
}

void roofline_print_gelu_forms(const roofline_result *r, const char *act, const roofline_result *other,
                               const char *other_act, int tsv, FILE *out) {
    const roofline_result *both[2] = {r, other};
    const char *names[2] = {act, other_act};
    if (!tsv) fprintf(out, "\nGELU forms (the exact one on the streaming kernels, the tanh one in the FFN GEMMs' epilogues):\n");
    for (int i = 0; i < 2; i++) {
        const roofline_result *x = both[i];
        roofline_totals mb = roofline_sum(x, 0, x->n_micro);
        double step = step_time(x), seqs = (double)x->accumulation * x->B;
        double mfu = x->accumulation * x->model_flops / step / (x->gpu->tflops * 1e12);
        if (tsv)
            fprintf(out, "# gelu_form\t%s\t%.17g\t%.17g\t%.17g\t%.17g\n", names[i], mb.bytes, step, seqs / step, mfu);
        else
            fprintf(out, "  hidden_act %-18s micro-batch %.1f MB DRAM, step %.3f ms predicted, %.1f sequences/s, MFU %.1f%%\n",
                    names[i], mb.bytes * 1e-6, step * 1e3, seqs / step, 100 * mfu);
    }
}

void roofline_print_unpadded(const roofline_result *p, const roofline_result *u, const roofline_lengths *h, int tsv,
                             FILE *out) {
    double mean = roofline_lengths_mean(h, 1), mean_sq = roofline_lengths_mean(h, 2), T = h->T;
    const double peak = p->gpu->tflops * 1e12;
    const roofline_result *both[2] = {p, u};
    double step[2], seqs = (double)p->accumulation * p->B;
    for (int k = 0; k < 2; k++) step[k] = step_time(both[k]);
    if (tsv) {
        for (int i = 0; i < u->n_launches; i++) print_launch(&u->launches[i], 1, 1, u->layout, out);
        roofline_totals mb = roofline_sum(u, 0, u->n_micro), op = roofline_sum(u, u->n_micro, u->n_launches);
        fprintf(out, "# lengths\t%ld\t%.17g\t%.17g\n", h->rows, mean, mean_sq);
        fprintf(out, "# unpadded_real_tokens\t%.17g\n# unpadded_real_model_flops\t%.17g\n", u->real_tokens,
                u->real_model_flops);
        fprintf(out, "# unpadded_micro_batch_time_s\t%.17g\n# unpadded_optimizer_time_s\t%.17g\n"
                     "# unpadded_step_time_s\t%.17g\n", mb.time_s, op.time_s, step[1]);
        fprintf(out, "# unpadded_sequences_per_s\t%.17g\n# unpadded_real_mfu\t%.17g\n# padded_real_mfu\t%.17g\n",
                seqs / step[1], p->accumulation * u->real_model_flops / step[1] / peak,
                p->accumulation * u->real_model_flops / step[0] / peak);
        return;
    }
    fprintf(out, "\nlengths: %ld rows, mean %.2f of %d (real-token fraction %.4f: token-wise ops scale by it), "
                 "mean square %.1f (attention scales by %.4f)\n",
            h->rows, mean, h->T, mean / T, mean_sq, mean_sq / (T * T));
    fprintf(out, "unpadded micro-batch: %.1f real tokens of %d x %d; the MLM head (%d masked positions), the "
                 "pooler, the transfers and the optimizer do not shrink\n\n",
            u->real_tokens, p->B, p->T, p->R);
    fprintf(out, "%-4s %-36s %12s %12s %7s\n", "", "op", "padded (ms)", "unpadded (ms)", "ratio");
    // Per (phase, op) in order of first appearance; both layouts cost the same ops in the same order.
    for (int i = 0; i < p->n_micro; i++) {
        const roofline_launch *l = &p->launches[i];
        int seen = 0;
        for (int j = 0; j < i && !seen; j++)
            seen = p->launches[j].phase == l->phase && !strcmp(p->launches[j].op, l->op);
        if (seen) continue;
        double t[2] = {0.0, 0.0};
        for (int k = 0; k < 2; k++)
            for (int j = 0; j < both[k]->n_micro; j++)
                if (both[k]->launches[j].phase == l->phase && !strcmp(both[k]->launches[j].op, l->op))
                    t[k] += both[k]->launches[j].time_s;
        fprintf(out, "%-4s %-36s %12.3f %12.3f %7.3f\n", phase_name(l->phase), l->op, t[0] * 1e3, t[1] * 1e3,
                t[0] > 0 ? t[1] / t[0] : 1.0);
    }
    fprintf(out, "\n%-44s %14s %14s\n", "", "padded", "unpadded");
    roofline_totals m[2], o[2];
    for (int k = 0; k < 2; k++) {
        m[k] = roofline_sum(both[k], 0, both[k]->n_micro);
        o[k] = roofline_sum(both[k], both[k]->n_micro, both[k]->n_launches);
    }
    fprintf(out, "%-44s %14.1f %14.1f\n", "tokens computed per micro-batch", (double)p->B * p->T, u->real_tokens);
    fprintf(out, "%-44s %14.1f %14.1f\n", "tensor-core GFLOP per micro-batch", m[0].gemm_flops * 1e-9,
            m[1].gemm_flops * 1e-9);
    fprintf(out, "%-44s %14.1f %14.1f\n", "DRAM MB per micro-batch", m[0].bytes * 1e-6, m[1].bytes * 1e-6);
    fprintf(out, "%-44s %14.3f %14.3f\n", "micro-batch (ms)", m[0].time_s * 1e3, m[1].time_s * 1e3);
    fprintf(out, "%-44s %14.3f %14.3f\n", "optimizer step (ms)", o[0].time_s * 1e3, o[1].time_s * 1e3);
    char label[64];
    snprintf(label, sizeof label, "step of %d micro-batches + optimizer (ms)", p->accumulation);
    fprintf(out, "%-44s %14.3f %14.3f\n", label, step[0] * 1e3, step[1] * 1e3);
    fprintf(out, "%-44s %14.1f %14.1f\n", "sequences/s", seqs / step[0], seqs / step[1]);
    fprintf(out, "%-44s %14.0f %14.0f\n", "real tokens/s", p->accumulation * u->real_tokens / step[0],
            p->accumulation * u->real_tokens / step[1]);
    fprintf(out, "%-44s %13.1f%% %13.1f%%\n", "MFU on real tokens", 100 * p->accumulation * u->real_model_flops / step[0] / peak,
            100 * p->accumulation * u->real_model_flops / step[1] / peak);
    fprintf(out, "unpadded: %.3fx the padded sequences/s predicted (1 / real-token fraction = %.3fx)\n",
            step[0] / step[1], T / mean);
}
