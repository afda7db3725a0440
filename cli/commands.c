/* SPDX-License-Identifier: Apache-2.0 */
/* The table of xfed commands. One line per command; its code lives in
 * cli/cmd_<noun>[_<verb>].c. */
#include "cli/cli.h"
#include "cli/client.h"

/* Where the policy and audit commands act: the coordinator's policy and
 * trail over the CLI session unless --db FILE names a local database. */
#define POLICY_WHERE_CHANGE                                                           \
  "Without --db the change itself (for an import, the document) goes to the\n"       \
  "coordinator, which makes it on its current version as the next one and\n"         \
  "answers with the new version and what changed (past 20 changes, how many;\n"      \
  "'xfed policy diff' lists them all). Only compliance and admin certificates\n"     \
  "may, and the author recorded is the certificate's identity. With --db FILE\n"     \
  "the change is made to that local policy database.\n"
#define POLICY_WHERE_READ                                                             \
  "Without --db this reads the coordinator's policy (any user certificate); with\n"   \
  "--db FILE, that local policy database.\n"
#define POLICY_CHANGE_OPTIONS                                                         \
  "  --reason TEXT    why (required, non-empty; recorded with the version)\n"         \
  "  --db FILE        a local policy database (SQLite) instead of the coordinator\n"  \
  "  --author NAME    --db: who makes the change (default: $USER)\n"                  \
  "  --json           print {\"version\": N, \"change\": ...}\n"
#define AUDIT_WHERE                                                                   \
  "Without --db this reads the coordinator's trail (compliance and admin\n"           \
  "certificates only), page by page; with --db FILE, that local audit database.\n"

#ifndef XF_HAVE_REPORT
/* `xfed job report` in a build configured with -DXF_REPORT=OFF, which leaves
 * the drawing (cmd_job_report.c, report_chart.c) and cairo out. */
static int job_report_not_built(xf_cli *cli, int argc, char **argv) {
  (void)argc;
  (void)argv;
  xf_fail(&cli->err, XF_EUSAGE, "this xfed was built without cairo (XF_REPORT=OFF): rebuild "
          "with libcairo2-dev installed and -DXF_REPORT=ON; 'xfed job metrics ID --csv' has "
          "the same figures as text");
  return xf_cli_fail(cli, XF_EUSAGE);
}
#endif

