// normgrow: the closed enums shared by the configuration, the backend op table
// and every backend. No library behind them: C11 and CUDA C++ alike include
// this header (the JSON parsing of these names lives in config.h and run.h).
#ifndef NORMGROW_ENUMS_H
#define NORMGROW_ENUMS_H

// The precision a backend computes in (backend.h "Precision"): NG_PREC_FP32
// plain fp32; NG_PREC_BF16 the inputs of every matmul and of attention's two
// products rounded to bf16, accumulated in fp32.
typedef enum { NG_PREC_FP32, NG_PREC_BF16 } ng_precision;

// "fp32" / "bf16", and back (-1 with an error message for anything else).
const char *ng_precision_name(ng_precision p);
int ng_precision_parse(const char *s, ng_precision *p);

// The divergence of the kd term (docs/golden-contract.md section 6), with
// p_t, p_s the teacher's and student's softmax at the temperature:
// forward_kl KL(p_t || p_s), reverse_kl KL(p_s || p_t), jsd beta KL(p_t || m) +
// (1 - beta) KL(p_s || m) with m = beta p_t + (1 - beta) p_s. A closed type.
typedef enum { NG_DIV_FORWARD_KL = 0, NG_DIV_REVERSE_KL, NG_DIV_JSD } ng_divergence;
#define NG_DIV_LAST NG_DIV_JSD

// The config name of d: "forward_kl", "reverse_kl", "jsd".
const char *ng_divergence_name(ng_divergence d);

#endif
