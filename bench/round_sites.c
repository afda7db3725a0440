/* SPDX-License-Identifier: Apache-2.0 */
/* The fake sites and the user of xfed-bench-round on one libuv loop, as
 * both modes run them (round_bench.c, step 3): each site speaks the site's
 * side of docs/protocol.md ("Site <-> coordinator") with no local work; the
 * user submits the job and polls it until it is done. */
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <uv.h>

#include "base/alloc.h"
#include "base/rng.h"
#include "bench/round_bench.h"
#include "job/jobmodel.h"
#include "job/jobspec.h"
#include "crypto/digest.h"
#include "crypto/seal.h"
#include "kernels/checkpoint.h"
#include "kernels/model.h"
#include "net/conn.h"
#include "net/session.h"
#include "net/tensor.h"
#include "net/tls.h"

#define DATASET "bench"
#define TRAIN_RECORDS 1000u
#define TEST_RECORDS 100u
#define DIAL_WINDOW 64 /* handshakes in flight at once; see dial_sites */
/* The largest model a fake site takes: far above fedavg-cnn's 6.6 MB. */
#define MODEL_MAX (1ull << 30)

/* ---- the run -------------------------------------------------------------------------------- */

static void close_all(bench *b) {
  for (int i = 0; i < b->nsites; i++)
    if (b->sites[i].conn) xf_conn_close(b->sites[i].conn);
  if (b->user.conn) xf_conn_close(b->user.conn);
}

void xf_rb_bench_fail(bench *b, const char *fmt, ...) {
  if (!b->failed) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->why, sizeof(b->why), fmt, ap);
    va_end(ap);
    b->failed = true;
  }
  b->stopping = true;
  close_all(b);
}

static bool send_env(bench *b, xf_conn *c, const Xfed__Envelope *env, const char *who) {
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_err rc = xf_conn_send(c, env, &err);
  if (rc == XF_OK) return true;
  xf_rb_bench_fail(b, "%s: cannot send %s: %s", who, xf_envelope_body_name(env), err.msg);
  return false;
}

static const char *model_json(const bench_opts *o, char *buf, size_t n) {
  if (strcmp(o->model, "mlp") == 0) {
    int w = o->mlp_width ? o->mlp_width : 200;
    snprintf(buf, n, "{\"arch\": \"mlp\", \"hidden\": [%d, %d]}", w, w);
    return buf;
  }
  if (strcmp(o->model, "lenet5") == 0) return "{\"arch\": \"cnn\", \"preset\": \"lenet5\"}";
  return "{\"arch\": \"cnn\", \"preset\": \"fedavg-cnn\"}";
}

/* The job the user submits: every site in every round, one job at a time. */
static void job_spec_text(const bench_opts *o, char *buf, size_t n) {
  char model[96];
  snprintf(buf, n,
           "{\"name\": \"round-bench\", \"model\": %s, \"data\": {\"dataset\": \"" DATASET
           "\"}, \"rounds\": %u, \"min_sites\": %d, \"sites_per_round\": 1.0, "
           "\"round_deadline_s\": 600, \"seed\": 1%s}",
           model_json(o, model, sizeof(model)), (unsigned)o->rounds, o->sites * (o->regions ? o->regions : 1),
           o->regions ? ", \"topology\": \"regional\"" : "");
}

/* The parameters of the job's model on the sites' 28x28x1 data with 10
 * classes, as the coordinator will build it, and the length of its model
 * file (which does not depend on the parameters' values). */
xf_err xf_rb_job_model_size(const bench_opts *o, size_t *n, size_t *file_len, xf_errctx *err) {
  char text[1024];
  job_spec_text(o, text, sizeof(text));
  xf_jobspec spec;
  xf_model_spec ms;
  xf_model *m = NULL;
  XF_GUARD(xf_jobspec_parse_string(text, strlen(text), "xfed-bench-round", &spec, err));
  XF_GUARD(xf_jobspec_model_spec(&spec, 28, 28, 1, 10, &ms, err));
  XF_GUARD(xf_model_create(&ms, &m, err));
  *n = xf_model_num_params(m);
  float *params = xf_calloc(*n ? *n : 1, sizeof(float));
  uint8_t *bytes = NULL;
  xf_err rc = params ? xf_checkpoint_encode(m, params, &bytes, file_len, err)
                     : xf_fail(err, XF_ENOMEM, "out of memory");
  xf_free(bytes);
  xf_free(params);
  xf_model_free(m);
  return rc;
}

