/* SPDX-License-Identifier: Apache-2.0 */
/* The table of xfed commands. One line per command; its code lives in
 * cli/cmd_<noun>[_<verb>].c. */
#include "cli/cli.h"

const xf_cmd xf_cli_commands[] = {
    {"train", NULL, "train a job spec's model on one machine (the centralized baseline)",
     "usage: xfed train --spec JOB.json --data DIR [--threads N] [--epochs N] [--save FILE]\n"
     "                  [--blobs DIR] [--json]\n"
     "\n"
     "Trains the spec's `model` with its `local` settings (epochs, batch_size,\n"
     "optimizer, lr, momentum, weight_decay) and `seed` on this machine, on the\n"
     "train part of DIR, and reports accuracy on its test part. DIR holds the\n"
     "Fashion-MNIST IDX files (train-images-idx3-ubyte[.gz], ...), a shard made by\n"
     "'xfed data split', or train.csv and test.csv.\n"
     "\n"
     "options:\n"
     "  --spec FILE     job spec (JSON); see docs/jobs.md\n"
     "  --data DIR      dataset directory\n"
     "  --threads N     CPU threads for the cpu backend (default: XF_THREADS or all cores)\n"
     "  --epochs N      override local.epochs\n"
     "  --save FILE     write the trained model (xfed model format) to FILE\n"
     "  --blobs DIR     also store the model in the content-addressed blob store DIR\n"
     "  --json          print one JSON object: test_accuracy, test_loss, train_seconds,\n"
     "                  backend, model_digest, params, epochs (with per-epoch figures)\n"
     "\n"
     "environment: XF_BACKEND=auto|cpu|cuda picks the compute backend.\n"
     "Runs with the same spec, seed, data and thread count on the cpu backend give\n"
     "the same model_digest.\n",
     xf_cmd_train},
    {"version", NULL, "print the version and the compute backends this build has",
     "usage: xfed version [--json]\n", xf_cmd_version},
    {0},
};
