# SPDX-License-Identifier: Apache-2.0
"""The ClientApp: one site's shard (node config `shard`), local training and
evaluation as xfpeer.task defines them; with SecAgg+ behind Flower's
secaggplus_mod. Each fit and evaluate appends its seconds to the node
config's `log` file."""
import os

import torch
from flwr.app import Context
from flwr.client import ClientApp, NumPyClient
from flwr.client.mod import secaggplus_mod
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS

from xfpeer import task

torch.set_num_threads(1)  # one thread a site, as xfed-site --threads 1
_shards = {}


def _shard(path):
    if path not in _shards:
        _shards[path] = task.load_shard(path)
    return _shards[path]


class Site(NumPyClient):
    def __init__(self, context):
        rc, nc = context.run_config, context.node_config
        self.shard = str(nc["shard"])
        self.log = str(nc.get("log", ""))
        self.name = os.path.basename(self.shard.rstrip("/"))
        self.xtr, self.ytr, self.xte, self.yte, classes = _shard(self.shard)
        hidden = [int(h) for h in str(rc["hidden"]).split(",") if h]
        self.model = task.build(self.xtr.shape[1], hidden, classes)
        self.rc = rc

    def fit(self, parameters, config):
        rnd = int(config.get("server_round", 0))
        task.set_weights(self.model, parameters)
        loss, secs = task.train(self.model, self.xtr, self.ytr, int(self.rc["epochs"]),
                                int(self.rc["batch-size"]), float(self.rc["lr"]),
                                float(self.rc["momentum"]), float(self.rc["weight-decay"]),
                                int(self.rc["seed"]) * 1000003 + rnd)
        task.log_event(self.log, site=self.name, round=rnd, phase="train", seconds=secs,
                       records=len(self.xtr))
        return task.get_weights(self.model), len(self.xtr), {"train_loss": loss}

    def evaluate(self, parameters, config):
        rnd = int(config.get("server_round", 0))
        task.set_weights(self.model, parameters)
        loss, acc, secs = task.evaluate(self.model, self.xte, self.yte)
        task.log_event(self.log, site=self.name, round=rnd, phase="eval", seconds=secs,
                       records=len(self.xte))
        return loss, len(self.xte), {"accuracy": acc}


def client_fn(context: Context):
    return Site(context).to_client()


def secagg_when_asked(msg, ctxt, call_next):
    """Flower's secaggplus_mod for the messages of a SecAgg+ run (they carry
    its configs record); a plain run's messages go straight to the client."""
    if RECORD_KEY_CONFIGS in msg.content.config_records:
        return secaggplus_mod(msg, ctxt, call_next)
    return call_next(msg, ctxt)


app = ClientApp(client_fn=client_fn, mods=[secagg_when_asked])