/* The shared update: n small pseudo-random float32 values, little-endian,
 * and their digest, made before the job starts. */
bool xf_rb_make_delta(bench *b, size_t n) {
  b->delta = xf_malloc(n ? n * 4 : 4);
  if (!b->delta) return false;
  xf_rng rng;
  xf_rng_seed(&rng, 1, 7);
  for (size_t i = 0; i < n; i++) {
    float v = (float)(xf_rng_normal(&rng) * 1e-3);
    uint32_t u;
    memcpy(&u, &v, 4);
    for (int k = 0; k < 4; k++) b->delta[4 * i + (size_t)k] = (uint8_t)(u >> (8 * k));
  }
  xf_digest_buf(b->delta, n * 4, &b->delta_digest);
  b->n_params = n;
  return true;
}

/* ---- a fake site ---------------------------------------------------------------------------- */

static void site_drop_task(site *s) {
  xf_free(s->sealed);
  s->sealed = NULL;
  s->sealed_len = 0;
  xf_tensor_receiver_free(s->model_rx);
  s->model_rx = NULL;
  xf_free(s->model_buf);
  s->model_buf = NULL;
  s->model_len = 0;
  s->up = UP_NONE;
}

/* The site's report: test figures of the model it received and, after a
 * training task, a train loss; the figures are fixed, since a bench site trains nothing. */
static void fill_metrics(site *s, bool train, Xfed__Metrics *out, Xfed__Envelope *env) {
  bench *b = s->b;
  Xfed__Metrics m = XFED__METRICS__INIT;
  m.job_id = s->job_id;
  m.round = s->round;
  m.attempt = s->attempt;
  m.site = s->name;
  m.region = b->region_label;
  m.model_round = s->model_round;
  m.has_test = true;
  m.test_loss = 2.30;
  m.test_accuracy = 0.10;
  m.samples = TRAIN_RECORDS;
  m.bytes_down = b->model_len;
  if (train) {
    m.has_train = true;
    m.train_loss = 2.25;
    m.bytes_up = b->n_params * 4;
  }
  *out = m;
  env->body_case = XFED__ENVELOPE__BODY_METRICS;
  env->metrics = out;
}

/* Sends what the upload allows now: Metrics, TensorBegin, the chunks while
 * the connection takes them, TensorEnd. */
static void site_pump(site *s) {
  bench *b = s->b;
  while (s->conn && xf_conn_is_open(s->conn) && !b->stopping) {
    Xfed__Envelope env = XFED__ENVELOPE__INIT;
    Xfed__TensorBegin begin = XFED__TENSOR_BEGIN__INIT;
    Xfed__TensorChunk chunk = XFED__TENSOR_CHUNK__INIT;
    Xfed__TensorEnd end = XFED__TENSOR_END__INIT;
    Xfed__Metrics metrics;
    const uint8_t *data = s->sealed ? s->sealed : b->delta;
    uint64_t total = s->sealed ? s->sealed_len : (uint64_t)b->n_params * 4;
    size_t chunk_bytes = s->sealed ? XF_SEAL_STREAM_CHUNK + XF_SEAL_ABYTES : CHUNK;
    size_t len = 0;
    switch (s->up) {
    case UP_NONE:
    case UP_HELD:
    case UP_AWAIT_ACK:
    case UP_AWAIT_FINAL: return;
    case UP_METRICS:
      fill_metrics(s, true, &metrics, &env);
      break;
    case UP_BEGIN:
      begin.stream_id = s->up_stream;
      begin.kind = XFED__TENSOR_BEGIN__KIND__UPDATE;
      begin.total_bytes = total;
      begin.chunk_bytes = (uint32_t)chunk_bytes;
      begin.dtype = XFED__TENSOR_BEGIN__DTYPE__F32;
      begin.element_count = b->n_params;
      begin.digest.data = s->sealed ? s->sealed_digest.bytes : b->delta_digest.bytes;
      if (s->sealed) {
        begin.sealed_by.data = s->epk;
        begin.sealed_by.len = sizeof(s->epk);
        begin.sealed_chunk = XF_SEAL_STREAM_CHUNK;
      }
      begin.digest.len = XF_DIGEST_BYTES;
      begin.job_id = s->job_id;
      begin.round = s->round;
      begin.weight = TRAIN_RECORDS;
      begin.attempt = s->attempt;
      env.body_case = XFED__ENVELOPE__BODY_TENSOR_BEGIN;
      env.tensor_begin = &begin;
      break;
    case UP_CHUNKS:
      if (s->up_offset >= total) {
        s->up = UP_END;
        continue;
      }
      len = total - s->up_offset < chunk_bytes ? (size_t)(total - s->up_offset) : chunk_bytes;
      chunk.stream_id = s->up_stream;
      chunk.index = s->up_offset / chunk_bytes;
      chunk.offset = s->up_offset;
      chunk.data.data = (uint8_t *)data + s->up_offset;
      chunk.data.len = len;
      env.body_case = XFED__ENVELOPE__BODY_TENSOR_CHUNK;
      env.tensor_chunk = &chunk;
      break;
    case UP_END:
      end.stream_id = s->up_stream;
      env.body_case = XFED__ENVELOPE__BODY_TENSOR_END;
      env.tensor_end = &end;
      break;
    }
    xf_errctx err;
    xf_errctx_clear(&err);
    xf_err rc = xf_conn_send(s->conn, &env, &err);
    if (rc == XF_ERANGE) return; /* busy: on_drain pumps again */
    if (rc != XF_OK) {
      xf_rb_bench_fail(b, "%s: cannot send the update: %s", s->name, err.msg);
      return;
    }
    switch (s->up) {
    case UP_METRICS: s->up = UP_BEGIN; break;
    case UP_BEGIN: s->up = UP_AWAIT_ACK; return;
    case UP_CHUNKS: s->up_offset += len; break;
    case UP_END: s->up = UP_AWAIT_FINAL; return;
    default: break;
    }
  }
}

