/* SPDX-License-Identifier: Apache-2.0 */
/* The coordinator daemon's loop: its state opened and closed, listening,
 * the sites it knows and what they announce, signals and the tick that
 * drives rounds (coordinator/daemon.h, docs/coordinator.md). The
 * coordinator struct is this file's; the other files get its parts through
 * the functions below. Connections and their streams are peer.c's. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/alloc.h"
#include "base/log.h"
#include "coordinator/daemon_internal.h"
#include "base/file.h"

#define TICK_MS 200

/* The coordinator. Its handles are embedded and live as long as its loop;
 * what one other file owns (the connections, the link upstream, the
 * dashboard, the HTTP endpoint) is a pointer that file made, freed by it. */
struct xf__coord {
  uv_loop_t loop;
  xf_coord_config cfg;
  char name[XF_COORD_NAME_MAX]; /* from our certificate */
  xf_tls *tls;
  xf_listener *listener;
  xf_db *db;            /* global role only */
  xf_blob_store *blobs; /* global role only */
  xf__peers *peers;     /* peer.c's */
  xf__site *sites;
  /* The sites by id, open addressing (ids are hashes already): a lookup per
   * message must not walk a thousand sites. site_ix_cap is a power of two,
   * at least twice n_sites; 0 while no index could be made (sites are then
   * found by walking the list). */
  xf__site **site_ix;
  size_t site_ix_cap, n_sites;
  xf__run *runs;
  uint64_t next_stream; /* stream ids we hand out: even for models, odd for updates */
  uv_timer_t tick;
  uv_check_t pump;      /* after each loop turn: resume streams stalled on the budget */
  uv_signal_t sig_term, sig_int, sig_hup;
  xf_notify notify;     /* systemd: readiness, reloads, the watchdog */
  bool stopping;
  /* Caps, the buffer budget, and the running totals of what they refused
   * and closed (net/conn.h), for every connection of the process. */
  xf_conn_guard guard;
  xf_noise *noise;      /* central privacy: the aggregator's noise (CSPRNG-keyed) */
  /* The audit trail: the journal itself on the global role, STATE/audit.db
   * on a regional aggregator. */
  xf_db *audit;
  /* Global role: the policy version decisions are taken against (cached by
   * residency.c; reloaded when the version table moves on), NULL before the
   * first. */
  xf_policy *policy;
  /* The metrics and health endpoint (metrics.c), NULL without --metrics. */
  xf_http *http;
  /* The dashboard (dashboard.c), NULL without --dashboard. */
  xf__dashboard *dash;
  xf__stats stats;
  /* Regional role: the link upstream (upstream.c's; made for both roles,
   * dialing only on a regional aggregator). */
  xf__uplink *uplink;
};

double xf__now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

const xf_coord_config *xf__coord_cfg(const xf__coord *co) { return &co->cfg; }

const char *xf__coord_name(const xf__coord *co) { return co->name; }

uv_loop_t *xf__coord_loop(xf__coord *co) { return &co->loop; }

xf_tls *xf__coord_tls(const xf__coord *co) { return co->tls; }

xf_db *xf__coord_db(const xf__coord *co) { return co->db; }

xf_blob_store *xf__coord_blobs(const xf__coord *co) { return co->blobs; }

xf_db *xf__coord_audit(const xf__coord *co) { return co->audit; }

xf_noise *xf__coord_noise(const xf__coord *co) { return co->noise; }

xf_conn_guard *xf__coord_guard(xf__coord *co) { return &co->guard; }

bool xf__coord_stopping(const xf__coord *co) { return co->stopping; }

xf__stats *xf__coord_stats(xf__coord *co) { return &co->stats; }

xf__site *xf__coord_sites(const xf__coord *co) { return co->sites; }

xf__run **xf__coord_runs(xf__coord *co) { return &co->runs; }

xf__peers *xf__coord_peers(const xf__coord *co) { return co->peers; }

xf__uplink *xf__coord_uplink(const xf__coord *co) { return co->uplink; }

xf__dashboard *xf__coord_dashboard(const xf__coord *co) { return co->dash; }

xf_policy **xf__coord_policy(xf__coord *co) { return &co->policy; }

uint64_t xf_coord_site_id(const char *name) { return xf_admit_site_id(name); }

uint64_t xf__stream_id(xf__coord *co, bool update) {
  /* Even ids are models, odd ones updates; 0 is never used. */
  co->next_stream += 2;
  return co->next_stream | (update ? 1u : 0u);
}

static void site_ix_put(xf__site **ix, size_t cap, xf__site *s) {
  size_t i = (size_t)s->id & (cap - 1);
  while (ix[i]) i = (i + 1) & (cap - 1);
  ix[i] = s;
}

