/* SPDX-License-Identifier: Apache-2.0 */
/* The job machine's action list (coordinator/jobm_internal.h): what one
 * call on the machine tells its caller, with the arrays the actions point
 * to in two arenas that live until the next call. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "coordinator/jobm_internal.h"

/* ---- the action list ------------------------------------------------------------------------------ */

void xf__jm_begin_call(xf_jobm *m) {
  m->n_acts = 0;
  m->arena_len = 0;
  m->bytes_len = 0;
  m->oom = false;
  m->refused_step = false;
}

/* Points each action's arrays into the arenas (which may have moved while
 * they grew). */
xf_err xf__jm_end_call(xf_jobm *m, xf_errctx *err) {
  for (size_t i = 0; i < m->n_acts; i++) {
    xf_jobm_action *a = &m->acts[i];
    const jm_off *o = &m->offs[i];
    a->sites = a->n_sites ? m->arena + o->sites : NULL;
    a->blob = a->blob_len ? m->bytes + o->blob : NULL;
    a->u = a->n_u ? (const uint32_t *)(const void *)(m->bytes + o->u) : NULL;
    a->from = a->n_from ? (const uint32_t *)(const void *)(m->bytes + o->from) : NULL;
    a->sigs = a->n_sigs ? m->bytes + o->sigs : NULL;
    a->certs = a->certs_len ? m->bytes + o->certs : NULL;
    a->cert_lens = a->kind == XF_JOBM_SA_KEYS && a->n_sigs
                       ? (const uint32_t *)(const void *)(m->bytes + o->cert_lens)
                       : NULL;
  }
  if (m->oom) return xf_fail(err, XF_ENOMEM, "out of memory in the job machine");
  if (m->refused_step)
    return xf_fail(err, XF_EINTERNAL, "the job machine has no transition for %s",
                   m->refused_what);
  return XF_OK;
}

xf_jobm_action *xf__jm_push(xf_jobm *m, xf_jobm_action_kind kind, uint64_t carrier) {
  static xf_jobm_action sink;
  if (m->n_acts == m->cap_acts) {
    size_t cap = m->cap_acts ? 2 * m->cap_acts : 16;
    xf_jobm_action *a = xf_realloc(m->acts, cap * sizeof(*a));
    if (a) m->acts = a;
    jm_off *o = a ? xf_realloc(m->offs, cap * sizeof(*o)) : NULL;
    if (o) m->offs = o;
    if (!a || !o) {
      m->oom = true;
      memset(&sink, 0, sizeof(sink));
      return &sink;
    }
    m->cap_acts = cap;
  }
  xf_jobm_action *a = &m->acts[m->n_acts];
  memset(a, 0, sizeof(*a));
  memset(&m->offs[m->n_acts], 0, sizeof(m->offs[0]));
  m->n_acts++;
  a->kind = kind;
  a->carrier = carrier;
  a->round = xf_round_number(m->r);
  a->attempt = xf_round_attempt(m->r);
  return a;
}

jm_off *xf__jm_off_of(xf_jobm *m, const xf_jobm_action *a) {
  if (m->n_acts == 0 || a < m->acts || a >= m->acts + m->n_acts) return NULL;
  return &m->offs[a - m->acts];
}

/* Gives action a n sites (copied into the arena). */
void xf__jm_set_sites(xf_jobm *m, xf_jobm_action *a, const uint64_t *sites, size_t n) {
  jm_off *o = xf__jm_off_of(m, a);
  if (!n || !o) return;
  if (m->arena_len + n > m->arena_cap) {
    size_t cap = m->arena_cap ? m->arena_cap : 64;
    while (cap < m->arena_len + n) cap *= 2;
    uint64_t *g = xf_realloc(m->arena, cap * sizeof(*g));
    if (!g) {
      m->oom = true;
      return;
    }
    m->arena = g;
    m->arena_cap = cap;
  }
  memcpy(m->arena + m->arena_len, sites, n * sizeof(*sites));
  o->sites = m->arena_len;
  a->n_sites = n;
  m->arena_len += n;
}

size_t xf__jm_put_bytes(xf_jobm *m, const void *data, size_t len) {
  size_t at = (m->bytes_len + 7) & ~(size_t)7;
  if (at + len > m->bytes_cap) {
    size_t cap = m->bytes_cap ? m->bytes_cap : 4096;
    while (cap < at + len) cap *= 2;
    uint8_t *g = xf_realloc(m->bytes, cap);
    if (!g) {
      m->oom = true;
      return SIZE_MAX;
    }
    m->bytes = g;
    m->bytes_cap = cap;
  }
  if (len) memcpy(m->bytes + at, data, len);
  m->bytes_len = at + len;
  return at;
}

void xf__jm_note(xf_jobm_action *a, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(a->note, sizeof(a->note), fmt, ap);
  va_end(ap);
}

void xf__jm_set_msg(xf_jobm *m, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m->msg, sizeof(m->msg), fmt, ap);
  va_end(ap);
}

void xf__jm_participant(xf_jobm *m, uint64_t site, xf_participant_state st, uint64_t samples) {
  xf_jobm_action *a = xf__jm_push(m, XF_JOBM_PARTICIPANT, 0);
  a->site = site;
  a->state = st;
  a->samples = samples;
}
