#!/bin/sh
# Allot's one start-up script: every step before a process serves, for containers and systemd alike.
#
#   entrypoint.sh web                 wait for PostgreSQL (and Redis), migrate, collectstatic, exec gunicorn
#   entrypoint.sh beat                wait, exec celery beat (LeaderBeat: run two, one sends)
#   entrypoint.sh worker-ticks        wait, exec the worker of the `ticks` queue (one process)
#   entrypoint.sh worker-simulations  wait, exec the worker of `simulations` (what-ifs, reports)
#   entrypoint.sh scheduler           wait, exec manage.py run_scheduler (sites without Celery; run two)
#   entrypoint.sh migrate             wait, migrate, exit
#   entrypoint.sh manage ARGS...      wait, exec manage.py ARGS (load_cluster, load_org, agent_token, demo...)
#
# Settings come from the environment (README, Configuration): DATABASE_URL, REDIS_URL, SECRET_KEY,
# ALLOWED_HOSTS, ... ALLOT_MIGRATE=0 skips `migrate` in `web` (run `migrate` once per release instead).
# ALLOT_MANAGE is how to run manage.py (default: `allot-manage`, the installed wheel's); ALLOT_WAIT_SECONDS
# how long to wait for the database and the broker (default 60).
set -eu

MANAGE=${ALLOT_MANAGE:-allot-manage}
HERE=$(cd "$(dirname "$0")" && pwd)
WAIT=${ALLOT_WAIT_SECONDS:-60}
role=${1:-web}
[ $# -gt 0 ] && shift

log() { echo "allot-entrypoint[$role]: $*" >&2; }

wait_for_services() {
  log "waiting up to ${WAIT}s for the database${REDIS_URL:+ and Redis}"
  # `check --database` opens a connection; the broker answers PING. Both print why they failed last.
  tries=0
  until $MANAGE check --database default --fail-level ERROR >/dev/null 2>"${TMPDIR:-/tmp}/allot-wait.$$"; do
    tries=$((tries + 1))
    if [ "$tries" -ge "$WAIT" ]; then
      log "the database is unreachable after ${WAIT}s:"; tail -n 3 "${TMPDIR:-/tmp}/allot-wait.$$" >&2; exit 1
    fi
    sleep 1
  done
  rm -f "${TMPDIR:-/tmp}/allot-wait.$$"
  if [ -n "${REDIS_URL:-}" ]; then
    ALLOT_WAIT_SECONDS=$WAIT $MANAGE shell -c "
import os, sys, time, redis
client = redis.Redis.from_url(os.environ['REDIS_URL'], socket_timeout=2, socket_connect_timeout=2)
deadline = time.monotonic() + int(os.environ['ALLOT_WAIT_SECONDS'])
while True:
    try:
        client.ping()
        break
    except redis.RedisError as error:
        if time.monotonic() > deadline:
            sys.exit(f'Redis unreachable: {error}')
        time.sleep(1)
" || exit 1
  fi
  log "database${REDIS_URL:+ and Redis} reachable"
}

case "$role" in
  web)
    wait_for_services
    if [ "${ALLOT_MIGRATE:-1}" != 0 ]; then $MANAGE migrate --no-input; fi
    $MANAGE collectstatic --no-input -v 0
    log "serving"
    exec gunicorn -c "${ALLOT_GUNICORN_CONF:-$HERE/gunicorn.conf.py}" config.wsgi "$@" ;;
  beat)
    wait_for_services
    exec celery -A config beat --loglevel "${LOG_LEVEL:-INFO}" "$@" ;;
  worker-ticks)
    wait_for_services
    exec celery -A config worker -Q ticks --concurrency 1 -n "ticks@%h" --loglevel "${LOG_LEVEL:-INFO}" "$@" ;;
  worker-simulations)
    wait_for_services
    exec celery -A config worker -Q simulations,celery --concurrency "${ALLOT_SIMULATION_WORKERS:-2}" \
      -n "simulations@%h" --loglevel "${LOG_LEVEL:-INFO}" "$@" ;;
  scheduler)
    wait_for_services
    exec $MANAGE run_scheduler "$@" ;;
  migrate)
    wait_for_services
    exec $MANAGE migrate --no-input "$@" ;;
  manage)
    wait_for_services
    exec $MANAGE "$@" ;;
  *)
    echo "usage: $0 web|beat|worker-ticks|worker-simulations|scheduler|migrate|manage ARGS" >&2; exit 2 ;;
esac