static round_times *round_of(bench *b, uint32_t round) {
  return round >= 1 && round <= b->o->rounds ? &b->rt[round] : NULL;
}

static void on_offer(site *s, const Xfed__TaskOffer *o) {
  bench *b = s->b;
  double t = xf_bench_now();
  site_drop_task(s);
  snprintf(s->job_id, sizeof(s->job_id), "%s", o->job_id ? o->job_id : "");
  s->round = o->round;
  s->attempt = o->attempt;
  s->model_round = o->model_round;
  s->model_stream = o->model_stream_id;
  s->offered_update_stream = o->update_stream_id;
  s->eval = o->evaluate_only;
  s->hold = o->hold && !o->evaluate_only;
  s->go = false;
  s->seal = o->seal_key.len == XF_SEAL_PUBLICKEYBYTES;
  if (s->seal) memcpy(s->seal_pk, o->seal_key.data, XF_SEAL_PUBLICKEYBYTES);
  Xfed__TaskAccept a = XFED__TASK_ACCEPT__INIT;
  a.job_id = s->job_id;
  a.round = s->round;
  a.attempt = s->attempt;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_TASK_ACCEPT;
  env.task_accept = &a;
  if (!send_env(b, s->conn, &env, s->name)) return;
  if (s->eval) {
    /* Evaluation only: the model stream that follows is ignored. */
    Xfed__Metrics m;
    Xfed__Envelope menv = XFED__ENVELOPE__INIT;
    fill_metrics(s, false, &m, &menv);
    if (!send_env(b, s->conn, &menv, s->name)) return;
    if (!b->evals++) b->t_first_eval = t;
    return;
  }
  round_times *r = round_of(b, o->round);
  if (!r) {
    xf_rb_bench_fail(b, "%s: offered round %u of a %u-round job", s->name, (unsigned)o->round,
                     (unsigned)b->o->rounds);
    return;
  }
  if (!r->offers) {
    r->first_offer = t;
    if (o->round == 1) {
      b->t_first_offer = t;
      b->coord_cpu_first_offer = xf_rb_proc_cpu_s(b->coord);
      b->self_cpu_first_offer = xf_rb_self_cpu_s();
    }
  }
  r->offers++;
  if (o->attempt > r->max_attempt) r->max_attempt = o->attempt;
}

static xf_err model_sink(void *user, uint64_t offset, const uint8_t *data, size_t len,
                         xf_errctx *err) {
  site *s = user;
  XF_ENSURE(s->model_buf && offset <= s->model_len && len <= s->model_len - offset, err,
            XF_ERANGE, "model chunk at %" PRIu64 " is outside the model", offset);
  memcpy(s->model_buf + offset, data, len);
  return XF_OK;
}

