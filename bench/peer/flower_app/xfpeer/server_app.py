# SPDX-License-Identifier: Apache-2.0
"""The ServerApp: FedAvg weighted by training records over every site each
round (the job's sites_per_round 1.0), the initial model made here, each
round's model evaluated by every site on its test part and the accuracies
averaged weighted by test records (as xfed reports a round's accuracy).
With run config secagg=true the fit step is Flower's SecAggPlusWorkflow.
Writes the run's per-round timestamps and accuracies to run config `out`."""
import json
import time

import torch
from flwr.app import Context
from flwr.common import ndarrays_to_parameters
from flwr.server import Grid, LegacyContext, ServerApp, ServerConfig
from flwr.server.strategy import FedAvg
from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow

from xfpeer import task


class TimedFedAvg(FedAvg):
    """FedAvg that notes when each round's fit starts and its evaluation ends."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.rounds = {}

    def _row(self, rnd):
        return self.rounds.setdefault(rnd, {"round": rnd})

    def configure_fit(self, server_round, parameters, client_manager):
        self._row(server_round)["fit_start"] = time.time()
        return super().configure_fit(server_round, parameters, client_manager)

    def aggregate_fit(self, server_round, results, failures):
        row = self._row(server_round)
        row["fit_end"] = time.time()
        row["fit_results"], row["fit_failures"] = len(results), len(failures)
        return super().aggregate_fit(server_round, results, failures)

    def aggregate_evaluate(self, server_round, results, failures):
        row = self._row(server_round)
        n = sum(r.num_examples for _, r in results)
        row["accuracy"] = (sum(r.num_examples * float(r.metrics["accuracy"]) for _, r in results)
                           / n if n else None)
        row["eval_results"], row["eval_failures"] = len(results), len(failures)
        out = super().aggregate_evaluate(server_round, results, failures)
        row["eval_end"] = time.time()
        return out


app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    rc = context.run_config
    sites = int(rc["sites"])
    torch.manual_seed(int(rc["seed"]))
    hidden = [int(h) for h in str(rc["hidden"]).split(",") if h]
    init = task.build(int(rc["features"]), hidden, int(rc["classes"]))
    strategy = TimedFedAvg(
        fraction_fit=1.0, fraction_evaluate=1.0, min_fit_clients=sites,
        min_evaluate_clients=sites, min_available_clients=sites,
        initial_parameters=ndarrays_to_parameters(task.get_weights(init)),
        on_fit_config_fn=lambda r: {"server_round": r},
        on_evaluate_config_fn=lambda r: {"server_round": r})
    ctx = LegacyContext(context=context, config=ServerConfig(num_rounds=int(rc["num-rounds"])),
                        strategy=strategy)
    fit = None
    if bool(rc["secagg"]):
        fit = SecAggPlusWorkflow(num_shares=float(rc["secagg-shares"]),
                                 reconstruction_threshold=float(rc["secagg-threshold"]))
    started = time.time()
    DefaultWorkflow(fit_workflow=fit)(grid, ctx)
    if rc["out"]:
        with open(str(rc["out"]), "w") as f:
            json.dump({"started": started, "finished": time.time(),
                       "rounds": [strategy.rounds[r] for r in sorted(strategy.rounds)]}, f)
