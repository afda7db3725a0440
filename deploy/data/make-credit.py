#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the tabular example dataset "credit": a synthetic consumer-credit
default table (numeric and categorical columns, missing values, a binary
label) as an xfed CSV dataset directory with its column schema.

  deploy/data/make-credit.py --out DIR [--train N] [--test N] [--seed S]

DIR receives train.csv, test.csv and schema.json (a copy of
credit.schema.json beside this script). The same arguments always give the
same bytes (Python's random.Random with a fixed seed, standard library only).

Records are drawn independently: applicant attributes from fixed
distributions, and the label "default" from a logistic model of them with
an interaction (young renters) and a noise term: about 1 in 4 records
defaults, and the best accuracy any model of the columns can reach is about
0.88 (predicting "no" always gives about 0.76).
Missing values: income "NA" in about 6% of records, months_employed empty in
about 3%, housing empty in about 2%; region is "overseas" (outside the
schema's vocabulary, counted in its unknown slot) in about 1%. The
generator is documented in docs/data.md ("The tabular example")."""
import argparse
import math
import os
import random
import shutil

EMPLOYMENT = ["salaried", "self_employed", "contractor", "unemployed", "retired"]
EMPLOYMENT_W = [0.55, 0.14, 0.12, 0.07, 0.12]
EMPLOYMENT_RISK = {"salaried": 0.0, "self_employed": 0.35, "contractor": 0.25,
                   "unemployed": 1.1, "retired": -0.2}
HOUSING = ["own", "mortgage", "rent"]
HOUSING_W = [0.25, 0.40, 0.35]
HOUSING_RISK = {"own": -0.4, "mortgage": 0.0, "rent": 0.3}
REGION = ["north", "south", "east", "west"]
REGION_RISK = {"north": -0.1, "south": 0.15, "east": 0.05, "west": -0.05, "overseas": 0.3}
PURPOSE = ["car", "home", "education", "business", "debt_consolidation", "other"]
PURPOSE_W = [0.22, 0.18, 0.10, 0.10, 0.28, 0.12]
PURPOSE_RISK = {"car": 0.0, "home": -0.3, "education": 0.1, "business": 0.45,
                "debt_consolidation": 0.35, "other": 0.1}
HEADER = ("id,age,income,debt_ratio,months_employed,late_payments,credit_lines,"
          "employment,housing,region,purpose,default")


def record(rng, i):
    age = min(80, max(21, int(rng.gauss(44, 13))))
    employment = rng.choices(EMPLOYMENT, EMPLOYMENT_W)[0]
    if age >= 66 and rng.random() < 0.7:
        employment = "retired"
    base = {"unemployed": 14000, "retired": 26000}.get(employment, 46000)
    income = round(base * math.exp(rng.gauss(0, 0.45)) + 300 * (age - 21), -2)
    debt_ratio = round(min(1.6, max(0.0, rng.gammavariate(2.2, 0.16))), 3)
    months = 0 if employment == "unemployed" else min(12 * (age - 18), int(rng.expovariate(1 / 70)))
    late = min(12, int(rng.expovariate(1 / 0.9)))
    lines = max(0, int(rng.gauss(4 + age / 15, 2)))
    housing = rng.choices(HOUSING, HOUSING_W)[0]
    region = "overseas" if rng.random() < 0.01 else rng.choice(REGION)
    purpose = rng.choices(PURPOSE, PURPOSE_W)[0]
    z = (-0.8 + 2.3 * (debt_ratio - 0.35) + 0.42 * late - 0.75 * math.log(income / 40000)
         - 0.004 * months - 0.05 * (lines - 5) + EMPLOYMENT_RISK[employment]
         + HOUSING_RISK[housing] + REGION_RISK[region] + PURPOSE_RISK[purpose]
         + (0.7 if age < 27 and housing == "rent" else 0.0) + rng.gauss(0, 0.3))
    default = "yes" if rng.random() < 1 / (1 + math.exp(-3 * z)) else "no"
    income_text = "NA" if rng.random() < 0.06 else "%d" % income
    months_text = "" if rng.random() < 0.03 else str(months)
    housing_text = "" if rng.random() < 0.02 else housing
    return ",".join([str(i), str(age), income_text, "%.3f" % debt_ratio, months_text, str(late),
                     str(lines), employment, housing_text, region, purpose, default])


def write(path, rng, first, n):
    with open(path, "w", newline="") as f:
        f.write(HEADER + "\n")
        for i in range(first, first + n):
            f.write(record(rng, i) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the dataset directory to write (created)")
    ap.add_argument("--train", type=int, default=8000, help="training records (default 8000)")
    ap.add_argument("--test", type=int, default=2000, help="test records (default 2000)")
    ap.add_argument("--seed", type=int, default=20261126, help="random seed (default 20261126)")
    a = ap.parse_args()
    if a.train < 1 or a.test < 1:
        ap.error("--train and --test must be at least 1")
    os.makedirs(a.out, exist_ok=True)
    rng = random.Random(a.seed)
    write(os.path.join(a.out, "train.csv"), rng, 1, a.train)
    write(os.path.join(a.out, "test.csv"), rng, a.train + 1, a.test)
    here = os.path.dirname(os.path.abspath(__file__))
    shutil.copyfile(os.path.join(here, "credit.schema.json"), os.path.join(a.out, "schema.json"))


if __name__ == "__main__":
    main()