static void send_ack(site *s, uint64_t stream, uint64_t next) {
  Xfed__TensorAck a = XFED__TENSOR_ACK__INIT;
  a.stream_id = stream;
  a.next_offset = next;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_TENSOR_ACK;
  env.tensor_ack = &a;
  (void)send_env(s->b, s->conn, &env, s->name);
}

static bool is_model_stream(const site *s, uint64_t stream) {
  return !s->eval && s->model_stream && stream == s->model_stream;
}

static void on_model_begin(site *s, const Xfed__TensorBegin *m) {
  bench *b = s->b;
  if (s->eval && m->stream_id == s->model_stream) return;
  if (!is_model_stream(s, m->stream_id) || m->kind != XFED__TENSOR_BEGIN__KIND__MODEL) {
    xf_rb_bench_fail(b, "%s: TensorBegin of stream %" PRIu64 " (kind %d) matches no task", s->name,
                     m->stream_id, (int)m->kind);
    return;
  }
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_tensor_receiver_free(s->model_rx);
  s->model_rx = NULL;
  xf_free(s->model_buf);
  s->model_len = (size_t)m->total_bytes;
  s->model_buf = xf_malloc(s->model_len ? s->model_len : 1);
  if (!s->model_buf ||
      xf_tensor_receiver_new(MODEL_MAX, model_sink, s, &s->model_rx, &err) != XF_OK ||
      xf_tensor_receiver_begin(s->model_rx, m, &err) != XF_OK) {
    xf_rb_bench_fail(b, "%s: model stream: %s", s->name, err.msg[0] ? err.msg : "out of memory");
    return;
  }
  Xfed__TensorAck a;
  xf_tensor_receiver_ack(s->model_rx, &a);
  send_ack(s, a.stream_id, a.next_offset);
}

static void on_model_chunk(site *s, const Xfed__TensorChunk *m) {
  if (s->eval && m->stream_id == s->model_stream) return;
  if (!s->model_rx || !is_model_stream(s, m->stream_id)) {
    xf_rb_bench_fail(s->b, "%s: TensorChunk of stream %" PRIu64 " matches no task", s->name,
                     m->stream_id);
    return;
  }
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_tensor_receiver_chunk(s->model_rx, m, &err) != XF_OK)
    xf_rb_bench_fail(s->b, "%s: model chunk: %s", s->name, err.msg);
}

static void on_model_end(site *s, const Xfed__TensorEnd *m) {
  bench *b = s->b;
  if (s->eval && m->stream_id == s->model_stream) return;
  if (!s->model_rx || !is_model_stream(s, m->stream_id)) {
    xf_rb_bench_fail(b, "%s: TensorEnd of stream %" PRIu64 " matches no task", s->name,
                     m->stream_id);
    return;
  }
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_tensor_receiver_end(s->model_rx, m, &err) != XF_OK) {
    xf_rb_bench_fail(b, "%s: model stream: %s", s->name, err.msg);
    return;
  }
  send_ack(s, m->stream_id, s->model_len);
  xf_model *model = NULL;
  float *params = NULL;
  if (xf_checkpoint_decode(s->model_buf, s->model_len, &model, &params, &err) != XF_OK) {
    xf_rb_bench_fail(b, "%s: the model does not decode: %s", s->name, err.msg);
    return;
  }
  size_t n = xf_model_num_params(model);
  xf_model_free(model);
  xf_free(params);
  size_t model_len = s->model_len;
  site_drop_task(s);
  if (n != b->n_params || model_len != b->model_len) {
    xf_rb_bench_fail(b, "%s: a model of %zu parameters in %zu bytes, not %zu in %zu", s->name, n,
                     model_len, b->n_params, b->model_len);
    return;
  }
  round_times *r = round_of(b, s->round);
  if (r) r->last_model = xf_bench_now();
  s->up_stream = s->offered_update_stream
                     ? s->offered_update_stream
                     : (uint64_t)s->round << 16 | (uint64_t)s->attempt << 1 | 1;
  s->up_offset = 0;
  if (s->seal) {
    /* What a real site does after training: seal the update (and hash it). */
    char ctx[256];
    size_t ctx_len =
        xf_seal_stream_context(ctx, sizeof(ctx), s->job_id, s->round, s->attempt, s->name);
    xf_seal_sender *ss = NULL;
    xf_err rc = xf_seal_sender_new(s->seal_pk, (const uint8_t *)ctx, ctx_len, &ss, s->epk);
    if (rc == XF_OK)
      rc = xf_seal_stream(ss, b->delta, b->n_params * 4, XF_SEAL_STREAM_CHUNK, &s->sealed,
                          &s->sealed_len);
    xf_seal_sender_free(ss);
    if (rc != XF_OK) {
      xf_rb_bench_fail(b, "%s: cannot seal the update", s->name);
      return;
    }
    xf_digest_buf(s->sealed, s->sealed_len, &s->sealed_digest);
  }
  /* A held task trains, here at once, only on its TaskGo. */
  s->up = s->hold && !s->go ? UP_HELD : UP_METRICS;
  site_pump(s);
}

