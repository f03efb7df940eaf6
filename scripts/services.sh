#!/usr/bin/env bash
# Start the local PostgreSQL and Redis when they are installed but not answering.
# Under CI=true a service that cannot be started is an error; elsewhere it is a warning
# (the unit tests still run, the integration tests then fail loudly rather than skip).
set -uo pipefail

ok=0
# The Redis server the tests use (FACTGATE_TEST_REDIS_BASE, tests/services.py), 127.0.0.1:6379 by default.
redis_base="${FACTGATE_TEST_REDIS_BASE:-redis://127.0.0.1:6379}"
redis_hostport="${redis_base#redis://}"
redis_hostport="${redis_hostport%%/*}"
redis_port="${redis_hostport##*:}"
[ "$redis_port" = "$redis_hostport" ] && redis_port=6379
pg_up() { pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; }
redis_up() { redis-cli -h 127.0.0.1 -p "$redis_port" ping 2>/dev/null | grep -q PONG; }

if ! pg_up; then
  if command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ]; then
    echo "services: starting PostgreSQL"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
    for _ in $(seq 1 30); do pg_up && break; sleep 0.5; done
  fi
  pg_up || { echo "services: PostgreSQL is not reachable on 127.0.0.1:5432" >&2; ok=1; }
fi

if ! redis_up; then
  if command -v redis-server >/dev/null 2>&1; then
    echo "services: starting Redis"
    mkdir -p /var/lib/redis /var/log/redis 2>/dev/null || true
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port "$redis_port" --save "" --appendonly no \
      --dir /var/lib/redis --logfile /var/log/redis/ci.log || true
    for _ in $(seq 1 30); do redis_up && break; sleep 0.2; done
  fi
  redis_up || { echo "services: Redis is not reachable on 127.0.0.1:$redis_port" >&2; ok=1; }
fi

if [ "$ok" -ne 0 ] && [ "${CI:-}" = "true" ]; then
  exit 1
fi
exit 0
