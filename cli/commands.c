/* SPDX-License-Identifier: Apache-2.0 */
/* The table of xfed commands. One line per command; its code lives in
 * cli/cmd_<noun>[_<verb>].c. */
#include "cli/cli.h"
#include "cli/client.h"

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
    {"job", "export", "download a job's model as an xfed model file or NumPy .npy",
     "usage: xfed job export ID --out FILE [--round N] [--format xfed|npy] [--json]\n"
     "                       [connection flags]\n"
     "\n"
     "Downloads the global model of job ID after round N (default: the latest),\n"
     "verifies its digest and its layer table, and writes FILE atomically:\n"
     "  xfed  the xfed model file as the coordinator keeps it (docs/model-format.md)\n"
     "  npy   the flat parameter vector as NumPy .npy (format 1.0, '<f4', shape (P,)),\n"
     "        plus FILE.json with the layer table (name, kind, shape, offset, count\n"
     "        of each weight and bias) to cut it into layers\n"
     "The format follows FILE's extension (.npy: npy, else xfed) unless --format\n"
     "names it.\n"
     "\n"
     "options:\n"
     "  --out FILE        where to write the model\n"
     "  --round N         the model after round N (1 or more; default the latest)\n"
     "  --format FORMAT   xfed or npy\n"
     "  --json            print what was written as one JSON object\n"
     "\n" XF_CLIENT_OPTIONS_HELP
     "\n"
     "example: xfed job export 7 --out model.npy   # numpy.load('model.npy')\n",
     xf_cmd_job_export},
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
    {"version", NULL, "print the version and the compute backends this build has",
     "usage: xfed version [--json]\n", xf_cmd_version},
    {0},
};
