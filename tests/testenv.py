"""Loaded by pytest before Django: tests use the production settings module, with a fixed secret."""

import os

os.environ.setdefault("SECRET_KEY", "allot-tests-only")
