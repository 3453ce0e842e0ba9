"""`allot-manage`: manage.py for an installed wheel (no checkout), e.g. `allot-manage migrate`."""

import os
import sys


def manage() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
