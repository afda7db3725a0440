/* SPDX-License-Identifier: Apache-2.0 */
#include "coordinator/sawire.h"

#include <string.h>

#include "base/alloc.h"

xf_saphase_keys xf_sawire_keys(const Xfed__SecAggAdvert *a) {
  return (xf_saphase_keys){.advert = a->advert.data,
                           .advert_len = a->advert.len,
                           .sig = a->signature.data,
                           .sig_len = a->signature.len,
                           .cert = a->certificate.data,
                           .cert_len = a->certificate.len};
}

xf_err xf_sawire_shares(const Xfed__SecAggShares *m, xf_saphase_shares_msg *out,
                        xf_errctx *err) {
  memset(out, 0, sizeof(*out));
  size_t n_cts = m->n_ciphertexts, n_sigs = m->n_signatures;
  const uint8_t **cts = xf_calloc(n_cts ? n_cts : 1, sizeof(*cts));
  size_t *ct_lens = xf_calloc(n_cts ? n_cts : 1, sizeof(*ct_lens));
  const uint8_t **sigs = xf_calloc(n_sigs ? n_sigs : 1, sizeof(*sigs));
  size_t *sig_lens = xf_calloc(n_sigs ? n_sigs : 1, sizeof(*sig_lens));
  if (!cts || !ct_lens || !sigs || !sig_lens) {
    xf_free(cts);
    xf_free(ct_lens);
    xf_free(sigs);
    xf_free(sig_lens);
    return xf_fail(err, XF_ENOMEM, "no memory for a shares message of %zu ciphertexts", n_cts);
  }
  for (size_t k = 0; k < n_cts; k++) {
    cts[k] = m->ciphertexts[k].data;
    ct_lens[k] = m->ciphertexts[k].len;
  }
  for (size_t k = 0; k < n_sigs; k++) {
    sigs[k] = m->signatures[k].data;
    sig_lens[k] = m->signatures[k].len;
  }
  *out = (xf_saphase_shares_msg){.to = m->to,
                                 .n_to = m->n_to,
                                 .cts = cts,
                                 .ct_lens = ct_lens,
                                 .n_cts = n_cts,
                                 .sigs = sigs,
                                 .sig_lens = sig_lens,
                                 .n_sigs = n_sigs};
  return XF_OK;
}

void xf_sawire_shares_free(xf_saphase_shares_msg *msg) {
  if (!msg) return;
  xf_free((void *)msg->cts);
  xf_free((void *)msg->ct_lens);
  xf_free((void *)msg->sigs);
  xf_free((void *)msg->sig_lens);
  memset(msg, 0, sizeof(*msg));
}
