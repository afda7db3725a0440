# SPDX-License-Identifier: Apache-2.0
"""xfed's quickstart job as a Flower app (bench/peer/run.sh)."""
