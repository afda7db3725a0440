/* SPDX-License-Identifier: Apache-2.0 */
/* The job spec: a researcher's job JSON parsed strictly into a plain struct
 * with every default filled in, checked field by field and across fields, and
 * written back canonically. docs/jobs.md is the researcher's reference. */
#ifndef XF_JOB_JOBSPEC_H
#define XF_JOB_JOBSPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/result.h"
#include "kernels/model.h"
#include "privacy/privacy.h"

/* Largest job spec accepted, file or string. Specs are a few hundred bytes;
 * the bound keeps a wrong path (a dataset, a checkpoint) out of memory. */
#define XF_JOBSPEC_MAX_BYTES (1u << 20)

/* Identifiers (job name, dataset, tags) are 1..63 characters of
 * [A-Za-z0-9._-] starting with a letter or digit, so that they can appear in
 * file names, SQL, logs and SPIFFE-style paths without quoting. Buffers of
 * XF_JOB_IDENT_MAX bytes hold them with their terminator. */
#define XF_JOB_IDENT_MAX 64
#define XF_JOB_HIDDEN_MAX 8         /* mlp hidden layers */
#define XF_JOB_WIDTH_MAX 65536u     /* units in one hidden layer */
#define XF_JOB_LAYERS_MAX XF_MODEL_MAX_LAYERS /* model.layers entries */
#define XF_JOB_TAGS_MAX 16          /* data.tags entries */
#define XF_JOB_ROUNDS_MAX 1000000u  /* rounds */
#define XF_JOB_SITES_MAX 100000u    /* min_sites, and sites_per_round as a count */
#define XF_JOB_EPOCHS_MAX 10000u    /* local.epochs */
#define XF_JOB_BATCH_MAX 65536u     /* local.batch_size */
#define XF_JOB_DEADLINE_MAX_S 604800.0 /* round_deadline_s: one week */
#define XF_JOB_OVER_SELECTION_MAX 3.0  /* over_selection */

/* ---- choices -------------------------------------------------------------
 * Each enum has a name helper returning the spelling used in job JSON
 * ("unknown" for a value outside the enum; never NULL) and a lookup that
 * returns XF_EFORMAT for a spelling it does not know. */

typedef enum xf_job_arch {
  XF_JOB_ARCH_LOGREG = 0, /* "logreg": softmax regression */
  XF_JOB_ARCH_MLP,        /* "mlp": dense + ReLU per model.hidden entry */
  XF_JOB_ARCH_CNN,        /* "cnn": one of the presets below */
  XF_JOB_ARCH_LAYERS      /* "layers": the model declared in model.layers */
} xf_job_arch;

typedef enum xf_job_preset {
  XF_JOB_PRESET_NONE = 0,   /* "none": the arch is not cnn */
  XF_JOB_PRESET_LENET5,     /* "lenet5": conv6-conv16-120-84, NIID-Bench's model */
  XF_JOB_PRESET_FEDAVG_CNN  /* "fedavg-cnn": conv32-conv64-512, McMahan et al. 2017 */
} xf_job_preset;

typedef enum xf_job_optimizer {
  XF_JOB_OPTIMIZER_SGD = 0, /* "sgd": with momentum, nesterov and weight decay (L2) */
  XF_JOB_OPTIMIZER_ADAM,    /* "adam": weight decay as L2 added to the gradient */
  XF_JOB_OPTIMIZER_ADAMW    /* "adamw": decoupled weight decay */
} xf_job_optimizer;

/* How the local learning rate changes from round to round. */
typedef enum xf_job_lr_schedule_kind {
  XF_JOB_LR_CONSTANT = 0, /* "constant": lr every round */
  XF_JOB_LR_STEP,         /* "step": lr * gamma^floor((round - 1) / every) */
  XF_JOB_LR_COSINE        /* "cosine": from lr in round 1 down to min_lr in the last round */
} xf_job_lr_schedule_kind;