/* The aggregator confirms a held task: enough sites accepted. */
static void on_go(site *s, const Xfed__TaskGo *g) {
  if (!s->hold || strcmp(g->job_id ? g->job_id : "", s->job_id) != 0 || g->round != s->round ||
      g->attempt != s->attempt)
    return; /* a go for a task this site no longer holds: the real site ignores it too */
  s->go = true;
  if (s->up == UP_HELD) {
    s->up = UP_METRICS;
    site_pump(s);
  }
}

static void on_site_ack(site *s, const Xfed__TensorAck *a) {
  bench *b = s->b;
  if (a->stream_id != s->up_stream) return;
  uint64_t total = s->sealed ? s->sealed_len : (uint64_t)b->n_params * 4;
  uint64_t chunk_bytes = s->sealed ? XF_SEAL_STREAM_CHUNK + XF_SEAL_ABYTES : CHUNK;
  if (s->up == UP_AWAIT_ACK) {
    if (a->next_offset > total || a->next_offset % chunk_bytes != 0) {
      xf_rb_bench_fail(b, "%s: TensorAck at %" PRIu64 " of a %" PRIu64 "-byte update", s->name,
                       a->next_offset, total);
      return;
    }
    s->up_offset = a->next_offset;
    s->up = UP_CHUNKS;
    site_pump(s);
  } else if (s->up == UP_AWAIT_FINAL && a->next_offset == total) {
    s->up = UP_NONE;
    round_times *r = round_of(b, s->round);
    if (r) {
      r->last_final_ack = xf_bench_now();
      r->final_acks++;
    }
  }
}

static void site_frame(site *s, const Xfed__Envelope *env) {
  bench *b = s->b;
  switch (env->body_case) {
  case XFED__ENVELOPE__BODY_TASK_OFFER: on_offer(s, env->task_offer); return;
  case XFED__ENVELOPE__BODY_TENSOR_BEGIN: on_model_begin(s, env->tensor_begin); return;
  case XFED__ENVELOPE__BODY_TENSOR_CHUNK: on_model_chunk(s, env->tensor_chunk); return;
  case XFED__ENVELOPE__BODY_TENSOR_END: on_model_end(s, env->tensor_end); return;
  case XFED__ENVELOPE__BODY_TENSOR_ACK: on_site_ack(s, env->tensor_ack); return;
  case XFED__ENVELOPE__BODY_TASK_GO: on_go(s, env->task_go); return;
  case XFED__ENVELOPE__BODY_TASK_CANCEL:
    xf_rb_bench_fail(b, "%s: task cancelled (job %s round %u): %s", s->name,
                     env->task_cancel->job_id ? env->task_cancel->job_id : "",
                     (unsigned)env->task_cancel->round,
                     env->task_cancel->reason ? env->task_cancel->reason : "");
    return;
  case XFED__ENVELOPE__BODY_ERROR:
    xf_rb_bench_fail(b, "%s: the coordinator sent Error %u: %s", s->name,
                     (unsigned)env->error->code, env->error->message ? env->error->message : "");
    return;
  default: return;
  }
}

/* ---- the user ------------------------------------------------------------------------------- */

