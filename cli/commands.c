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
    {"data", "split", "cut a dataset into per-site shards (iid, dirichlet:ALPHA, classes:K)",
     "usage: xfed data split --data DIR --sites N --scheme SCHEME --out OUTDIR [--seed S]\n"
     "                       [--min-records N] [--label COL] [--json]\n"
     "\n"
     "Cuts the dataset in DIR into N shards, one per site, and writes OUTDIR/site-1 ...\n"
     "OUTDIR/site-N, each a dataset directory that 'xfed train --data' and the site\n"
     "daemon read (the four IDX .gz files, or train.csv and test.csv for a CSV source,\n"
     "plus dataset.json with the number of classes), and OUTDIR/manifest.json.\n"
     "DIR holds the Fashion-MNIST IDX files (train-images-idx3-ubyte[.gz], ...; Debian's\n"
     "dataset-fashion-mnist installs them in /usr/share/datasets/fashion-mnist) or\n"
     "train.csv and test.csv. Each site's test part follows its train part's label\n"
     "distribution. The same data, scheme and seed give the same shards.\n"
     "\n"
     "schemes:\n"
     "  iid              shuffled records dealt into N equal parts\n"
     "  dirichlet:ALPHA  label skew: per class, site proportions from Dirichlet(ALPHA)\n"
     "                   (0.1 very skewed, 100 close to iid), drawn again until every\n"
     "                   site has --min-records train records\n"
     "  classes:K        each site holds K distinct classes; a class's records are\n"
     "                   divided evenly among the sites that hold it\n"
     "\n"
     "options:\n"
     "  --data DIR         dataset directory\n"
     "  --sites N          number of sites (1 to 10000)\n"
     "  --scheme SCHEME    iid, dirichlet:ALPHA or classes:K\n"
     "  --out OUTDIR       output directory; must not exist or be empty. It is built\n"
     "                     in OUTDIR.tmp-XXXXXX and renamed when complete\n"
     "  --seed S           random seed (default 0)\n"
     "  --min-records N    fewest train records a site may get (default 10)\n"
     "  --label COL        CSV only: the label column, by header name or by number\n"
     "                     from 1 (default: the last column)\n"
     "  --json             print the manifest instead of the summary table\n"
     "\n"
     "example: xfed data split --data /usr/share/datasets/fashion-mnist --sites 6 \\\n"
     "           --scheme dirichlet:0.5 --seed 42 --out shards\n"
     "See docs/data.md for the formats, the validation rules and the manifest.\n",
     xf_cmd_data_split},
    {"version", NULL, "print the version and the compute backends this build has",
     "usage: xfed version [--json]\n", xf_cmd_version},
    {0},
};