typedef enum xf_job_strategy_kind {
  XF_JOB_STRATEGY_FEDAVG = 0,   /* "fedavg" */
  XF_JOB_STRATEGY_FEDAVGM,      /* "fedavgm": server momentum (Hsu et al. 2019) */
  XF_JOB_STRATEGY_FEDPROX,      /* "fedprox": fedavg + proximal term at the sites */
  XF_JOB_STRATEGY_FEDADAM,      /* "fedadam"    \                            */
  XF_JOB_STRATEGY_FEDYOGI,      /* "fedyogi"     > Reddi et al. 2021          */
  XF_JOB_STRATEGY_FEDADAGRAD,   /* "fedadagrad" /                            */
  XF_JOB_STRATEGY_MEDIAN,       /* "median": coordinate-wise median (robust) */
  XF_JOB_STRATEGY_TRIMMED_MEAN  /* "trimmed_mean": coordinate-wise (robust) */
} xf_job_strategy_kind;

/* How updates reach the global coordinator. */
typedef enum xf_job_topology {
  XF_JOB_TOPOLOGY_FLAT = 0,  /* "flat": every site sends to the global coordinator */
  XF_JOB_TOPOLOGY_REGIONAL   /* "regional": sites behind a regional aggregator send to it,
                                and it forwards one aggregate of its region upstream */
} xf_job_topology;

typedef enum xf_job_downlink {
  XF_JOB_DOWNLINK_NONE = 0, /* "none": float32 */
  XF_JOB_DOWNLINK_FP16,     /* "fp16": IEEE half */
  XF_JOB_DOWNLINK_BF16      /* "bf16": bfloat16 */
} xf_job_downlink;

const char *xf_job_arch_name(xf_job_arch v);
const char *xf_job_preset_name(xf_job_preset v);
const char *xf_job_optimizer_name(xf_job_optimizer v);
const char *xf_job_lr_schedule_kind_name(xf_job_lr_schedule_kind v);
const char *xf_job_strategy_kind_name(xf_job_strategy_kind v);
const char *xf_job_privacy_unit_name(xf_privacy_unit v);
const char *xf_job_privacy_mode_name(xf_privacy_mode v);
const char *xf_job_downlink_name(xf_job_downlink v);
const char *xf_job_topology_name(xf_job_topology v);

xf_err xf_job_arch_from_name(const char *s, xf_job_arch *out) XF_WARN_UNUSED;
xf_err xf_job_preset_from_name(const char *s, xf_job_preset *out) XF_WARN_UNUSED;
xf_err xf_job_optimizer_from_name(const char *s, xf_job_optimizer *out) XF_WARN_UNUSED;
xf_err xf_job_lr_schedule_kind_from_name(const char *s,
                                         xf_job_lr_schedule_kind *out) XF_WARN_UNUSED;
xf_err xf_job_strategy_kind_from_name(const char *s, xf_job_strategy_kind *out) XF_WARN_UNUSED;
xf_err xf_job_privacy_unit_from_name(const char *s, xf_privacy_unit *out) XF_WARN_UNUSED;
xf_err xf_job_privacy_mode_from_name(const char *s, xf_privacy_mode *out) XF_WARN_UNUSED;
xf_err xf_job_downlink_from_name(const char *s, xf_job_downlink *out) XF_WARN_UNUSED;
xf_err xf_job_topology_from_name(const char *s, xf_job_topology *out) XF_WARN_UNUSED;

/* True for median and trimmed_mean, which must see each site's update and so
 * cannot run under secure aggregation. */
bool xf_job_strategy_is_robust(xf_job_strategy_kind v);

/* ---- the spec --------------------------------------------------------------
 * Every field below is always set: parsing fills what the JSON leaves out
 * with the default named here. The struct holds no heap memory; copy it by
 * assignment. */

typedef struct xf_job_model {
  xf_job_arch arch;                    /* required; JSON may leave it out when it gives
                                          model.layers */
  uint32_t hidden[XF_JOB_HIDDEN_MAX];  /* mlp: widths, each 1..65536 */
  uint32_t n_hidden;                   /* mlp: 1..8 (required); other archs: 0 */
  xf_job_preset preset;                /* cnn: required; other archs: NONE */
  xf_layer_decl layers[XF_JOB_LAYERS_MAX]; /* layers: the declared model, in order, each
                                              with its defaults filled in */
  uint32_t n_layers;                   /* layers: 1..XF_JOB_LAYERS_MAX (required); other
                                          archs: 0 */
  xf_loss loss;                        /* "cross_entropy" (default), "binary_cross_entropy"
                                          (one logit, labels 0/1) or "mse" (one output
                                          regressed on the label's value) */
} xf_job_model;

