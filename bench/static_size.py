"""What a browser downloads for a chart page (the cluster page): the HTML and every script and stylesheet it
names, as WhiteNoise serves them after `collectstatic` — raw, gzip, and Brotli when the Brotli package is
installed.

    .venv/bin/python bench/static_size.py [--json]

Runs on a throwaway SQLite database with the demo loaded, and a throwaway STATIC_ROOT.
"""

import argparse
import gzip
import json
import os
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="allot-static-"))
    os.environ.update(DJANGO_SETTINGS_MODULE="config.settings", SECRET_KEY="bench-only",
                      DATABASE_URL=f"sqlite:///{work / 'db.sqlite3'}", ALLOT_STATIC_ROOT=str(work / "static"),
                      ALLOT_VAR_DIR=str(work), ALLOWED_HOSTS="testserver", LOG_LEVEL="WARNING")
    os.environ.pop("DEBUG", None)
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client

    call_command("migrate", verbosity=0)
    call_command("demo", stdout=open(os.devnull, "w"))
    call_command("collectstatic", interactive=False, verbosity=0)
    from django.conf import settings

    client = Client()
    client.force_login(get_user_model().objects.get(username="alice"))
    html = client.get("/clusters/gb200-east/").content
    assets = re.findall(rb'(?:src|href)="/static/([^"]+\.(?:js|css))"', html)
    rows = [("page HTML", len(html), len(gzip.compress(html, 9)), None)]
    for asset in assets:
        path = Path(settings.STATIC_ROOT) / asset.decode()
        gz, br = path.with_name(path.name + ".gz"), path.with_name(path.name + ".br")
        rows.append((asset.decode(), path.stat().st_size, gz.stat().st_size if gz.exists() else path.stat().st_size,
                     br.stat().st_size if br.exists() else None))
    total_raw = sum(r[1] for r in rows)
    total_gzip = sum(r[2] for r in rows)
    total_best = sum(min(r[2], r[3] or r[2]) for r in rows)
    if args.json:
        print(json.dumps({"assets": rows, "raw": total_raw, "gzip": total_gzip, "best": total_best}))
        return 0
    print(f"{'file':<48} {'raw KB':>9} {'gzip KB':>9} {'br KB':>9}")
    for name, raw, gz, br in rows:
        print(f"{name:<48} {raw / 1024:9.1f} {gz / 1024:9.1f} {(br / 1024 if br else float('nan')):9.1f}")
    print(f"{'cluster page, total':<48} {total_raw / 1024:9.1f} {total_gzip / 1024:9.1f} {total_best / 1024:9.1f}"
          "  (br column: what a browser that accepts br downloads)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
