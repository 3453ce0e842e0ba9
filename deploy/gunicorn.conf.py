"""gunicorn's settings for Allot's web tier: `gunicorn -c deploy/gunicorn.conf.py config.wsgi` (the entrypoint's
`web` role does this). Every value can be overridden from the environment, as the names below say."""

import multiprocessing
import os

bind = os.environ.get("ALLOT_BIND", "0.0.0.0:8000")
# Measured (README, Benchmarks): a heartbeat costs ~9 ms of web CPU; 2 workers per core keep the cores busy
# while others wait on PostgreSQL.
workers = int(os.environ.get("WEB_CONCURRENCY", 2 * multiprocessing.cpu_count()))
threads = int(os.environ.get("ALLOT_WEB_THREADS", 1))
timeout = int(os.environ.get("ALLOT_WEB_TIMEOUT", 60))
graceful_timeout = 30
keepalive = 5
# A worker is replaced after this many requests (jittered), so a slow leak never grows for weeks.
max_requests = 5000
max_requests_jitter = 500
# Heartbeat files on tmpfs: a slow disk never gets a busy worker killed as hung.
worker_tmp_dir = "/dev/shm" if os.path.isdir("/dev/shm") else None
# The reverse proxy's address(es), whose X-Forwarded-* headers are trusted (ALLOT_HTTPS uses X-Forwarded-Proto).
forwarded_allow_ips = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1")
accesslog = os.environ.get("ALLOT_ACCESS_LOG", "-")
errorlog = "-"
loglevel = os.environ.get("LOG_LEVEL", "info").lower()
proc_name = "allot-web"