/* A site takes part with its dataset named `dataset` when that dataset also
 * carries every tag in `tags`. */
typedef struct xf_job_data {
  char dataset[XF_JOB_IDENT_MAX];                /* required identifier */
  char tags[XF_JOB_TAGS_MAX][XF_JOB_IDENT_MAX];  /* identifiers, no repeats */
  uint32_t n_tags;                               /* 0..16; default 0 */
} xf_job_data;

/* Training at each site in one round. */
typedef struct xf_job_local {
  uint32_t epochs;            /* passes over the local training split: 1..10000; default 1 */
  uint32_t batch_size;        /* records per step: 1..65536; default 32 */
  xf_job_optimizer optimizer; /* default sgd */
  double lr;                  /* step size: > 0; default 0.01 */
  double momentum;            /* sgd: [0, 1); default 0 */
  bool nesterov;              /* sgd: Nesterov momentum (needs momentum > 0); default false */
  double beta1, beta2;        /* adam, adamw: [0, 1); default 0.9, 0.999 */
  double eps;                 /* adam, adamw: (0, 1]; default 1e-8 */
  double weight_decay;        /* L2 (sgd, adam) or decoupled (adamw): >= 0; default 0 */
  double clip_norm;           /* > 0: each step's gradient clipped to this L2 norm; 0 (the
                                 default): off. Refused with record-level DP-SGD */
  struct {
    xf_job_lr_schedule_kind kind; /* default constant */
    uint32_t every;               /* step: rounds per decay, 1..1000000; default 1 */
    double gamma;                 /* step: factor, (0, 1]; default 0.1 */
    double min_lr;                /* cosine: the last round's lr, [0, lr]; default 0 */
  } lr_schedule;
  double prox_mu;             /* proximal term mu/2 ||w - w_global||^2, applied
                                 whenever > 0: >= 0; default 0, or 0.01 with
                                 fedprox (which refuses 0) */
} xf_job_local;

/* Server side. Defaults (xf_job_strategy_defaults) depend on the kind:
 * server_lr 1.0, or 0.01 for fedadam, fedyogi and fedadagrad; server_momentum
 * 0.9; beta1 0.9, beta2 0.99 (fixed in Reddi et al. 2021); tau 1e-3 (their
 * adaptivity, inside the range they found best); trim_fraction 0.1. In JSON a
 * hyperparameter that the chosen kind does not use is an error, so none is
 * silently ignored; in the struct they all keep their defaults. */
typedef struct xf_job_strategy {
  xf_job_strategy_kind kind; /* JSON "name"; default fedavg */
  double server_lr;          /* every kind: > 0 */
  double server_momentum;    /* fedavgm: [0, 1) */
  double beta1;              /* fedadam, fedyogi, fedadagrad: [0, 1) */
  double beta2;              /* fedadam, fedyogi: [0, 1) */
  double tau;                /* fedadam, fedyogi, fedadagrad: > 0 */
  double trim_fraction;      /* trimmed_mean, cut from each end: [0, 0.5) */
} xf_job_strategy;

/* Secure aggregation (SecAgg+). bits and threshold keep their values when
 * enabled is false, so switching it off and on loses nothing. */
typedef struct xf_job_secagg {
  bool enabled;     /* default false */
  uint32_t bits;    /* arithmetic mod 2^bits: 8..32; default 20 */
  double threshold; /* t = ceil(threshold * sites in the round): (0, 1]; default 0.66 */
} xf_job_secagg;

/* Uplink compression, JSON grammar: "none" | "qN" | "topk:F" | "topk:F+qN",
 * N in {16, 8, 4}, F a decimal number in (0, 1]. */
