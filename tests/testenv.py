"""Loaded by pytest before Django: tests use the production settings module, with a fixed secret."""

import os

os.environ.setdefault("SECRET_KEY", "allot-tests-only")

# Property tests draw the same examples on every run, so a red run reproduces and CI does not flake on a
# draw nobody can repeat. `HYPOTHESIS_PROFILE=explore` draws fresh ones (and more) when hunting for bugs.
from hypothesis import settings  # noqa: E402

settings.register_profile("deterministic", derandomize=True, database=None)
settings.register_profile("explore", max_examples=500, database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))