const xf_cmd xf_cli_commands[] = {
    {"train", NULL, "train a job spec's model on one machine (the centralized baseline)",
     "usage: xfed train --spec JOB.json --data DIR [--threads N] [--epochs N] [--save FILE]\n"
     "                  [--blobs DIR] [--json]\n"
     "                  [--dp-clip C (--dp-noise-multiplier Z | --dp-target-epsilon E)\n"
     "                   [--dp-delta D]]\n"
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
     "  --threads N     CPU threads: the cpu backend's GEMM, DP-SGD noise on either backend\n"
     "                  (default: XF_THREADS or all cores)\n"
     "  --epochs N      override local.epochs\n"
     "  --save FILE     write the trained model (xfed model format) to FILE\n"
     "  --blobs DIR     also store the model in the content-addressed blob store DIR\n"
     "  --json          print one JSON object: test_accuracy, test_loss, train_seconds,\n"
     "                  backend, model_digest, params, epochs (with per-epoch figures)\n"
     "\n"
     "DP-SGD (record-level differential privacy; local.batch_size is the expected\n"
     "batch L of Poisson sampling at rate L/records; docs/kernels.md):\n"
     "  --dp-clip C                 clip each record's gradient to L2 norm C (turns DP-SGD on)\n"
     "  --dp-noise-multiplier Z     Gaussian noise of standard deviation Z*C per step\n"
     "  --dp-target-epsilon E       or: the least noise that gives epsilon <= E\n"
     "  --dp-delta D                delta of (epsilon, delta)-DP (default 1e-5)\n"
     "  The epsilon of the whole run is printed next to the accuracy.\n"
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
     "daemon read (the four IDX .gz files, train.csv and test.csv for a CSV source,\n"
     "or the four .npy files for a NumPy source, plus dataset.json with the number of\n"
     "classes), and OUTDIR/manifest.json. DIR holds the Fashion-MNIST IDX files\n"
     "(train-images-idx3-ubyte[.gz], ...; Debian's dataset-fashion-mnist installs them\n"
     "in /usr/share/datasets/fashion-mnist), train.csv and test.csv (with schema.json:\n"
     "tabular columns, encoded into the shards' numeric CSV), train-x.npy, train-y.npy,\n"
     "test-x.npy and test-y.npy, or train.npz and test.npz. Each site's test part\n"
     "follows its train part's label distribution. The same data, scheme and seed give\n"
     "the same shards.\n"
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
     "  --label COL        CSV without schema.json only: the label column, by header\n"
     "                     name or by number from 1 (default: the last column)\n"
     "  --json             print the manifest instead of the summary table\n"
     "\n"
     "example: xfed data split --data /usr/share/datasets/fashion-mnist --sites 6 \\\n"
     "           --scheme dirichlet:0.5 --seed 42 --out shards\n"
     "See docs/data.md for the formats, the validation rules and the manifest.\n",
     xf_cmd_data_split},
    {"data", "stats", "pool sites' column statistics into one normalization for all",
     "usage: xfed data stats merge FILE FILE... [--schema SCHEMA --out NEW_SCHEMA] [--json]\n"
     "\n"
     "Pools the statistics files that 'xfed-site dataset stats' wrote at two or more\n"
     "sites for one tabular dataset (counts, means and M2 of each numeric column of\n"
     "the training split; no records) with Chan et al.'s parallel formula, and\n"
     "prints each column's pooled count, mean and population standard deviation:\n"
     "what one pass over all the sites' records would give. With --schema, writes\n"
     "NEW_SCHEMA (mode 0644): a copy of SCHEMA, the schema.json the sites used, in\n"
     "which every numeric column normalized with \"train\" is given {\"mean\": M,\n"
     "\"std\": S} from the pooled statistics (a constant column's std is 1), so that\n"
     "every site can put it in place of its schema.json and normalize alike.\n"
     "Refused: fewer than 2 files, files of different datasets or schemas (their\n"
     "schema digests differ), a site given twice, a column missing from a file, a\n"
     "SCHEMA that is not the one the statistics were computed with, and malformed\n"
     "files (the error names the file and the field).\n"
     "\n"
     "options:\n"
     "  --schema SCHEMA    the schema.json the sites computed their statistics with\n"
     "  --out NEW_SCHEMA   where to write the schema with pooled statistics\n"
     "  --json             {dataset, schema_digest, sites, columns: [{name, count,\n"
     "                     mean, std, m2}], schema_out, replaced}\n"
     "\n"
     "example: xfed data stats merge berlin.json paris.json lyon.json \\\n"
     "           --schema credit/schema.json --out credit-pooled.schema.json\n"
     "See docs/data.md, \"Pooled statistics\".\n",
     xf_cmd_data_stats},
    {"dp", "epsilon", "epsilon spent by DP-SGD: sampled Gaussian mechanism, Renyi DP",
     "usage: xfed dp epsilon --sampling-rate Q --noise-multiplier Z --steps T --delta D\n"
     "                       [--orders LIST] [--conversion improved|classic] [--json]\n"
     "\n"
     "Computes the (epsilon, delta) guarantee of T steps of the sampled Gaussian\n"
     "mechanism (DP-SGD): each step includes every record with probability Q and\n"
     "adds Gaussian noise of standard deviation Z times the clipping norm. The\n"
     "Renyi DP of one step (Mironov, Talwar, Zhang 2019) is summed over the T\n"
     "steps at each order and converted to epsilon at D; the smallest epsilon over\n"
     "the orders is printed with the order that gave it.\n"
     "\n"
     "options:\n"
     "  --sampling-rate Q     probability a record takes part in a step, in [0, 1]\n"
     "                        (batch size over dataset size; 1: every record)\n"
     "  --noise-multiplier Z  noise standard deviation over the clipping norm, > 0\n"
     "  --steps T             number of steps (rounds times local steps), >= 1\n"
     "  --delta D             delta, in (0, 1); typically below 1 / dataset size\n"
     "  --orders LIST         up to 256 comma-separated Renyi orders, each above 1 and\n"
     "                        at most 1e6 (default: 1.25, 1.5, 1.75, 2, 2.25, 2.5,\n"
     "                        3..64, 128, 256)\n"
     "  --conversion C        improved (default; Balle et al. 2020, Canonne, Kamath,\n"
     "                        Steinke 2020) or classic (Mironov 2017)\n"
     "  --json                print {\"epsilon\": E, \"order\": A}\n"
     "\n"
     "example: xfed dp epsilon --sampling-rate 0.01 --noise-multiplier 1.1 \\\n"
     "           --steps 10000 --delta 1e-5\n"
     "See docs/privacy.md for the formulas and what composition covers.\n",
     xf_cmd_dp_epsilon},
    {"dp", "calibrate", "the smallest noise multiplier that meets a target epsilon",
     "usage: xfed dp calibrate --target-epsilon E --sampling-rate Q --steps T --delta D\n"
     "                         [--json]\n"
     "\n"
     "Finds the smallest noise multiplier Z for which T steps of the sampled\n"
     "Gaussian mechanism at sampling rate Q give epsilon at most E at D ('xfed dp\n"
     "epsilon' with the default orders and the improved conversion), by bisection\n"
     "to 1e-6 relative, and prints it with the epsilon and order it gives. A target\n"
     "no noise multiplier up to 1e6 reaches is an error (exit 1) that says how close\n"
     "it gets; multipliers below 1e-3 are not searched.\n"
     "\n"
     "options:\n"
     "  --target-epsilon E  the epsilon to stay within, > 0\n"
     "  --sampling-rate Q   probability a record takes part in a step, in (0, 1]\n"
     "  --steps T           number of steps, >= 1\n"
     "  --delta D           delta, in (0, 1)\n"
     "  --json              print {\"noise_multiplier\": Z, \"epsilon\": E, \"order\": A}\n"
     "\n"
     "example: xfed dp calibrate --target-epsilon 3 --sampling-rate 0.01 \\\n"
     "           --steps 10000 --delta 1e-5\n"
     "See docs/privacy.md.\n",
     xf_cmd_dp_calibrate},
    {"job", "submit", "submit a job spec to the coordinator",
     "usage: xfed job submit FILE [--wait] [--interval S] [--json] [connection flags]\n"
     "\n"
     "Checks the job spec FILE here first (the same strict parser as the\n"
     "coordinator's: an error names the file and the field, and nothing is sent),\n"
     "then submits it as written. Prints the new job's id on stdout (with --json,\n"
     "the job as JSON). The coordinator checks it again, and its residency policy;\n"
     "a job the policy does not allow exits with status 3 and the reason.\n"
     "\n"
     "options:\n"
     "  --wait        then follow the job as 'xfed job watch' does: exit 0 when it is\n"
     "                done, 1 when it failed or was cancelled\n"
     "  --interval S  with --wait: seconds between queries (default 1)\n"
     "  --json        print the job (with --wait: the finished job) as one JSON object\n"
     "\n" XF_CLIENT_OPTIONS_HELP
     "\n"
     "needs a researcher or admin certificate.\n"
     "example: xfed job submit deploy/jobs/fmnist-mlp.json --wait\n"
     "See docs/jobs.md for the spec and docs/researcher-guide.md for the workflow.\n",
     xf_cmd_job_submit},
    {"job", "status", "show one job: state, round, sites, accuracy, epsilon, traffic",
     "usage: xfed job status ID [--json] [connection flags]\n"
     "\n"
     "Shows job ID as the coordinator sees it: its state (queued, running, paused,\n"
     "done, failed, cancelled) and why it failed or paused, the round in progress\n"
     "and the rounds committed, the sites that reported in the current attempt, the\n"
     "test accuracy and loss of the latest evaluated model (weighted by the sites'\n"
     "test records), the train loss of the last committed round, epsilon spent\n"
     "(\"none\" without differential privacy), the bytes sent up and down, the\n"
     "latest model's digest, the submitter and the times.\n"
     "\n"
     "options:\n"
     "  --json   the job as one JSON object (figures not known yet are null; the\n"
     "           canonical spec is under \"spec\")\n"
     "\n" XF_CLIENT_OPTIONS_HELP,
     xf_cmd_job_status},
    {"job", "list", "list the coordinator's jobs",
     "usage: xfed job list [--json] [connection flags]\n"
     "\n"
     "One line per job, by id: ID, NAME, STATE, ROUND (round in progress, or rounds\n"
     "committed once ended, over the rounds asked), REPORTED (sites reported over\n"
     "sites invited in the current attempt), ACCURACY (latest evaluated model) and\n"
     "SUBMITTED (UTC).\n"
     "\n"
     "options:\n"
     "  --json   {\"jobs\": [...]} with each job as 'xfed job status --json' shows it\n"
     "\n" XF_CLIENT_OPTIONS_HELP,
     xf_cmd_job_list},
    {"job", "watch", "follow a job until it ends, showing its progress",
     "usage: xfed job watch ID [--interval S] [--json] [connection flags]\n"
     "\n"
     "Queries job ID every S seconds until it is done, failed or cancelled. On a\n"
     "terminal one line on stderr is redrawn in place; otherwise a line is written\n"
     "whenever it changes:\n"
     "  round R/N  sites r/i  train loss L  accuracy A  up U  down D  epsilon E  STATE\n"
     "When the job is done the last line, on stdout, sums it up:\n"
     "  final accuracy=A rounds=R epsilon=E uplink_bytes=B\n"
     "(A the test accuracy of the final model to 4 decimals, R the rounds committed,\n"
     "E epsilon spent or none, B the bytes the sites sent up). A lost connection is\n"
     "dialed again for as long as --timeout allows.\n"
     "\n"
     "options:\n"
     "  --interval S  seconds between queries (default 1)\n"
     "  --json        instead of the summary line, print the final job as JSON\n"
     "\n" XF_CLIENT_OPTIONS_HELP
     "\n"
     "exit status: 0 when the job is done, 1 when it failed or was cancelled or the\n"
     "coordinator cannot be reached.\n",
     xf_cmd_job_watch},
    {"job", "cancel", "cancel a queued, running or paused job",
     "usage: xfed job cancel ID [--json] [connection flags]\n"
     "\n"
     "Cancels job ID: the coordinator withdraws its tasks from the sites and the job\n"
     "ends in state cancelled; its committed rounds, metrics and models are kept.\n"
     "\n"
     "options:\n"
     "  --json   print the job as one JSON object\n"
     "\n" XF_CLIENT_OPTIONS_HELP
     "\n"
     "needs a researcher or admin certificate.\n",
     xf_cmd_job_cancel},
    {"job", "metrics", "a job's metrics per round and site (table, CSV or JSON)",
     "usage: xfed job metrics ID [--csv | --json] [connection flags]\n"
     "\n"
     "One row per round and site, by round then site: round, site, region,\n"
     "train_loss (mean loss of the site's last local epoch), test_loss and\n"
     "test_accuracy (the model the site received, on its held-out split), samples\n"
     "(its training records), bytes_up and bytes_down. A figure a row does not\n"
     "carry (no training in an evaluation-only report) shows as '-'.\n"
     "\n"
     "options:\n"
     "  --csv    RFC 4180 CSV on stdout: a header line, CRLF line ends, empty fields\n"
     "           for figures not carried, numbers at full precision\n"
     "  --json   {\"job_id\", \"rows\": [...]} with null for figures not carried\n"
     "\n" XF_CLIENT_OPTIONS_HELP
     "\n"
     "example: xfed job metrics 7 --csv > job7.csv\n",
     xf_cmd_job_metrics},
    {"job", "export", "download a job's model as ONNX, NumPy .npz or .npy, or an xfed model file",
     "usage: xfed job export ID --out FILE [--round N] [--format onnx|npz|npy|xfed] [--json]\n"
     "                       [connection flags]\n"
     "\n"
     "Downloads the global model of job ID after round N (default: the latest; a\n"
     "coordinator with checkpoint_retention keeps only the latest rounds' models),\n"
     "verifies its digest and its layer table, and writes FILE atomically:\n"
     "  onnx  an ONNX model (opset 13): input 'input' float32 [N, C, H, W], outputs\n"
     "        'logits' [N, classes] and 'probabilities' (softmax); for onnxruntime\n"
     "  npz   NumPy .npz: one array per tensor (conv1.weight [out, in, kh, kw],\n"
     "        fc1.weight [out, in], fc1.bias, ...) in the layout of the ONNX graph\n"
     "  npy   the flat parameter vector as NumPy .npy (format 1.0, '<f4', shape (P,)),\n"
     "        plus FILE.json with the layer table (name, kind, shape, offset, count\n"
     "        of each weight and bias) to cut it into layers\n"
     "  xfed  the xfed model file as the coordinator keeps it (docs/model-format.md)\n"
     "The format is --format's, or else FILE's extension's (.onnx, .npz, .npy, .xfm);\n"
     "when both name one they must agree. Any other name without --format is xfed.\n"
     "\n"
     "options:\n"
     "  --out FILE        where to write the model\n"
     "  --round N         the model after round N (1 or more; default the latest)\n"
     "  --format FORMAT   onnx, npz, npy or xfed\n"
     "  --json            print what was written as one JSON object\n"
     "\n" XF_CLIENT_OPTIONS_HELP
     "\n"
     "examples: xfed job export 7 --out model.onnx  # onnxruntime.InferenceSession('model.onnx')\n"
     "          xfed job export 7 --out model.npz   # numpy.load('model.npz')['fc1.weight']\n",
     xf_cmd_job_export},
    {"job", "report", "draw a job's training curves as PNG, SVG or PDF",
     "usage: xfed job report ID --out FILE [--format png|svg|pdf] [--size WxH] [--json]\n"
     "                       [connection flags]\n"
     "\n"
     "Draws the metrics of job ID ('xfed job metrics') as four panels over its\n"
     "rounds, under a title naming the job, its state, its latest test accuracy\n"
     "and the epsilon spent:\n"
     "  test accuracy    mean over the round's sites, weighted by their training\n"
     "                   records (the model each site received, on its test split)\n"
     "  loss             train and test loss, weighted the same way\n"
     "  epsilon spent    the job's privacy spent once the round committed (a panel\n"
     "                   that says so when the job has no differential privacy)\n"
     "  bytes per round  uplink and downlink, summed over the round's sites\n"
     "FILE is written atomically (a regular file or nothing may be at FILE). The\n"
     "format follows FILE's extension (.png, .svg, .pdf); --format may name it\n"
     "when FILE has none, and is refused when it disagrees with the extension.\n"
     "\n"
     "options:\n"
     "  --out FILE        where to write the drawing\n"
     "  --format FORMAT   png, svg or pdf\n"
     "  --size WxH        pixels (PNG) or points (SVG, PDF); default 1200x800,\n"
     "                    480x360 to 4096x4096\n"
     "  --json            print what was written as one JSON object\n"
     "\n" XF_CLIENT_OPTIONS_HELP
     "\n"
     "example: xfed job report 7 --out job7.png\n",
#ifdef XF_HAVE_REPORT
     xf_cmd_job_report},
#else
     job_report_not_built},