static void cli_submit(cli *u) {
  bench *b = u->b;
  char spec[1024];
  job_spec_text(b->o, spec, sizeof(spec));
  Xfed__JobSubmit m = XFED__JOB_SUBMIT__INIT;
  m.spec_json = spec;
  m.origin = "xfed-bench-round";
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_JOB_SUBMIT;
  env.job_submit = &m;
  if (send_env(b, u->conn, &env, "user")) {
    u->st = CLI_SUBMITTED;
    u->submit_tries++;
  }
}

static void cli_query(cli *u) {
  Xfed__JobQuery m = XFED__JOB_QUERY__INIT;
  m.job_id = u->job_id;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_JOB_QUERY;
  env.job_query = &m;
  if (send_env(u->b, u->conn, &env, "user")) u->st = CLI_QUERYING;
}

static void bench_done(bench *b);

static void cli_frame(cli *u, const Xfed__Envelope *env) {
  bench *b = u->b;
  double t = xf_bench_now();
  if (env->body_case == XFED__ENVELOPE__BODY_ERROR) {
    /* A submit can come before the coordinator has taken every announce:
     * "no such dataset" before the first, "too few sites" (denied) before
     * the last. The announces are on their way, so try again for a while. */
    if (u->st == CLI_SUBMITTED &&
        (env->error->code == XF_ENOENT || env->error->code == XF_EDENIED) &&
        (u->submit_tries < 600 || b->tier)) { /* the tiered mode: until --timeout */
      u->st = CLI_READY;
      u->next_action = t + 0.1;
      return;
    }
    xf_rb_bench_fail(b, "user: the coordinator sent Error %u: %s", (unsigned)env->error->code,
                     env->error->message ? env->error->message : "");
    return;
  }
  if (env->body_case != XFED__ENVELOPE__BODY_JOB_LIST) return;
  const Xfed__JobList *l = env->job_list;
  if (l->n_jobs != 1 || !l->jobs[0]->job_id || !l->jobs[0]->state) {
    xf_rb_bench_fail(b, "user: a JobList of %zu jobs", l->n_jobs);
    return;
  }
  const Xfed__JobInfo *j = l->jobs[0];
  if (u->st == CLI_SUBMITTED && b->tier) xf_rb_tier_accepted(b);
  snprintf(u->job_id, sizeof(u->job_id), "%s", j->job_id);
  snprintf(u->last_state, sizeof(u->last_state), "%s", j->state);
  if (strcmp(j->state, "failed") == 0 || strcmp(j->state, "cancelled") == 0) {
    xf_rb_bench_fail(b, "job %s is %s: %s", j->job_id, j->state, j->message ? j->message : "");
    return;
  }
  if (strcmp(j->state, "done") == 0) {
    u->st = CLI_DONE;
    bench_done(b);
    return;
  }
  u->st = CLI_RUNNING;
  u->next_action = t + 0.2;
}

/* ---- connections ---------------------------------------------------------------------------- */

/* The run of this process; each connection's user pointer is one of its
 * sites or its user. */
bench *xf_rb_bench;

static xf_conn_opts conn_opts(void *user);

/* Sites dial in a window of DIAL_WINDOW handshakes at a time, the next one
 * as soon as one has its session, as a thousand site daemons starting behind
 * one address would reach the coordinator over a few seconds: all at once
 * they would be more unauthenticated connections from one address than the
 * coordinator keeps (max_unauthenticated_connections_per_address), and it
 * would drop the oldest handshakes for the newest. */
static void dial_sites(bench *b) {
  xf_errctx err;
  xf_errctx_clear(&err);
  while (!b->failed && b->dialed < b->nsites && b->handshaking < DIAL_WINDOW) {
    site *s = &b->sites[b->dialed++];
    xf_conn_opts so = conn_opts(s);
    if (xf_rb_make_tls(b->p, s->name, &s->tls, &err) != XF_OK ||
        xf_dial(&b->loop, s->tls, b->host, b->port, &so, &s->conn, &err) != XF_OK) {
      xf_rb_bench_fail(b, "%s: cannot connect: %s", s->name, err.msg);
      return;
    }
    s->closed = false;
    b->handshaking++;
  }
}

static site *as_site(xf_conn *c) {
  void *u = xf_conn_user(c);
  return u == &xf_rb_bench->user ? NULL : u;
}