/* Adds s (new to co) to the index, growing it to keep the load under half;
 * without memory the index is dropped and lookups walk the list. */
static void site_ix_add(xf__coord *co, xf__site *s) {
  co->n_sites++;
  if (co->site_ix && 2 * co->n_sites <= co->site_ix_cap) {
    site_ix_put(co->site_ix, co->site_ix_cap, s);
    return;
  }
  size_t cap = co->site_ix_cap ? 2 * co->site_ix_cap : 64;
  while (2 * co->n_sites > cap) cap *= 2;
  xf__site **ix = xf_calloc(cap, sizeof(*ix));
  xf_free(co->site_ix);
  co->site_ix = ix;
  co->site_ix_cap = ix ? cap : 0;
  if (!ix) return;
  for (xf__site *t = co->sites; t; t = t->next) site_ix_put(ix, cap, t);
}

xf__site *xf__site_find(xf__coord *co, uint64_t id) {
  if (co->site_ix_cap) {
    for (size_t i = (size_t)id & (co->site_ix_cap - 1); co->site_ix[i];
         i = (i + 1) & (co->site_ix_cap - 1))
      if (co->site_ix[i]->id == id) return co->site_ix[i];
    return NULL;
  }
  for (xf__site *s = co->sites; s; s = s->next)
    if (s->id == id) return s;
  return NULL;
}

xf__site *xf__site_by_name(xf__coord *co, const char *name) {
  for (xf__site *s = co->sites; s; s = s->next)
    if (strcmp(s->name, name) == 0) return s;
  return NULL;
}

const char *xf__site_name(xf__coord *co, uint64_t id) {
  for (xf__site *s = co->sites; s; s = s->next) {
    if (s->id == id) return s->name;
    for (size_t i = 0; i < s->n_behind; i++)
      if (s->behind[i].id == id) return s->behind[i].name;
  }
  return NULL;
}

static void copy_label(char *dst, size_t n, const char *src) {
  snprintf(dst, n, "%s", src ? src : "");
}

/* The datasets of an announcement into *out (xf_calloc'ed; NULL when none). */
static size_t read_datasets(const Xfed__SiteAnnounce *a, xf__dataset **out) {
  *out = NULL;
  if (!a->n_datasets) return 0;
  xf__dataset *v = xf_calloc(a->n_datasets, sizeof(*v));
  if (!v) return 0;
  for (size_t i = 0; i < a->n_datasets; i++) {
    const Xfed__SiteAnnounce__Dataset *d = a->datasets[i];
    xf__dataset *o = &v[i];
    copy_label(o->name, sizeof(o->name), d->name);
    copy_label(o->classification, sizeof(o->classification), d->classification);
    for (size_t t = 0; t < d->n_tags && t < XF_JOB_TAGS_MAX; t++)
      copy_label(o->tags[o->n_tags++], XF_JOB_IDENT_MAX, d->tags[t]);
    o->train_records = d->train_records;
    o->test_records = d->test_records;
    o->classes = d->classes;
    o->h = d->height;
    o->w = d->width;
    o->c = d->channels;
  }
  *out = v;
  return a->n_datasets;
}

static void free_behind(xf__site *s) {
  for (size_t i = 0; i < s->n_behind; i++) xf_free(s->behind[i].datasets);
  xf_free(s->behind);
  s->behind = NULL;
  s->n_behind = 0;
}

/* The datasets a site announced (a site: its own; a regional aggregator:
 * those of each site behind it), recorded in the journal in one
 * transaction: those the current policy does not hold become (or stay)
 * pending. Only the global coordinator keeps a policy. */
