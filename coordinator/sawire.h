/* SPDX-License-Identifier: Apache-2.0 */
/* A site's secure-aggregation frames (net/xfed.proto) as the inputs of the
 * machine that takes them (coordinator/saphase.h). coordinator/host.c
 * passes them through these functions, and tests/fuzz/fuzz_secagg_server.c
 * fuzzes the same ones: a frame's lists reach the machine with their own
 * lengths, whatever the frame says. */
#ifndef XF_COORDINATOR_SAWIRE_H
#define XF_COORDINATOR_SAWIRE_H

#include "base/result.h"
#include "coordinator/saphase.h"
#include "net/xfed.pb-c.h"

/* A SecAggAdvert's keys; the fields point into a. */
xf_saphase_keys xf_sawire_keys(const Xfed__SecAggAdvert *a);

/* A SecAggShares' three lists, each with its length as the frame carries
 * it. The pointer arrays are allocated; the bytes stay m's. XF_ENOMEM
 * leaves *out empty. Free with xf_sawire_shares_free. */
xf_err xf_sawire_shares(const Xfed__SecAggShares *m, xf_saphase_shares_msg *out,
                        xf_errctx *err) XF_WARN_UNUSED;
void xf_sawire_shares_free(xf_saphase_shares_msg *msg);

#endif