static xf_err on_connect(xf_conn *c, const xf_spiffe_id *peer) {
  bench *b = xf_rb_bench;
  site *s = as_site(c);
  xf_errctx err;
  xf_errctx_clear(&err);
  if (peer->kind != XF_PKI_KIND_COORDINATOR) {
    xf_rb_bench_fail(b, "the peer is not a coordinator");
    return XF_EDENIED;
  }
  xf_err rc = xf_session_start(s ? &s->session : &b->user.session, c, s ? "site" : "cli", 0, &err);
  if (rc != XF_OK) xf_rb_bench_fail(b, "%s: hello: %s", s ? s->name : "user", err.msg);
  return rc;
}

static void on_frame(xf_conn *c, const Xfed__Envelope *env) {
  bench *b = xf_rb_bench;
  site *s = as_site(c);
  xf_session_event ev;
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_session_on_frame(s ? &s->session : &b->user.session, c, env, &ev, &err) != XF_OK) {
    xf_rb_bench_fail(b, "%s: session: %s", s ? s->name : "user", err.msg);
    return;
  }
  if (ev == XF_SESSION_OPENED) {
    if (!s) {
      b->user.st = CLI_READY;
      return;
    }
    b->handshaking--;
    dial_sites(b);
    Xfed__SiteAnnounce__Dataset d = XFED__SITE_ANNOUNCE__DATASET__INIT;
    d.name = DATASET;
    d.classification = "internal";
    d.train_records = TRAIN_RECORDS;
    d.test_records = TEST_RECORDS;
    d.classes = 10;
    d.height = 28;
    d.width = 28;
    d.channels = 1;
    Xfed__SiteAnnounce__Dataset *ds[] = {&d};
    Xfed__SiteAnnounce a = XFED__SITE_ANNOUNCE__INIT;
    a.site = s->name;
    a.region = b->region_label;
    a.n_datasets = 1;
    a.datasets = ds;
    a.backend = "cpu";
    a.threads = 1;
    Xfed__Envelope out = XFED__ENVELOPE__INIT;
    out.body_case = XFED__ENVELOPE__BODY_SITE_ANNOUNCE;
    out.site_announce = &a;
    if (send_env(b, c, &out, s->name)) {
      s->announced = true;
      if (++b->n_announced == b->nsites && b->driver) xf_rb_driver_ready(b);
    }
    return;
  }
  if (ev != XF_SESSION_FRAME || b->stopping) return;
  if (s) site_frame(s, env);
  else cli_frame(&b->user, env);
}

static void on_drain(xf_conn *c) {
  site *s = as_site(c);
  if (s) site_pump(s);
}

static void on_close(xf_conn *c, const xf_conn_reason *why) {
  bench *b = xf_rb_bench;
  site *s = as_site(c);
  if (s) {
    s->conn = NULL;
    s->closed = true;
  } else {
    b->user.conn = NULL;
    b->user.closed = true;
  }
  if (!b->stopping)
    xf_rb_bench_fail(b, "%s: the connection closed: %s (%s)", s ? s->name : "user",
                     xf_conn_end_message(why->end), why->msg);
  xf_rb_maybe_end_loop(b);
}

void xf_rb_maybe_end_loop(bench *b) {
  if (!b->stopping) return;
  for (int i = 0; i < b->nsites; i++)
    if (!b->sites[i].closed) return;
  if (!b->user.closed) return;
  if (!uv_is_closing((uv_handle_t *)&b->tick)) uv_close((uv_handle_t *)&b->tick, NULL);
}

static void bench_done(bench *b) {
  if (b->tier) {
    xf_rb_tier_done(b);
    return;
  }
  b->t_done = xf_bench_now();
  b->coord_cpu_done = xf_rb_proc_cpu_s(b->coord);
  b->self_cpu_done = xf_rb_self_cpu_s();
  /* Peak memory just before the stop; the stop itself allocates nothing big. */
  b->vmhwm_kib = xf_rb_proc_status_kib(b->coord, "VmHWM");
  b->vmrss_kib = xf_rb_proc_status_kib(b->coord, "VmRSS");
  b->stopping = true;
  b->stop_deadline = xf_bench_now() + 15;
  /* SIGTERM: the coordinator closes every connection and exits. */
  if (kill(b->coord, SIGTERM) != 0) xf_rb_bench_fail(b, "cannot signal the coordinator");
  b->term_sent = true;
  xf_rb_maybe_end_loop(b);
}