typedef struct xf_job_uplink {
  double topk_fraction; /* fraction of coordinates kept (at least one): (0, 1];
                           0 when top-k is off */
  uint32_t quant_bits;  /* 16, 8 or 4; 0 when updates travel as float32 */
} xf_job_uplink;

/* Room for the longest text xf_job_uplink_format writes, terminator included. */
#define XF_JOB_UPLINK_TEXT_MAX 64

typedef struct xf_job_compression {
  xf_job_uplink uplink;     /* default none */
  xf_job_downlink downlink; /* default none */
} xf_job_compression;

typedef struct xf_jobspec {
  char name[XF_JOB_IDENT_MAX]; /* required identifier */
  xf_job_model model;          /* required */
  xf_job_data data;            /* required */
  uint32_t rounds;             /* required: 1..1000000 */
  double sites_per_round;      /* <= 1: the fraction (0, 1] of eligible sites
                                  selected each round; > 1: a whole number of
                                  sites (2..100000). Default 1.0: all eligible */
  double over_selection;       /* invite this factor more sites than
                                  sites_per_round and close the round when
                                  sites_per_round have reported: [1, 3]; default 1 */
  uint32_t min_sites;          /* reports needed for a round to count:
                                  1..100000; default 2 */
  double round_deadline_s;     /* seconds from task to close: (0, 604800]; default 600 */
  xf_job_topology topology;    /* default flat; regional: sites behind regional
                                  aggregators take part through them */
  xf_job_local local;
  xf_job_strategy strategy;
  xf_privacy_spec privacy;
  xf_job_secagg secure_aggregation;
  xf_job_compression compression;
  uint64_t seed;               /* JSON integer, or decimal string for values
                                  above 2^63 - 1; default 0 */
} xf_jobspec;

/* ---- functions ------------------------------------------------------------ */

/* Fills *spec with every default above. The required fields are left empty
 * (name and dataset ""), arch logreg and rounds 0, so a defaulted spec does
 * not validate until they are set. */
void xf_jobspec_defaults(xf_jobspec *spec);

/* Sets strategy->kind and every hyperparameter to the defaults for kind. */
void xf_job_strategy_defaults(xf_job_strategy *strategy, xf_job_strategy_kind kind);

/* Parses and validates a job spec held in memory (len bytes, no terminator
 * needed). Strict: unknown keys, repeated keys, wrong types, values out of
 * range and settings that contradict each other are all errors. On failure
 * err gets file = origin (NULL: none), field = the dotted path at fault
 * ("local.lr", "model.hidden[2]", or "line L, column C" for JSON syntax) and
 * msg = what is wrong and how to fix it, and the return is
 *   XF_EFORMAT       JSON syntax, wrong type, unknown or missing field,
 *                    contradictory settings;
 *   XF_ERANGE        a value out of its range (the range is in msg), or
 *                    input above XF_JOBSPEC_MAX_BYTES;
 *   XF_EUNSUPPORTED  a local optimizer other than sgd;
 *   XF_ENOMEM.
 * *out is written only on success. json is borrowed and may be NULL when len
 * is 0. jansson allocates with its own allocator (this module does not change
 * it process-wide); the allocations of this module go through base/alloc.h. */
xf_err xf_jobspec_parse_string(const char *json, size_t len, const char *origin,
                               xf_jobspec *out, xf_errctx *err) XF_WARN_UNUSED;

/* Reads the file at path (at most XF_JOBSPEC_MAX_BYTES) and parses it as
 * above with origin = path. Adds XF_ENOENT (no such file) and XF_EIO (cannot
 * be read, e.g. a directory). */
xf_err xf_jobspec_parse_file(const char *path, xf_jobspec *out, xf_errctx *err) XF_WARN_UNUSED;

/* The name and dataset a centralized spec holds when it names none. */
#define XF_JOBSPEC_CENTRALIZED_NAME "centralized"