static void record_datasets(xf__coord *co, const xf__site *s) {
  size_t n_sites = 0, n_sets = 0;
  if (!s->regional) {
    n_sites = 1;
    n_sets = s->n_datasets;
  }
  for (size_t i = 0; s->regional && i < s->n_behind; i++)
    if (s->behind[i].fresh) {
      n_sites++;
      n_sets += s->behind[i].n_datasets;
    }
  if (s->regional && n_sites == 0) return;
  xf_errctx err = {0};
  const xf_policy *policy = NULL;
  xf_journal_site_datasets *sites = n_sites ? xf_calloc(n_sites, sizeof(*sites)) : NULL;
  xf_journal_announced *list = n_sets ? xf_calloc(n_sets, sizeof(*list)) : NULL;
  const char **tags = n_sets ? xf_calloc(n_sets * XF_JOB_TAGS_MAX, sizeof(*tags)) : NULL;
  if ((n_sites && !sites) || (n_sets && (!list || !tags))) {
    XF_ERROR("journal_failed", "doing=datasets_seen site=%s reason=\"out of memory\"", s->name);
    goto out;
  }
  size_t k = 0;
  for (size_t i = 0, b_i = 0; i < n_sites; i++) {
    while (s->regional && !s->behind[b_i].fresh) b_i++;
    const xf__behind *b = s->regional ? &s->behind[b_i++] : NULL;
    const xf__dataset *ds = b ? b->datasets : s->datasets;
    size_t n = b ? b->n_datasets : s->n_datasets;
    sites[i] = (xf_journal_site_datasets){.site = b ? b->name : s->name,
                                          .region = b ? b->region : s->region,
                                          .ds = list ? &list[k] : NULL,
                                          .n = n};
    for (size_t j = 0; j < n; j++, k++) {
      const char **t = &tags[k * XF_JOB_TAGS_MAX];
      for (uint32_t m = 0; m < ds[j].n_tags; m++) t[m] = ds[j].tags[m];
      list[k] = (xf_journal_announced){.name = ds[j].name,
                                       .classification = ds[j].classification,
                                       .tags = t,
                                       .n_tags = ds[j].n_tags,
                                       .train_records = ds[j].train_records,
                                       .test_records = ds[j].test_records,
                                       .classes = ds[j].classes,
                                       .height = ds[j].h,
                                       .width = ds[j].w,
                                       .channels = ds[j].c};
    }
  }
  if (xf__policy_current(co, &policy, &err) != XF_OK ||
      xf_journal_datasets_seen(co->db, sites, n_sites, policy, xf__now(), &err) != XF_OK)
    XF_ERROR("journal_failed", "doing=datasets_seen site=%s reason=\"%s\"", s->name, err.msg);
out:
  xf_free(tags);
  xf_free(list);
  xf_free(sites);
}

/* A site's or regional's SiteAnnounce: who it is must match its
 * certificate; what it holds replaces what it said before. */
/* A site's or regional's SiteAnnounce, its identity checked (peer.c):
 * what it holds replaces what it said before. */
/* A site behind an aggregator whose announcement repeats what the same
 * session said before is written to the journal again only after this
 * long: an aggregator names all its sites in every announcement (every
 * 0.2 s while sites connect), and rewriting a thousand unchanged rows each
 * time made the global coordinator's work grow with the square of the
 * sites behind an aggregator. Their last_seen is at most this stale. */
#define XF__REJOURNAL_S 60.0

static int by_behind_id(const void *x, const void *y) {
  const xf__behind *a = *(const xf__behind *const *)x, *b = *(const xf__behind *const *)y;
  return (a->id > b->id) - (a->id < b->id);
}

static bool same_datasets(const xf__dataset *a, size_t na, const xf__dataset *b, size_t nb) {
  return na == nb && (na == 0 || memcmp(a, b, na * sizeof(*a)) == 0);
}

/* Marks each entry of s->behind fresh unless `old` (the previous
 * announcement of the same session, n_old entries) had it alike and it
 * was journaled less than XF__REJOURNAL_S ago. */
static void mark_fresh(xf__site *s, const xf__behind *old, size_t n_old, double now) {
  const xf__behind **ix = n_old ? xf_calloc(n_old, sizeof(*ix)) : NULL;
  if (ix) {
    for (size_t i = 0; i < n_old; i++) ix[i] = &old[i];
    qsort(ix, n_old, sizeof(*ix), by_behind_id);
  }
  for (size_t i = 0; i < s->n_behind; i++) {
    xf__behind *o = &s->behind[i];
    const xf__behind *prev = NULL;
    size_t lo = 0, hi = ix ? n_old : 0;
    while (lo < hi) {
      size_t mid = lo + (hi - lo) / 2;
      if (ix[mid]->id < o->id) lo = mid + 1;
      else hi = mid;
    }
    if (ix && lo < n_old && ix[lo]->id == o->id) prev = ix[lo];
    bool alike = prev && strcmp(prev->name, o->name) == 0 &&
                 strcmp(prev->region, o->region) == 0 &&
                 same_datasets(prev->datasets, prev->n_datasets, o->datasets, o->n_datasets);
    o->fresh = !(alike && now - prev->journaled < XF__REJOURNAL_S);
    o->journaled = o->fresh ? now : prev->journaled;
  }
  xf_free(ix);
}

