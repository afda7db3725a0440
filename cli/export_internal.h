/* SPDX-License-Identifier: Apache-2.0 */
/* What `xfed job export` and `xfed model export` share: the format an
 * --out and a --format name, and the write of a model in that format. */
#ifndef XF_CLI_EXPORT_INTERNAL_H
#define XF_CLI_EXPORT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cli/cli.h"
#include "kernels/export.h"
#include "kernels/model.h"

/* The format of out: --format (flag, may be NULL) or else out's extension
 * (.onnx, .npz, .npy, .xfm), refused with usage (exit 2) when both name one
 * and they differ, or when the word is none of them; a name with another
 * extension and no flag is the xfed model file. allow_npy: whether npy is
 * among the choices. */
int xf__export_pick_format(xf_cli *cli, const char *out, const char *flag, bool allow_npy,
                           xf_export_format *fmt);

/* Writes m with params (xf_model_num_params floats) to out through the
 * safe output rule (base/file.h); for the xfed format, the verified
 * model file's bytes as they are. */
xf_err xf__export_write(xf_cli *cli, xf_export_format fmt, const char *out, const xf_model *m,
                        const float *params, const uint8_t *xfed_file,
                        size_t xfed_len) XF_WARN_UNUSED;

#endif
