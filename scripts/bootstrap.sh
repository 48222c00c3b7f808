#!/usr/bin/env bash
# Install what hailstorm needs on a fresh Debian machine: Java (ZooKeeper, Kafka), Maven (it
# fetches Apache Kafka from Maven Central), openssl (the dev stack's TLS), kcat (the Kafka
# semantics tests produce with it), PostgreSQL's server binaries, iproute2 (the multi-host test
# makes its test hosts with ip netns), chromium (the web console's test loads the page in it),
# tcpdump (the secure stack's test captures its traffic), a repo-local virtualenv with
# the package and its test extras, and the pinned Apache Kafka artifacts (cached in
# ~/.cache/hailstorm, outside the repository).
# Safe to run again: it only does what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v java >/dev/null 2>&1 || need_apt+=(openjdk-17-jre-headless)
command -v mvn >/dev/null 2>&1 || need_apt+=(maven)
command -v openssl >/dev/null 2>&1 || need_apt+=(openssl)
command -v kcat >/dev/null 2>&1 || need_apt+=(kcat)  # tests: a Kafka client of its own
command -v ip >/dev/null 2>&1 || need_apt+=(iproute2)  # tests: test hosts in network namespaces
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)  # tests: the web console's page
command -v tcpdump >/dev/null 2>&1 || need_apt+=(tcpdump)  # tests: no cleartext on the wire
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  need_apt+=(postgresql)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "bootstrap: installing Debian packages: ${need_apt[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "bootstrap: creating .venv"
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.hailstorm-installed
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "bootstrap: installing hailstorm and its dependencies into .venv (first run takes a few minutes)"
  # pip's own lines cut to a progress line every ten packages, the large downloads and
  # builds, and what went wrong.
  .venv/bin/python -m pip install --disable-pip-version-check --progress-bar off \
      -e '.[test]' 2>&1 | awk '
    /^WARNING: Location .* is ignored/ { next }
    /^Collecting / { n++; if (n % 10 == 1) printf "bootstrap: pip: %d packages so far (%s)\n", n, $2; fflush(); next }
    /Downloading .*\([0-9.]+ [MG]B\)/ { sub(/^ +/, ""); print "bootstrap: pip: " $0; fflush(); next }
    /^ *Building wheel for / { sub(/^ +/, ""); print "bootstrap: pip: " $0; fflush(); next }
    /^Installing collected packages/ { print "bootstrap: pip: installing " n " packages"; fflush(); next }
    /^(ERROR|WARNING|error)/ { print; fflush() }' || true
  .venv/bin/python -c "import hailstorm, pyspark, confluent_kafka, kazoo, fastavro, orjson, psycopg" \
    || { echo "bootstrap: the install failed" >&2; exit 1; }
  echo "$want" > "$stamp"
fi

# Apache Kafka for the dev stack: a no-op once cached.
.venv/bin/python -c "
import sys
from hailstorm.dev.kafka_broker import KafkaSetupError, ensure_kafka_libs
try:
    ensure_kafka_libs(lambda m: print('bootstrap: ' + m, flush=True))
except KafkaSetupError as exc:
    sys.exit('bootstrap: ' + str(exc))
"