#endif
    {"model", "eval", "evaluate a model file on a dataset directory: accuracy and loss",
     "usage: xfed model eval MODEL --data DIR [--split test|train] [--predictions FILE]\n"
     "                       [--threads N] [--json]\n"
     "\n"
     "Loads MODEL, an xfed model file ('xfed train --save', 'xfed job export') or\n"
     "an ONNX model xfed exported (.onnx: read back exactly, or refused when its\n"
     "graph is not the one xfed writes), and runs it on the test part (or with --split train, the train\n"
     "part) of DIR with the same kernels training uses: mean cross-entropy loss and\n"
     "accuracy. DIR is what 'xfed train --data' reads: Fashion-MNIST IDX files, a\n"
     "shard of 'xfed data split', or train.csv and test.csv. The records must have\n"
     "the shape the model was built for.\n"
     "\n"
     "options:\n"
     "  --data DIR          dataset directory\n"
     "  --split SPLIT       test (default) or train\n"
     "  --predictions FILE  also write FILE: CSV 'label,predicted', one line per record\n"
     "  --threads N         CPU threads (default: XF_THREADS or all cores)\n"
     "  --json              print one JSON object: accuracy, loss, records, split, ...\n"
     "\n"
     "environment: XF_BACKEND=auto|cpu|cuda picks the compute backend.\n",
     xf_cmd_model_eval},
    {"model", "export", "write a model file as ONNX, NumPy .npz or an xfed model file",
     "usage: xfed model export MODEL --out FILE [--format onnx|npz|xfed] [--json]\n"
     "\n"
     "Loads MODEL (an xfed model file, or an .onnx xfed exported), verifies it and\n"
     "writes it to FILE as ONNX, .npz or an xfed model file, in the layouts 'xfed\n"
     "job export' writes (docs/model-format.md): a model trained with 'xfed train\n"
     "--save' deploys like a federation's, and an .onnx reads back to the model\n"
     "file it was exported from.\n"
     "The format is --format's, or else FILE's extension's (.onnx, .npz, .xfm);\n"
     "when both name one they must agree.\n"
     "\n"
     "options:\n"
     "  --out FILE        where to write\n"
     "  --format FORMAT   onnx, npz or xfed\n"
     "  --json            print what was written as one JSON object\n"
     "\n"
     "example: xfed model export model.xfm --out model.onnx\n",
     xf_cmd_model_export},
    {"dashboard", NULL, "a one-use URL to the coordinator's read-only web dashboard",
     "usage: xfed dashboard [--ttl S] [--json] [connection flags]\n"
     "\n"
     "Asks the coordinator, over the same mutual-TLS session as every other\n"
     "request, for a token to its web dashboard and prints the URL to open:\n"
     "  https://HOST:PORT/login?token=T\n"
     "The token works once: the browser that opens it gets a session cookie\n"
     "(HttpOnly, Secure, SameSite=Strict) that ends when the token would have.\n"
     "The dashboard shows what the certificate's role may read: jobs, their\n"
     "curves, sites and datasets and policy versions for any user; the audit\n"
     "trail's state for compliance and admin certificates. The coordinator must\n"
     "run with --dashboard (docs/dashboard.md).\n"
     "\n"
     "options:\n"
     "  --ttl S   seconds the token and the session last: 60 to 3600 (default 900)\n"
     "  --json    print {\"url\", \"expires\", \"expires_utc\"}\n"
     "\n" XF_CLIENT_OPTIONS_HELP
     "\n"
     "example: xfed dashboard   # then open the URL it prints\n",
     xf_cmd_dashboard},
    {"pki", "init", "create a federation's CA, its empty CRL and the federation directory",
     "usage: xfed pki init --federation FED [--dir DIR] [--days N] [--json]\n"
     "\n"
     "Creates the certificate authority of federation FED in DIR: a P-256 key\n"
     "(ca.key, mode 0600), a self-signed CA certificate (ca.crt: CN \"xfed FED CA\",\n"
     "URI SAN spiffe://FED, CA:TRUE, keyCertSign and cRLSign), an empty CRL\n"
     "(crl.pem), the issued/ folder and the index (index.json). DIR is created with\n"
     "mode 0700 if missing; a DIR that already holds a CA is refused.\n"
     "\n"
     "options:\n"
     "  --federation FED  the federation's name: 1 to 63 of a-z, 0-9 and '-',\n"
     "                    not first or last (the SPIFFE trust domain)\n"
     "  --dir DIR         federation directory (default ./federation)\n"
     "  --days N          CA validity in days (default 3650)\n"
     "  --json            print the paths and dates as one JSON object\n"
     "\n"
     "example: xfed pki init --federation acme --dir fed\n"
     "See docs/pki.md for the identity model and the files.\n",
     xf_cmd_pki_init},
    {"pki", "issue", "issue a key and certificate for a site, coordinator or user",
     "usage: xfed pki issue --kind site|coordinator|user --name N [--region R]\n"
     "                      [--role researcher|compliance|admin] [--days N] [--force]\n"
     "                      [--dir DIR] [--json]\n"
     "\n"
     "Makes a P-256 key (DIR/issued/N.key, mode 0600) and a certificate signed by\n"
     "the federation's CA (DIR/issued/N.crt) whose one URI SAN is the identity:\n"
     "  site         spiffe://FED/region/R/site/N            (--region required)\n"
     "  coordinator  spiffe://FED/region/R/coordinator/N     (a regional aggregator)\n"
     "               spiffe://FED/coordinator/N              (no --region: the global one)\n"
     "  user         spiffe://FED/user/N/role/ROLE           (--role required)\n"
     "Site and coordinator certificates also name DNS:localhost and IP:127.0.0.1\n"
     "for loopback TLS. Names are unique across kinds.\n"
     "\n"
     "options:\n"
     "  --kind KIND     site, coordinator or user\n"
     "  --name N        the identity's name (1 to 63 of a-z, 0-9 and '-')\n"
     "  --region R      the region of a site or regional coordinator\n"
     "  --role ROLE     a user's role: researcher, compliance or admin\n"
     "  --days N        validity in days (default 365; never beyond the CA's)\n"
     "  --force         re-issue an existing name: its certificate is revoked first\n"
     "                  (reason superseded, CRL re-signed), then a new key is made\n"
     "  --dir DIR       federation directory (default ./federation)\n"
     "  --json          print the new identity as one JSON object\n"
     "\n"
     "examples: xfed pki issue --kind site --region eu --name eu-berlin\n"
     "          xfed pki issue --kind coordinator --name global\n"
     "          xfed pki issue --kind user --name alice --role researcher\n",
     xf_cmd_pki_issue},
    {"pki", "revoke", "revoke an identity's certificate and re-sign the CRL",
     "usage: xfed pki revoke --name N [--reason REASON] [--dir DIR] [--json]\n"
     "\n"
     "Adds the current certificate of N to the CRL (DIR/crl.pem), re-signed with\n"
     "its next update 30 days ahead, and marks it revoked in the index. Copy\n"
     "crl.pem to every coordinator and send them SIGHUP to reload it.\n"
     "\n"
     "options:\n"
     "  --name N         the identity to revoke\n"
     "  --reason REASON  unspecified (default), key-compromise, affiliation-changed,\n"
     "                   superseded, cessation-of-operation, privilege-withdrawn\n"
     "  --dir DIR        federation directory (default ./federation)\n"
     "  --json           print the revoked identity as one JSON object\n",
     xf_cmd_pki_revoke},
    {"pki", "show", "list the federation's identities, or show one",
     "usage: xfed pki show [--name N] [--dir DIR] [--json]\n"
     "\n"
     "Lists every certificate the federation issued, oldest first: name, kind,\n"
     "SPIFFE ID, serial, not-after and status (valid, expired, not-yet-valid or\n"
     "revoked with its reason). A name re-issued with --force appears once per\n"
     "certificate. With --name, shows the current certificate of N in detail,\n"
     "with its files and SHA-256 fingerprint. Warns when the CRL is about to\n"
     "expire or has expired.\n"
     "\n"
     "options:\n"
     "  --name N   show one identity\n"
     "  --dir DIR  federation directory (default ./federation)\n"
     "  --json     {federation, dir, crl_number, crl_next_update, identities: [...]},\n"
     "             or the one identity's object with --name\n",
     xf_cmd_pki_show},
    {"pki", "crl", "re-sign the CRL before its next update",
     "usage: xfed pki crl [--days N] [--dir DIR] [--json]\n"
     "\n"
     "Signs the CRL again with the same revocations and a new number; its next\n"
     "update becomes N days from now. Peers refuse every certificate once the CRL\n"
     "they hold is past its next update, so run this (from cron, say) well before.\n"
     "\n"
     "options:\n"
     "  --days N   days until the next update (default 30)\n"
     "  --dir DIR  federation directory (default ./federation)\n"
     "  --json     print the CRL's path, number and next update as JSON\n",
     xf_cmd_pki_crl},
    {"policy", "region", "add a region to the coordinator's (or a local) policy",
     "usage: xfed policy region add --name R [--jurisdiction J] --reason TEXT\n"
     "                              [--db FILE [--author NAME]] [--json]\n"
     "\n"
     "Adds region R with a jurisdiction label (free text, e.g. \"EU GDPR\") and prints\n"
     "the new policy version. Every change makes a new immutable version recording\n"
     "author, reason and time.\n"
     POLICY_WHERE_CHANGE
     "\n"
     "options:\n"
     "  --name R         region name (lowercase letters, digits, '-', '_'; 1-63)\n"
     "  --jurisdiction J jurisdiction label\n"
     POLICY_CHANGE_OPTIONS
     "\n"
     "example: xfed policy region add --name eu --jurisdiction \"EU GDPR\" \\\n"
     "           --reason \"EU sites join\"\n"
     "See docs/compliance-guide.md and docs/policy.md.\n"
     "\n" XF_CLIENT_OPTIONS_HELP,
     xf_cmd_policy_region},
    {"policy", "site", "add a site to a region of the policy",
     "usage: xfed policy site add --name S --region R --reason TEXT\n"
     "                            [--db FILE [--author NAME]] [--json]\n"
     "\n"
     "Adds site S in the existing region R and prints the new policy version.\n"
     POLICY_WHERE_CHANGE
     "\n"
     "options:\n"
     "  --name S         site name\n"
     "  --region R       its region\n"
     POLICY_CHANGE_OPTIONS
     "\n" XF_CLIENT_OPTIONS_HELP,
     xf_cmd_policy_site},
    {"policy", "dataset", "add or tag a dataset; list or adopt those sites registered "
     "(add|tag|pending|adopt)",
     "usage: xfed policy dataset add --site S --name D --class C --reason TEXT\n"
     "                               [--db FILE [--author NAME]] [--json]\n"
     "       xfed policy dataset tag --site S --name D --tag T --reason TEXT\n"
     "                               [--db FILE [--author NAME]] [--json]\n"
     "       xfed policy dataset pending [--json]\n"
     "       xfed policy dataset adopt (NAME... | --all) [--site S] [--class C]\n"
     "                                 --reason TEXT [--json]\n"
     "\n"
     "add: declares dataset D at site S with classification C (public, internal,\n"
     "confidential or restricted). tag: adds tag T to it. Prints the new version.\n"
     POLICY_WHERE_CHANGE
     "\n"
     "pending: the datasets sites registered and announced to the coordinator that\n"
     "its policy does not hold yet: site, region, dataset, records (train + test),\n"
     "the classification the site registered, when it was first announced. Any\n"
     "user certificate may list them. A pending dataset takes part in nothing.\n"
     "adopt: adds the pending datasets named (at every site holding one, or only at\n"
     "--site S), or all of them, to the coordinator's policy as ONE new version,\n"
     "with classification C (default: restricted, whatever the site registered)\n"
     "and the tags the site announced; no rule is added. Their sites must be in\n"
     "the policy. A name that is not pending is refused. Compliance and admin\n"
     "certificates only; prints the new version and what it added.\n"
     "\n"
     "options:\n"
     "  --site S         add, tag: the site holding the dataset; adopt: only there\n"
     "  --name D         the dataset's name (the name jobs use in data.dataset)\n"
     "  --class C        add: the classification; adopt: the one given to all\n"
     "                   adopted (default: restricted)\n"
     "  --tag T          tag: the tag to add\n"
     "  --all            adopt: every pending dataset (at --site S, when given)\n"
     POLICY_CHANGE_OPTIONS
     "\n"
     "example: xfed policy dataset adopt scans --site eu-berlin \\\n"
     "           --reason \"CT scans registered at eu-berlin\"\n"
     "\n" XF_CLIENT_OPTIONS_HELP,
     xf_cmd_policy_dataset},
    {"policy", "rule", "add, remove or list the rules of the policy (add|rm|list)",
     "usage: xfed policy rule add (--file RULE.json | --json-rule TEXT) --reason TEXT\n"
     "                            [--db FILE [--author NAME]] [--json]\n"
     "       xfed policy rule rm --id ID --reason TEXT [--db FILE [--author NAME]] [--json]\n"
     "       xfed policy rule list [--db FILE] [--json]\n"
     "\n"
     "add: appends one rule, written as one member of the policy document's \"rules\"\n"
     "array (id, effect, kind, select, destinations, conditions; docs/policy.md).\n"
     "rm: removes the rule with this id. Both print the new version. list: the\n"
     "current version's rules in order (the first satisfied allow rule decides).\n"
     POLICY_WHERE_CHANGE
     "\n"
     "options:\n"
     "  --file RULE.json  add: the rule from a file\n"
     "  --json-rule TEXT  add: the rule as JSON text\n"
     "  --id ID           rm: the rule's id\n"
     POLICY_CHANGE_OPTIONS
     "  --json            add, rm: {\"version\", \"change\"}; list: {\"version\", \"rules\"}\n"
     "\n"
     "example: xfed policy rule add --reason \"EU only as DP aggregate\" \\\n"
     "           --json-rule '{\"id\": \"eu-regional\", \"effect\": \"allow\",\n"
     "             \"kind\": \"regional_aggregate\", \"select\": {\"region\": \"eu\"},\n"
     "             \"destinations\": [\"us\"], \"conditions\": {\"max_epsilon\": 3,\n"
     "             \"min_cohort\": 2, \"require_secagg\": true}}'\n"
     "\n" XF_CLIENT_OPTIONS_HELP,
     xf_cmd_policy_rule},
    {"policy", "check", "decide a job spec against the current policy: per site and region",
     "usage: xfed policy check JOB.json [--epsilon E] [--json]\n"
     "       xfed policy check JOB.json --db FILE --coordinator-region R [--epsilon E]\n"
     "                         [--json]\n"
     "\n"
     "Reads the job spec (the same strict parser as 'xfed job submit') and decides it\n"
     "against the current policy version at the current time: the federation is\n"
     "every site holding a dataset named data.dataset with all of data.tags. Prints\n"
     "one line per site (eligible or not, its aggregation path, the rule that\n"
     "decided and why), one line per region (path, eligible sites, min_cohort,\n"
     "secure aggregation, max_epsilon of a regional aggregate) and suggestions that\n"
     "would make more sites eligible.\n"
     "Without --db the coordinator decides, in its own region, exactly as it would\n"
     "for a submission (a dry run: nothing is recorded); with --db FILE the local\n"
     "database's current version decides, for --coordinator-region R.\n"
     "\n"
     "options:\n"
     "  --coordinator-region R  --db: where the global coordinator runs\n"
     "  --epsilon E             the epsilon the job will spend (default: the spec's\n"
     "                          privacy.target_epsilon); used only with privacy on\n"
     "  --db FILE               a local policy database instead of the coordinator\n"
     "  --json                  {version, allowed, sites, regions, suggestions}\n"
     "\n"
     "exit status: 0 when the job is allowed as written, 3 when it is not (or the\n"
     "coordinator has no policy or no region), 1 on errors, 2 on usage errors.\n"
     "example: xfed policy check deploy/jobs/quickstart-secagg.json\n"
     "\n" XF_CLIENT_OPTIONS_HELP,
     xf_cmd_policy_check},
    {"policy", "test", "run expected decisions (test cases) against the current policy",
     "usage: xfed policy test CASES.json [--db FILE] [--json]\n"
     "\n"
     "CASES.json is a JSON array of cases:\n"
     "  {\"name\": \"eu needs secagg\",\n"
     "   \"job\": {\"dataset\": D, \"tags\": [...], \"privacy_mode\": \"none|central|\n"
     "           distributed|local\", \"epsilon\": E, \"secagg\": BOOL, \"min_sites\": N,\n"
     "           \"coordinator_region\": R},\n"
     "   \"now\": T,                                  (optional: Unix seconds or ISO 8601)\n"
     "   \"expect\": {\"allowed\": BOOL,\n"
     "              \"eligible\": [\"site\", ...],       (optional: exactly these sites)\n"
     "              \"paths\": {\"region\": \"direct|regional|none\"}}}  (optional)\n"
     "Each case is decided against the current version; prints pass or FAIL per\n"
     "case with the first difference, then a count.\n"
     POLICY_WHERE_READ
     "\n"
     "options:\n"
     "  --db FILE        a local policy database instead of the coordinator\n"
     "  --json           {version, passed, failed, cases: [{name, pass, reason}]}\n"
     "\n"
     "exit status: 0 when every case passes, 1 when any fails or on errors.\n"
     "\n" XF_CLIENT_OPTIONS_HELP,
     xf_cmd_policy_test},
    {"policy", "log", "the versions of the policy: who changed it, when and why",
     "usage: xfed policy log [--db FILE] [--json]\n"
     "\n"
     "One line per version, oldest first: version, time (UTC), author, reason. On\n"
     "the coordinator the author is the SPIFFE id of the certificate that pushed it.\n"
     POLICY_WHERE_READ
     "\n"
     "options:\n"
     "  --db FILE        a local policy database instead of the coordinator\n"
     "  --json           {\"versions\": [{version, at, time, author, reason}]}\n"
     "\n" XF_CLIENT_OPTIONS_HELP,
     xf_cmd_policy_log},
    {"policy", "diff", "what changed between two versions of the policy",
     "usage: xfed policy diff V1 V2 [--db FILE] [--json]\n"
     "\n"
     "One line per region, site, dataset or rule that differs from version V1 to\n"
     "version V2: '+' added, '-' removed, '~' changed (old -> new). Version 0 is the\n"
     "empty policy.\n"
     POLICY_WHERE_READ
     "\n"
     "options:\n"
     "  --db FILE        a local policy database instead of the coordinator\n"
     "  --json           {\"from\", \"to\", \"changes\": [lines]}\n"
     "\n" XF_CLIENT_OPTIONS_HELP,
     xf_cmd_policy_diff},
    {"policy", "export", "write one version of the policy as a JSON document",
     "usage: xfed policy export [--db FILE] [--version V] [--out FILE]\n"
     "\n"
     "Writes the policy document (docs/policy.md, \"The document\") of version V\n"
     "(default: the current one) to stdout or, atomically, to --out. Importing it\n"
     "and exporting again gives the same text.\n"
     POLICY_WHERE_READ
     "\n"
     "options:\n"
     "  --version V      the version (0: the empty policy)\n"
     "  --out FILE       write here instead of stdout\n"
     "  --db FILE        a local policy database instead of the coordinator\n"
     "  --json           with --out: print {\"version\", \"out\"}\n"
     "\n" XF_CLIENT_OPTIONS_HELP,
     xf_cmd_policy_export},
    {"policy", "import", "replace the policy with a JSON document (one new version)",
     "usage: xfed policy import FILE --reason TEXT [--db FILE [--author NAME]] [--json]\n"
     "\n"
     "Checks the policy document FILE as a whole (an error names the member, such as\n"
     "rules[1].select.site) and makes it the next version. Nothing changes when it\n"
     "is refused.\n"
     POLICY_WHERE_CHANGE
     "\n"
     "options:\n"
     POLICY_CHANGE_OPTIONS
     "\n" XF_CLIENT_OPTIONS_HELP,
     xf_cmd_policy_import},
    {"policy", "push", "make a version of a local policy database the coordinator's policy",
     "usage: xfed policy push --db FILE --reason TEXT [--version V] [--json]\n"
     "\n"
     "Sends version V (default: the current one) of the local policy database to\n"
     "the coordinator, where it becomes the next version, whatever the coordinator\n"
     "had before (compare with 'xfed policy diff' first). Only compliance and admin\n"
     "certificates may; the coordinator records the certificate as the author and\n"
     "every running job is decided again under the new version. Prints\n"
     "\"policy version N on the coordinator: REASON\".\n"
     "\n"
     "options:\n"
     "  --db FILE        the local policy database (required)\n"
     "  --version V      the local version to push (1 or more; default: current)\n"
     "  --reason TEXT    why (required, non-empty; recorded with the version)\n"
     "  --json           {\"version\": N, \"local_version\": V, \"reason\": ...}\n"
     "\n" XF_CLIENT_OPTIONS_HELP,
     xf_cmd_policy_push},
    {"policy", "pull", "copy the coordinator's policy into a local policy database",
     "usage: xfed policy pull --db FILE --reason TEXT [--author NAME] [--json]\n"
     "\n"
     "Imports the coordinator's current document into the local database (created\n"
     "when missing) as its next version, so that a change can be drafted, checked\n"
     "and tested there before 'xfed policy push'.\n"
     "\n"
     "options:\n"
     "  --db FILE        the local policy database (required)\n"
     "  --author NAME    who makes the local version (default: $USER)\n"
     "  --reason TEXT    why (required, non-empty)\n"
     "  --json           print {\"version\": N, \"change\": ...}\n"
     "\n" XF_CLIENT_OPTIONS_HELP,
     xf_cmd_policy_pull},
    {"audit", "list", "rows of the coordinator's (or a local) audit trail",
     "usage: xfed audit list [--db FILE] [--since T] [--limit N] [--json]\n"
     "\n"
     "Rows in append order: seq, time (UTC), kind, actor, subject, detail.\n"
     AUDIT_WHERE
     "\n"
     "options:\n"
     "  --db FILE    a local audit database instead of the coordinator\n"
     "  --since T    rows at or after T: Unix seconds or ISO 8601 UTC\n"
     "               (2024-05-01, 2024-05-01T12:00:00Z)\n"
     "  --limit N    at most N rows\n"
     "  --json       {\"rows\": [{seq, at, actor, kind, subject, detail, prev, digest}]}\n"
     "\n" XF_CLIENT_OPTIONS_HELP,
     xf_cmd_audit_list},
    {"audit", "verify", "check an audit trail's hash chain for edited or deleted rows",
     "usage: xfed audit verify [--db FILE] [--json]\n"
     "\n"
     "Recomputes every row's digest and checks each row's link to the one before,\n"
     "and prints the verdict: the number of rows (and, with --db, the head) when\n"
     "intact, else the first bad row and what is wrong with it (edited, inserted or\n"
     "deleted). Rows cut off the end leave a shorter intact chain; compare the head\n"
     "with one kept elsewhere to detect that (docs/audit.md, \"Anchoring\").\n"
     AUDIT_WHERE
     "\n"
     "options:\n"
     "  --db FILE    a local audit database instead of the coordinator\n"
     "  --json       {intact, fault, rows, seq, what, head: {seq, digest} (--db only)}\n"
     "\n"
     "exit status: 0 when intact, 3 when not, 1 on errors.\n"
     "\n" XF_CLIENT_OPTIONS_HELP,
     xf_cmd_audit_verify},
    {"audit", "export", "write an audit trail as JSON lines",
     "usage: xfed audit export [--db FILE] [--since T] [--out FILE]\n"
     "\n"
     "One JSON object per row, in append order: seq, at, actor, kind, subject,\n"
     "detail, prev, digest (docs/audit.md). To stdout, or atomically to --out.\n"
     AUDIT_WHERE
     "\n"
     "options:\n"
     "  --db FILE    a local audit database instead of the coordinator\n"
     "  --since T    rows at or after T: Unix seconds or ISO 8601 UTC\n"
     "  --out FILE   write here instead of stdout\n"
     "\n" XF_CLIENT_OPTIONS_HELP,
     xf_cmd_audit_export},
    {"version", NULL, "print the version and the compute backends this build has",
     "usage: xfed version [--json]\n", xf_cmd_version},
    {0},
};
