// Pointwise ops, each forward and backward (activation gradients are written, =).
//   gelu:    GELU_ERF: out = 0.5 x (1 + erf(x / sqrt 2)); saves its input.
//            dinp = dout * (Phi(x) + x phi(x)), Phi/phi the standard normal cdf/pdf.
//            GELU_TANH: out = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3);
//            dinp = dout * (0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 0.044715 x^2)), t = tanh(u).
//   tanh:    out = tanh(x); saves its output.  dinp = dout * (1 - out^2).
//   geglu:   out[n,i] = gelu(x[n,i]) * x[n,I+i] over x[N,2I] (input half, gate half); saves x.
//            dinp[n,i] = dout * gate * gelu'(x), dinp[n,I+i] = dout * gelu(x).
//   dropout: out = inp * keep / (1 - p) (+ residual); keep drawn from the counter-based
//            generator, element index = position in the flat tensor (one Philox call per
//            eight elements); saves nothing.
//            dinp = dout * keep / (1 - p).
#include "kernels/backend.h"
#include "kernels/cpu/real.h"

#define SQRT_2_OVER_PI 0.79788456080286535588  // sqrt(2/pi)

void CPU_OP(gelu_forward)(void *out_, const void *inp_, int n, gelu_kind act) {
    real *out = out_;
    const real *inp = inp_;
    for (int i = 0; i < n; i++) {
        double x = inp[i];
        if (act == GELU_TANH) out[i] = (real)(0.5 * x * (1.0 + tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x))));
        else out[i] = (real)(0.5 * x * (1.0 + erf(x * M_SQRT1_2)));
    }
}

void CPU_OP(gelu_backward)(void *dinp_, const void *dout_, const void *inp_, int n, gelu_kind act) {
    real *dinp = dinp_;
    const real *dout = dout_, *inp = inp_;
    for (int i = 0; i < n; i++) {
        double x = inp[i];
        if (act == GELU_TANH) {
            double t = tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x));
            double du = SQRT_2_OVER_PI * (1.0 + 3.0 * 0.044715 * x * x);
            dinp[i] = (real)(dout[i] * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du));
            continue;
        }
        double cdf = 0.5 * (1.0 + erf(x * M_SQRT1_2));
        double pdf = exp(-0.5 * x * x) * (0.5 * M_2_SQRTPI * M_SQRT1_2);
        dinp[i] = (real)(dout[i] * (cdf + x * pdf));
    }
}

void CPU_OP(geglu_forward)(void *out_, const void *inp_, int N, int I, gelu_kind act) {
    real *out = out_;
    const real *inp = inp_;
    for (int n = 0; n < N; n++) {
        const real *x = inp + (size_t)n * 2 * I, *gate = x + I;
        real *o = out + (size_t)n * I;
        CPU_OP(gelu_forward)(o, x, I, act);
        for (int i = 0; i < I; i++) o[i] = (real)((double)o[i] * gate[i]);
    }
}

void CPU_OP(geglu_backward)(void *dinp_, const void *dout_, const void *inp_, int N, int I, gelu_kind act) {
    real *dinp = dinp_;
    const real *dout = dout_, *inp = inp_;
    for (int n = 0; n < N; n++) {
        const real *x = inp + (size_t)n * 2 * I, *gate = x + I, *d = dout + (size_t)n * I;
        real *dx = dinp + (size_t)n * 2 * I, *dgate = dx + I;
        CPU_OP(gelu_forward)(dgate, x, I, act);  // dgate = gelu(x), then times dout
        for (int i = 0; i < I; i++) {
            double g = gate[i], di = d[i];
            dgate[i] = (real)(di * dgate[i]);
            dx[i] = (real)(di * g);
        }
        CPU_OP(gelu_backward)(dx, dx, x, I, act);  // dx = (dout * gate) * gelu'(x)
    }
}

void CPU_OP(tanh_forward)(void *out_, const void *inp_, int n) {
    real *out = out_;
    const real *inp = inp_;
    for (int i = 0; i < n; i++) out[i] = (real)tanh((double)inp[i]);
}

void CPU_OP(tanh_backward)(void *dinp_, const void *dout_, const void *out_, int n) {
    real *dinp = dinp_;
    const real *dout = dout_, *out = out_;
    for (int i = 0; i < n; i++) dinp[i] = (real)(dout[i] * (1.0 - (double)out[i] * out[i]));
}

void CPU_OP(dropout_residual_forward)(void *out_, const void *inp_, const void *residual_, int n, dropout_t d) {
    real *out = out_;
    const real *inp = inp_, *residual = residual_;
    double scale = 1.0 / (1.0 - d.p);
    dropout_walk w = dropout_walk_start();
    for (int i = 0; i < n; i++) {
        double v = dropout_walk_keep(&w, d, (uint64_t)i) ? inp[i] * scale : 0.0;
        out[i] = (real)(residual ? v + residual[i] : v);
    }
}

void CPU_OP(dropout_backward)(void *dinp_, const void *dout_, int n, dropout_t d) {
    real *dinp = dinp_;
    const real *dout = dout_;
    double scale = 1.0 / (1.0 - d.p);
    dropout_walk w = dropout_walk_start();
    for (int i = 0; i < n; i++) dinp[i] = dropout_walk_keep(&w, d, (uint64_t)i) ? (real)(dout[i] * scale) : (real)0;
}