void xf__site_announce(xf__coord *co, xf__peer *p, const Xfed__SiteAnnounce *a) {
  const char *name = a->site ? a->site : "";
  const char *region = a->region ? a->region : "";
  uint64_t id = xf_coord_site_id(name);
  xf__site *s = xf__site_find(co, id);
  if (!s) {
    s = xf_calloc(1, sizeof(*s));
    if (!s) {
      xf_conn_close(xf__peer_conn(p));
      return;
    }
    s->id = id;
    copy_label(s->name, sizeof(s->name), name);
    s->next = co->sites;
    co->sites = s;
    site_ix_add(co, s);
  }
  copy_label(s->region, sizeof(s->region), region);
  s->regional = xf__peer_kind_of(p) == XF__PEER_REGIONAL;
  const bool same_session = s->peer == p;
  if (s->peer && s->peer != p) {
    XF_INFO("session_replaced", "site=%s old=%s new=%s", s->name,
            xf_conn_peer_addr(xf__peer_conn(s->peer)), xf_conn_peer_addr(xf__peer_conn(p)));
    xf__peer *old = s->peer;
    xf__peer_set_site(old, NULL);
    xf__stream_drop(old, NULL);
    xf_conn_close(xf__peer_conn(old));
  }
  s->peer = p;
  xf__peer_set_site(p, s);
  xf_free(s->datasets);
  s->n_datasets = read_datasets(a, &s->datasets);
  /* The previous announcement, kept until this one is compared with it. */
  xf__behind *old = s->behind;
  size_t n_old = s->n_behind;
  s->behind = NULL;
  s->n_behind = 0;
  /* A regional aggregator names the sites behind it with their own
   * announcements; only sites of its region count (its certificate's). */
  if (s->regional && a->n_behind && (s->behind = xf_calloc(a->n_behind, sizeof(*s->behind)))) {
    for (size_t i = 0; i < a->n_behind; i++) {
      const Xfed__SiteAnnounce *b = a->behind[i];
      if (!b || !b->site || !*b->site || strcmp(b->region ? b->region : "", s->region) != 0)
        continue;
      xf__behind *o = &s->behind[s->n_behind++];
      copy_label(o->name, sizeof(o->name), b->site);
      copy_label(o->region, sizeof(o->region), b->region);
      o->id = xf_coord_site_id(o->name);
      o->n_datasets = read_datasets(b, &o->datasets);
    }
  }
  const double now = xf__now();
  mark_fresh(s, same_session ? old : NULL, same_session ? n_old : 0, now);
  for (size_t i = 0; i < n_old; i++) xf_free(old[i].datasets);
  xf_free(old);
  if (co->db) {
    xf_errctx err = {0};
    /* An aggregator names every site behind it each time: one transaction
     * for them all, not one commit a site. */
    size_t fresh = 0;
    for (size_t i = 0; i < s->n_behind; i++) fresh += s->behind[i].fresh;
    bool batch = fresh && xf_db_begin(co->db, &err) == XF_OK;
    if (xf_journal_site_seen(co->db, s->id, s->name, s->region, s->regional, now, &err) != XF_OK)
      XF_ERROR("journal_failed", "doing=site_seen reason=\"%s\"", err.msg);
    for (size_t i = 0; i < s->n_behind; i++)
      if (s->behind[i].fresh &&
          xf_journal_site_seen(co->db, s->behind[i].id, s->behind[i].name, s->behind[i].region,
                               false, now, &err) != XF_OK)
        XF_ERROR("journal_failed", "doing=site_seen reason=\"%s\"", err.msg);
    if (batch && xf_db_commit(co->db, &err) != XF_OK) {
      XF_ERROR("journal_failed", "doing=site_seen reason=\"%s\"", err.msg);
      xf_db_rollback(co->db);
    }
    if (!co->cfg.regional) record_datasets(co, s);
  }
  XF_INFO("site_announced", "site=%s region=%s kind=%s datasets=%zu sites_behind=%zu", s->name,
          s->region, s->regional ? "regional" : "site", s->n_datasets, s->n_behind);
  if (co->cfg.regional) xf__upstream_announce_soon(co);
  xf__runs_link(co, s, true);
}


/* ---- signals and the tick ------------------------------------------------------------ */