static void on_tick(uv_timer_t *t) {
  bench *b = t->data;
  double now = xf_bench_now();
  if (b->stopping) {
    if (now > b->stop_deadline) close_all(b);
    xf_rb_maybe_end_loop(b);
    return;
  }
  if (b->driver) xf_rb_driver_tick(b);
  else if (b->tier) xf_rb_tier_tick(b);
  int status;
  if (b->failed || b->stopping) return;
  if (b->coord > 0 && waitpid(b->coord, &status, WNOHANG) == b->coord) {
    xf_rb_children[CHILD_COORD] = 0;
    b->coord = 0;
    xf_rb_bench_fail(b, "the coordinator exited during the run (status %d)",
                     WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    return;
  }
  if (now > b->deadline) {
    xf_rb_bench_fail(b, "the run took longer than --timeout %.0f s (job state: %s)",
                     b->o->timeout_s, b->user.last_state[0] ? b->user.last_state : "not submitted");
    return;
  }
  cli *u = &b->user;
  if (b->driver) return;
  if (u->st == CLI_READY && now >= u->next_action) {
    if (b->tier ? xf_rb_tier_all_ready(b) : b->n_announced == b->nsites) cli_submit(u);
  } else if (u->st == CLI_RUNNING && now >= u->next_action) {
    cli_query(u);
  }
}

static xf_conn_opts conn_opts(void *user) {
  xf_conn_opts o = {.on_connect = on_connect, .on_frame = on_frame, .on_drain = on_drain,
                    .on_close = on_close, .user = user,
                    .handshake_timeout_ms = BENCH_HANDSHAKE_MS};
  return o;
}

/* Runs the federated job; false with b->why on failure. */
bool xf_rb_run_rounds(bench *b) {
  xf_errctx err;
  xf_errctx_clear(&err);
  int n = b->nsites;
  if (uv_loop_init(&b->loop) != 0) {
    snprintf(b->why, sizeof(b->why), "cannot start the loop");
    b->failed = true;
    return false;
  }
  uv_timer_init(&b->loop, &b->tick);
  b->tick.data = b;
  uv_timer_start(&b->tick, on_tick, 20, 20);
  b->started = xf_bench_now();
  b->deadline = b->started + b->o->timeout_s;
  b->user.b = b;
  b->user.closed = true; /* until dialed */
  for (int i = 0; i < n; i++) b->sites[i].closed = true;
  bool ok = true;
  if (!b->driver) { /* the user, who submits the job and polls it */
    ok = xf_rb_make_tls(b->p, "researcher", &b->user.tls, &err) == XF_OK;
    xf_conn_opts uo = conn_opts(&b->user);
    if (ok && xf_dial(&b->loop, b->user.tls, b->host, b->port, &uo, &b->user.conn, &err) == XF_OK)
      b->user.closed = false;
    else
      ok = false;
  }
  for (int i = 0; i < n; i++) {
    b->sites[i].b = b;
    xf_rb_site_name(b->region, i, b->sites[i].name, sizeof(b->sites[i].name));
  }
  b->t_dial = xf_bench_now();
  if (!ok) xf_rb_bench_fail(b, "cannot connect: %s", err.msg);
  else dial_sites(b);
  uv_run(&b->loop, UV_RUN_DEFAULT);
  if (uv_loop_close(&b->loop) != 0) fprintf(stderr, "xfed-bench-round: handles left on the loop\n");
  for (int i = 0; i < n; i++) {
    site_drop_task(&b->sites[i]);
    xf_tls_free(b->sites[i].tls);
  }
  xf_tls_free(b->user.tls);
  return !b->failed;
}

/* Every round had every site, in its first attempt, and every site was asked
 * for the final evaluation; false with b->why otherwise. */
bool xf_rb_check_run(bench *b) {
  int n = b->o->sites;
  for (uint32_t r = 1; r <= b->o->rounds; r++) {
    const round_times *t = &b->rt[r];
    if (t->offers != n || t->final_acks != n || t->max_attempt != 1) {
      snprintf(b->why, sizeof(b->why),
               "round %u: %d offers, %d updates delivered, attempt %u (want %d, %d, 1)",
               (unsigned)r, t->offers, t->final_acks, (unsigned)t->max_attempt, n, n);
      return false;
    }
  }
  if (b->evals != n) {
    snprintf(b->why, sizeof(b->why), "%d of %d sites were asked for the final evaluation",
             b->evals, n);
    return false;
  }
  return true;
}
