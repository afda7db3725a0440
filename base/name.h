/* SPDX-License-Identifier: Apache-2.0 */
/* The grammar of names and addresses: dataset names and tags, the DNS
 * labels that name sites, regions and federations (and make up SPIFFE IDs,
 * crypto/pki.h), and HOST:PORT. One grammar, so that the CLI, the site's
 * site.json, the coordinator's flags and the PKI accept the same words. */
#ifndef XF_BASE_NAME_H
#define XF_BASE_NAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/result.h"

/* The longest name or label (a DNS label's limit). */
#define XF_NAME_MAX 63
/* The longest host name (the DNS limit). */
#define XF_HOST_MAX 253

/* True when s is a dataset name or tag: 1..63 of lowercase letters, digits,
 * '-' and '_', starting with a letter or digit (the rule of job specs and
 * policies). NULL is not one. */
bool xf_name_valid(const char *s);

/* True when s is a label: a site, region or federation name, 1..63
 * lowercase letters, digits and '-', neither first nor last (a DNS label,
 * as in a SPIFFE ID). NULL is not one. */
bool xf_label_valid(const char *s);

/* What is wrong with the n bytes at s (borrowed, need not be terminated) as
 * a label, in words that follow "'S' " ("is empty", "must be lowercase",
 * ...), or NULL when they are one. */
const char *xf_label_problem(const char *s, size_t n);

/* Parses HOST:PORT: HOST a DNS name, an IPv4 address or a bracketed IPv6
 * address, PORT 1..65535. XF_EINVAL saying what is wrong otherwise. host
 * receives the host without brackets (at least XF_HOST_MAX + 1 bytes). */
xf_err xf_address_parse(const char *s, char *host, size_t host_len, uint16_t *port,
                        xf_errctx *err) XF_WARN_UNUSED;

/* xf_address_parse's flags. */
#define XF_ADDRESS_PORT0 1u    /* PORT may be 0: a listener picks a free one */
#define XF_ADDRESS_LOOPBACK 2u /* "localhost" is read as 127.0.0.1 (for numeric-only sockets) */

/* xf_address_parse with flags (XF_ADDRESS_*; 0: xf_address_parse itself). */
xf_err xf_address_parse_as(const char *s, unsigned flags, char *host, size_t host_len,
                           uint16_t *port, xf_errctx *err) XF_WARN_UNUSED;

#endif