static void close_walk(uv_handle_t *h, void *arg) {
  (void)arg;
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

static void stop(xf__coord *co, const char *why) {
  if (co->stopping) return;
  co->stopping = true;
  XF_INFO("coordinator_stopping", "reason=%s", why);
  xf_notify_stopping(&co->notify);
  xf__metrics_stop(&co->http);
  xf__dashboard_stop(&co->dash);
  if (co->listener) xf_listener_close(co->listener, NULL);
  co->listener = NULL;
  if (co->cfg.regional) xf__upstream_stop(co);
  xf__peers_close(co);
  uv_timer_stop(&co->tick);
  uv_close((uv_handle_t *)&co->tick, NULL);
  uv_check_stop(&co->pump);
  uv_close((uv_handle_t *)&co->pump, NULL);
  uv_close((uv_handle_t *)&co->sig_term, NULL);
  uv_close((uv_handle_t *)&co->sig_int, NULL);
  uv_close((uv_handle_t *)&co->sig_hup, NULL);
}

static void on_signal(uv_signal_t *h, int signum) {
  xf__coord *co = h->data;
  if (signum == SIGHUP) {
    /* Sessions already open stay; handshakes from now on meet the new CRL.
     * A CRL that does not load leaves the old one in force. */
    xf_errctx err = {0};
    xf_notify_reloading();
    if (xf_tls_reload_crl(co->tls, &err) != XF_OK) {
      XF_ERROR("crl_reload_failed", "reason=\"%s\" file=\"%s\" kept=\"the CRL loaded before\"",
               err.msg, err.file);
      xf_notify_ready("serving on port %d; the CRL reload failed (%s), the previous CRL is in "
                      "force", xf_listener_port(co->listener), err.msg);
    } else {
      xf_notify_ready("serving on port %d; CRL reloaded", xf_listener_port(co->listener));
    }
    return;
  }
  stop(co, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

static void on_tick(uv_timer_t *t) {
  xf__coord *co = t->data;
  if (co->stopping) return;
  xf__runs_tick(co);
  if (co->cfg.regional) xf__upstream_tick(co);
}

/* ---- start and stop ----------------------------------------------------------------------- */

static xf_err write_port_file(const xf__coord *co, xf_errctx *err) {
  if (!co->cfg.port_file[0]) return XF_OK;
  char buf[32];
  int n = snprintf(buf, sizeof(buf), "%d\n", xf_listener_port(co->listener));
  return xf_file_write_atomic(co->cfg.port_file, buf, (size_t)n, 0644, err);
}

static xf_err our_name(xf__coord *co, xf_errctx *err) {
  X509 *cert = NULL;
  XF_GUARD(xf_pki_cert_load(co->cfg.cert, &cert, err));
  xf_spiffe_id id;
  xf_err rc = xf_pki_peer_identity(cert, &id, err);
  X509_free(cert);
  XF_GUARD(rc);
  if (id.kind != XF_PKI_KIND_COORDINATOR)
    return xf_fail(err, XF_EINVAL, "%s is a %s certificate; xfed-coord needs one issued with "
                                   "'xfed pki issue --kind coordinator'",
                   co->cfg.cert, xf_pki_kind_name(id.kind));
  if (co->cfg.regional && strcmp(id.region, co->cfg.region) != 0)
    return xf_fail(err, XF_EINVAL,
                   "--region is %s but the certificate %s is for region '%s'; issue one with "
                   "'xfed pki issue --kind coordinator --region %s'",
                   co->cfg.region, co->cfg.cert, id.region, co->cfg.region);
  if (!co->cfg.regional && id.region[0])
    return xf_fail(err, XF_EINVAL,
                   "the certificate %s is a regional aggregator's (region %s); run with --role "
                   "regional --region %s, or issue a global one without --region",
                   co->cfg.cert, id.region, id.region);
  snprintf(co->name, sizeof(co->name), "%s", id.name);
  return XF_OK;
}

/* A journal that fails its integrity check, or that SQLite cannot read as
 * a database: refused at start, logged, with the way back. */
static xf_err journal_damaged(const xf__coord *co, const char *path, xf_errctx *err) {
  char damage[sizeof(err->msg)];
  snprintf(damage, sizeof(damage), "%s", err->msg);
  XF_ERROR("journal_damaged", "file=%s damage=\"%s\"", path, damage);
  xf_errctx_file(err, path);
  /* The file is err's; the message has room for the damage and the way
   * back (the log line above has the damage whole). */
  return xf_fail(err, XF_EINTEGRITY,
                 "the journal is damaged (%.160s); the coordinator does not start on it. "
                 "Restore the last backup: move coord.db, coord.db-wal and coord.db-shm out "
                 "of %.60s, copy the FILE that 'xfed-coord backup --state %.60s --out FILE' "
                 "made there as coord.db, and start again",
                 damage, co->cfg.state_dir, co->cfg.state_dir);
}

static xf_err open_state(xf__coord *co, xf_errctx *err) {
  if (mkdir(co->cfg.state_dir, 0700) != 0 && errno != EEXIST)
    return xf_fail(err, XF_EIO, "cannot create the state directory %s: %s", co->cfg.state_dir,
                   strerror(errno));
  struct stat st;
  if (stat(co->cfg.state_dir, &st) == 0 && !S_ISDIR(st.st_mode)) {
    xf_errctx_file(err, co->cfg.state_dir);
    return xf_fail(err, XF_EEXISTS, "is %s, not a directory: give the coordinator's state "
                   "directory with --state", xf_file_kind(st.st_mode));
  }
  char path[XF_COORD_PATH_MAX + 32];
  if (co->cfg.regional) {
    /* A regional aggregator keeps no journal, only its audit trail. */
    snprintf(path, sizeof(path), "%s/audit.db", co->cfg.state_dir);
    return xf_audit_open(path, &co->audit, err);
  }
  snprintf(path, sizeof(path), "%s/coord.db", co->cfg.state_dir);
  xf_err rc = xf_journal_open(path, &co->db, err);
  /* SQLite's words for a file it cannot read as a database at all. */
  bool unreadable = rc == XF_EDB && (strstr(err->msg, "malformed") || strstr(err->msg, "not a "
                                                                                      "database"));
  if (rc == XF_OK) rc = xf_db_quick_check(co->db, err);
  else if (!unreadable) return rc;
  /* Only damage is answered with the way back: a check that fails for
   * another reason (I/O, locks) is reported as it is. */
  if (rc == XF_EINTEGRITY || (rc != XF_OK && unreadable)) return journal_damaged(co, path, err);
  if (rc != XF_OK) return rc;
  co->audit = co->db;
  char blobs[XF_COORD_PATH_MAX + 32];
  snprintf(blobs, sizeof(blobs), "%s/blobs", co->cfg.state_dir);
  XF_GUARD(xf_blob_store_open(blobs, &co->blobs, err));
  if ((rc = xf_journal_check_blobs(co->db, co->blobs, err)) == XF_ENOENT) {
    XF_ERROR("journal_damaged", "file=%s damage=\"%s\"", blobs, err->msg);
    char damage[sizeof(err->msg)]; /* xf_fail writes err->msg: not from itself */
    snprintf(damage, sizeof(damage), "%s", err->msg);
    xf_errctx_file(err, blobs);
    return xf_fail(err, XF_EINTEGRITY,
                   "%.600s; the coordinator does not start without the models it resumes "
                   "from. Restore %s from the copy taken together with the journal's backup "
                   "('xfed-coord backup' copies only the journal), then start again",
                   damage, blobs);
  }
  if (rc != XF_OK) return rc;
  /* Finish removals a crash interrupted, and apply the setting to every
   * job (it may have been lowered since they ran). A failure here leaves
   * checkpoints on disk, never loses one: it is logged, not fatal. */
  xf_retention_result pruned = {0};
  xf_errctx perr = {0};
  if (xf_retention_prune_all(co->db, co->blobs, co->cfg.checkpoint_retention, xf__now(), &pruned,
                             &perr) != XF_OK)
    XF_WARN("checkpoints_not_pruned", "reason=\"%s\"", perr.msg);
  else if (pruned.rounds || pruned.blobs)
    XF_INFO("checkpoints_pruned", "job=all rounds=%u blobs=%u bytes=%" PRIu64, pruned.rounds,
            pruned.blobs, pruned.bytes);
  return XF_OK;
}

/* The caps and the budget every connection runs under: the total fits the
 * descriptor limit (raised toward the hard limit when it is lower), so the
 * listener, the journal and the blob store always have descriptors left;
 * the caps not configured follow from it (xf_conn_caps_default): handshakes
 * in flight are bounded in all and per address, authenticated peers only by
 * the total, so a thousand sites behind one address all connect. */
static void guard_connections(xf__coord *co) {
  size_t caps[XF_CONN_CAP_COUNT];
  memcpy(caps, co->cfg.connection_caps, sizeof(caps));
  size_t wanted = caps[XF_CONN_CAP_TOTAL] ? caps[XF_CONN_CAP_TOTAL] : XF_CONN_MAX_CONNS;
  size_t budget = co->cfg.buffer_budget ? co->cfg.buffer_budget : XF_CONN_BUFFER_BUDGET;
  size_t descriptors = 0;
  caps[XF_CONN_CAP_TOTAL] = xf_conn_fit_descriptors(wanted, &descriptors);
  xf_conn_caps_default(caps);
  if (caps[XF_CONN_CAP_TOTAL] < wanted)
    XF_WARN("connection_cap_lowered",
            "max_connections=%zu configured=%zu descriptors=%zu reserve=%u reason=\"the descriptor "
            "limit leaves room for %zu connections; raise it (ulimit -n, systemd LimitNOFILE=) "
            "to at least %zu\"",
            caps[XF_CONN_CAP_TOTAL], wanted, descriptors, XF_CONN_FD_RESERVE,
            caps[XF_CONN_CAP_TOTAL], wanted + XF_CONN_FD_RESERVE);
  xf_conn_guard_init(&co->guard, caps, budget);
  char listed[512];
  size_t n = 0;
  for (int i = 0; i < XF_CONN_CAP_COUNT && n < sizeof(listed); i++)
    n += (size_t)snprintf(listed + n, sizeof(listed) - n, "%s=%zu ",
                          xf_conn_cap_name((xf_conn_cap)i), caps[i]);
  const xf_conn_opts *o = xf__conn_opts(co, true);
  XF_INFO("connection_limits",
          "%sdescriptors=%zu buffer_budget=%zu handshake_timeout_ms=%u min_frame_rate=%u "
          "frame_rate_window_ms=%u frame_grace_ms=%u",
          listed, descriptors, budget,
          o->handshake_timeout_ms ? o->handshake_timeout_ms : XF_CONN_HANDSHAKE_TIMEOUT_MS,
          o->progress.min_rate ? o->progress.min_rate : XF_PROGRESS_MIN_RATE,
          o->progress.window_ms ? o->progress.window_ms : XF_PROGRESS_WINDOW_MS,
          o->progress.grace_ms ? o->progress.grace_ms : XF_PROGRESS_GRACE_MS);
}

static void free_site(xf__site *s) {
  xf_free(s->datasets);
  free_behind(s);
  xf_free(s);
}

/* The tick, the pump after each loop turn, and the signals. */
static void start_handles(xf__coord *co) {
  uv_timer_init(&co->loop, &co->tick);
  co->tick.data = co;
  uv_check_init(&co->loop, &co->pump);
  co->pump.data = co;
  uv_check_start(&co->pump, xf__peers_on_pump);
  uv_timer_start(&co->tick, on_tick, TICK_MS, TICK_MS);
  uv_signal_t *sigs[] = {&co->sig_term, &co->sig_int, &co->sig_hup};
  int nums[] = {SIGTERM, SIGINT, SIGHUP};
  for (int i = 0; i < 3; i++) {
    uv_signal_init(&co->loop, sigs[i]);
    sigs[i]->data = co;
    uv_signal_start(sigs[i], on_signal, nums[i]);
  }
}

static void log_started(const xf__coord *co) {
  XF_INFO("coordinator_started",
          "name=%s role=%s region=%s residency_policy=%s listen=%s port=%d federation=%s",
          co->name, co->cfg.regional ? "regional" : "global",
          co->cfg.region[0] ? co->cfg.region : "-",
          co->cfg.regional ? "from-tasks" : co->cfg.residency_off ? "off" : "enforce",
          co->cfg.listen_host, xf_listener_port(co->listener), xf_tls_federation(co->tls));
  if (!co->cfg.regional && co->cfg.residency_off)
    XF_WARN("residency_policy_off", "reason=\"started with --residency-policy off: every site of "
            "a job's dataset is eligible, wherever it is\"");
}

/* What the bounds on connections did over the whole run. */
static void log_connection_totals(const xf_conn_guard *g) {
  XF_INFO("connection_totals",
          "accepted=%llu refused_max_connections=%llu refused_max_connections_per_address=%llu "
          "dropped_unauthenticated=%llu ended_handshake=%llu ended_slow=%llu ended_frame=%llu "
          "ended_idle=%llu budget_peak=%zu budget_waits=%llu",
          (unsigned long long)g->accepted, (unsigned long long)g->refused[XF_CONN_CAP_TOTAL],
          (unsigned long long)g->refused[XF_CONN_CAP_PER_ADDRESS],
          (unsigned long long)g->ended[XF_CONN_END_DROPPED],
          (unsigned long long)g->ended[XF_CONN_END_HANDSHAKE],
          (unsigned long long)g->ended[XF_CONN_END_SLOW],
          (unsigned long long)g->ended[XF_CONN_END_FRAME],
          (unsigned long long)g->ended[XF_CONN_END_IDLE], g->budget.peak,
          (unsigned long long)g->budget.waits);
}

/* Everything co holds once its loop is closed, and co itself. */
static void free_state(xf__coord *co) {
  xf__runs_free(co);
  while (co->sites) {
    xf__site *s = co->sites;
    co->sites = s->next;
    free_site(s);
  }
  xf_free(co->site_ix);
  co->site_ix = NULL;
  co->site_ix_cap = co->n_sites = 0;
  xf__peers_free(co->peers);
  xf__uplink_free(co->uplink);
  xf_noise_free(co->noise);
  xf_blob_store_close(co->blobs);
  if (co->audit) {
    xf_errctx kerr = {0};
    if (xf_audit_keeper_stop(co->audit, xf__now(), &kerr) != XF_OK)
      XF_WARN("audit_checkpoint_failed", "when=stop reason=\"%s\"", kerr.msg);
  }
  if (co->audit != co->db) xf_db_close(co->audit);
  xf_db_close(co->db);
  xf_policy_free(co->policy);
  xf_tls_free(co->tls);
  xf_free(co);
}

xf_err xf_coord_run(const xf_coord_config *cfg, xf_errctx *err) {
  xf__coord *co = xf_calloc(1, sizeof(*co));
  if (!co) return xf_fail(err, XF_ENOMEM, "out of memory");
  co->peers = xf__peers_new();
  co->uplink = xf__uplink_new();
  if (!co->peers || !co->uplink) {
    free_state(co);
    return xf_fail(err, XF_ENOMEM, "out of memory");
  }
  co->cfg = *cfg;
  xf__peers_serve(co);
  xf__stats_init(co);
  if (!co->cfg.max_staged) co->cfg.max_staged = 4;
  if (!(co->cfg.resume_grace_s > 0)) co->cfg.resume_grace_s = 30;
  if (!(co->cfg.eval_timeout_s > 0)) co->cfg.eval_timeout_s = 120;
  xf_err rc = XF_OK;
  bool loop_up = false;
  /* A --port-file that may not be replaced is refused before anything starts. */
  if (co->cfg.port_file[0] && (rc = xf_file_check_target(co->cfg.port_file, err)) != XF_OK)
    goto out;
  if ((rc = our_name(co, err)) != XF_OK) goto out;
  xf_tls_config tc = {co->cfg.cert, co->cfg.key, co->cfg.ca, co->cfg.crl};
  if ((rc = xf_tls_new(&tc, &co->tls, err)) != XF_OK) goto out;
  if ((rc = open_state(co, err)) != XF_OK) goto out;
  /* From here a copy of the trail's main file alone says that it was taken
   * from a running daemon (policy/audit.h). */
  if ((rc = xf_audit_keeper_start(co->audit, xf__now(), err)) != XF_OK) goto out;
  if (!co->cfg.regional && xf_noise_new_random(&co->noise) != XF_OK) {
    rc = xf_fail(err, XF_ENOMEM, "cannot set up the noise generator (secure memory)");
    goto out;
  }
  if (uv_loop_init(&co->loop) != 0) {
    rc = xf_fail(err, XF_EIO, "cannot start the event loop");
    goto out;
  }
  loop_up = true;
  guard_connections(co);
  if ((rc = xf_listen(&co->loop, co->tls, co->cfg.listen_host, co->cfg.listen_port,
                      xf__conn_opts(co, true), &co->listener, err)) != XF_OK)
    goto out;
  xf_listener_set_user(co->listener, co);
  if ((rc = write_port_file(co, err)) != XF_OK) goto out;
  if ((rc = xf__metrics_start(co, &co->http, err)) != XF_OK) goto out;
  if ((rc = xf__dashboard_start(co, &co->dash, err)) != XF_OK) goto out;
  start_handles(co);
  log_started(co);
  if (co->cfg.regional)
    xf__upstream_start(co);
  else
    xf__runs_schedule(co);
  /* Listening, with the journal recovered and its runs resumed: ready. */
  xf_notify_start(&co->notify, &co->loop);
  xf_notify_ready("%s %s serving on %s:%d", co->cfg.regional ? "regional aggregator" : "coordinator",
                  co->name, co->cfg.listen_host, xf_listener_port(co->listener));
  uv_run(&co->loop, UV_RUN_DEFAULT);
  log_connection_totals(&co->guard);
  XF_INFO("coordinator_stopped", "name=%s", co->name);

out:
  if (loop_up) {
    if (!co->stopping) {
      if (co->listener) xf_listener_close(co->listener, NULL);
      co->listener = NULL;
    }
    xf__metrics_stop(&co->http);
    xf__dashboard_stop(&co->dash);
    uv_walk(&co->loop, close_walk, NULL);
    uv_run(&co->loop, UV_RUN_DEFAULT);
    uv_loop_close(&co->loop);
  }
  free_state(co);
  xf__peers_serve(NULL);
  return rc;
}

xf_err xf_coord_backup(const char *state_dir, const char *dest, xf_errctx *err) {
  /* A global coordinator keeps its journal (with the trail) in coord.db; a
   * regional aggregator keeps only its trail, in audit.db. */
  char journal[XF_COORD_PATH_MAX + 32], trail[XF_COORD_PATH_MAX + 32];
  snprintf(journal, sizeof(journal), "%s/coord.db", state_dir);
  snprintf(trail, sizeof(trail), "%s/audit.db", state_dir);
  struct stat st;
  bool global = stat(journal, &st) == 0;
  if (!global && stat(trail, &st) != 0)
    return xf_fail(err, XF_ENOENT, "no journal at %s and no audit trail at %s: is --state the "
                                   "state directory of a coordinator or a regional aggregator?",
                   journal, trail);
  xf_db *db = NULL;
  XF_GUARD(global ? xf_journal_open(journal, &db, err) : xf_audit_open(trail, &db, err));
  xf_err rc = xf_db_backup(db, dest, err);
  xf_db_close(db);
  return rc;
}