/* Reads a job spec for the centralized baseline (`xfed train`), which uses
 * model, local and seed: as xf_jobspec_parse_file, except that the federated
 * fields name, data and rounds may be left out (name and data.dataset are
 * then XF_JOBSPEC_CENTRALIZED_NAME, rounds 1) and every other federated
 * field (sites_per_round, min_sites, round_deadline_s, strategy, privacy,
 * secure_aggregation, compression, ...) keeps its default. A field that is
 * given is still checked as strictly as for a federated job: unknown keys,
 * wrong types, out-of-range values and contradictions are errors. */
xf_err xf_jobspec_parse_centralized(const char *path, xf_jobspec *out,
                                    xf_errctx *err) XF_WARN_UNUSED;

/* Checks every range and cross-field rule on a spec built or changed in code
 * (e.g. a CLI flag overriding rounds), with the same fields and messages as
 * parsing. Cross-field rules: median and trimmed_mean refuse secure
 * aggregation; secure aggregation allows only quantized uplinks of at most
 * `bits` bits and needs min_sites >= 2; privacy mode distributed needs secure
 * aggregation; unit record allows mode local or none; fedprox needs
 * prox_mu > 0; min_sites may not exceed a sites_per_round count. Returns
 * XF_OK, XF_EFORMAT, XF_ERANGE or XF_EUNSUPPORTED; err as for parsing, with
 * file left as it was. */
xf_err xf_jobspec_validate(const xf_jobspec *spec, xf_errctx *err) XF_WARN_UNUSED;

/* The local learning rate of round `round` (1-based) of a job of `rounds`
 * rounds under spec->local.lr_schedule; every site computes the same value
 * from the task's round number. Cosine:
 *   min_lr + (lr - min_lr) * (1 + cos(pi * (round - 1) / (rounds - 1))) / 2
 * (lr in round 1, min_lr in the last; lr when rounds is 1). A round past
 * `rounds` counts as the last. */
double xf_jobspec_local_lr(const xf_jobspec *spec, uint32_t round);

/* Writes spec as canonical JSON: fixed key order, two-space indentation, every
 * field that applies (hyperparameters of other strategies, hidden for a
 * non-mlp and preset for a non-cnn model are left out), numbers in the
 * shortest form that reads back to the same double. Parsing the result of a
 * valid spec gives the same spec. *out is a NUL-terminated string the caller
 * frees with xf_free; NULL on failure. Returns XF_OK or XF_ENOMEM. */
xf_err xf_jobspec_to_json(const xf_jobspec *spec, char **out) XF_WARN_UNUSED;

/* Parses an uplink compression string (grammar above) into *out. On failure
 * returns XF_EFORMAT (not in the grammar) or XF_ERANGE (F outside (0, 1]) and
 * fills err's msg; err's field is left to the caller. *out is written only on
 * success. */
xf_err xf_job_uplink_parse(const char *text, xf_job_uplink *out, xf_errctx *err) XF_WARN_UNUSED;

/* Writes the canonical text of *uplink ("none", "q8", "topk:0.01+q8") into buf
 * of n bytes (XF_JOB_UPLINK_TEXT_MAX suffices) and returns buf. */
char *xf_job_uplink_format(const xf_job_uplink *uplink, char *buf, size_t n);

/* Sites for one round out of `eligible`: *target is how many reports close the
 * round early (a sites_per_round fraction rounds up, at least 1; a count is
 * capped at eligible), *invite how many are asked (ceil(target *
 * over_selection), capped at eligible). Both are 0 when eligible is 0. */
void xf_jobspec_cohort(const xf_jobspec *spec, uint32_t eligible, uint32_t *target,
                       uint32_t *invite);

/* ---- job ids ---------------------------------------------------------------- */

/* The largest job id: the coordinator's job numbers are SQLite rowids. */
#define XF_JOB_ID_MAX INT64_MAX

/* Parses a job id as users and the protocol write it: a decimal number from
 * 1 to XF_JOB_ID_MAX, digits only. XF_EINVAL for anything else (a sign,
 * letters, 0, a leading zero, nothing) and XF_ERANGE for a number above the
 * range (never clamped); err's message names the text and the range. *out
 * is written only on success. */
xf_err xf_job_id_parse(const char *s, int64_t *out, xf_errctx *err) XF_WARN_UNUSED;

#endif
