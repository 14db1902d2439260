# Sourced by scripts/test.sh: PostgreSQL for the shared-registry tests, exported as DUET_TEST_PG
# (an administrator's URL; each test creates and drops a database of its own in it).
#   - DUET_TEST_PG already set: used as it is;
#   - PostgreSQL answering on 127.0.0.1:5432: user postgres there;
#   - else PostgreSQL's programs (initdb, pg_ctl; installed first from Debian's package
#     `postgresql` where they are missing): a throwaway cluster on a temporary folder and a free
#     port, stopped and removed when the tests end;
#   - where they cannot be installed: a failure that names the package (DUET_TEST_PG_SKIP=1 lets
#     the PostgreSQL tests skip instead, for a machine that cannot install packages).

# Installs Debian's `postgresql` package (as root, or through sudo without a password) and prints
# its programs' folder; fails quietly where it cannot.
duet_pg_install() {
  local sudo=()
  command -v apt-get >/dev/null 2>&1 || return 1
  if [ "$(id -u)" != 0 ]; then
    sudo -n true 2>/dev/null || return 1
    sudo=(sudo -n)
  fi
  echo "PostgreSQL is not installed: installing Debian's package postgresql" >&2
  export DEBIAN_FRONTEND=noninteractive
  if ! "${sudo[@]}" apt-get install -y -q --no-install-recommends postgresql >&2; then
    "${sudo[@]}" apt-get update -q >&2 || return 1
    "${sudo[@]}" apt-get install -y -q --no-install-recommends postgresql >&2 || return 1
  fi
  duet_pg_bin
}

duet_pg_answers() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

duet_pg_bin() {
  local d
  if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
    dirname "$(command -v initdb)"
    return 0
  fi
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -rV); do
    if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then echo "$d"; return 0; fi
  done
  return 1
}

if [ -n "${DUET_TEST_PG:-}" ]; then
  echo "PostgreSQL for the tests: DUET_TEST_PG as given" >&2
elif duet_pg_answers 127.0.0.1 5432; then
  export DUET_TEST_PG="postgres://postgres@127.0.0.1:5432/postgres"
  echo "PostgreSQL for the tests: the server on 127.0.0.1:5432" >&2
elif DUET_PG_BIN="$(duet_pg_bin || duet_pg_install)"; then
  DUET_PG_DIR="$(mktemp -d)"
  DUET_PG_PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  DUET_PG_RUN=()
  if [ "$(id -u)" = 0 ]; then
    # PostgreSQL refuses to run as root.
    chown postgres: "$DUET_PG_DIR"
    DUET_PG_RUN=(runuser -u postgres --)
  fi
  "${DUET_PG_RUN[@]}" "$DUET_PG_BIN/initdb" -D "$DUET_PG_DIR/data" -U postgres --auth=trust \
    -E UTF8 --no-sync >"$DUET_PG_DIR/initdb.log" 2>&1
  "${DUET_PG_RUN[@]}" "$DUET_PG_BIN/pg_ctl" -D "$DUET_PG_DIR/data" -l "$DUET_PG_DIR/log" \
    -o "-p $DUET_PG_PORT -c listen_addresses=127.0.0.1 -k $DUET_PG_DIR -c fsync=off" -w start \
    >/dev/null
  duet_pg_stop() {
    "${DUET_PG_RUN[@]}" "$DUET_PG_BIN/pg_ctl" -D "$DUET_PG_DIR/data" -m immediate -w stop \
      >/dev/null 2>&1 || true
    rm -rf "$DUET_PG_DIR"
  }
  trap duet_pg_stop EXIT
  export DUET_TEST_PG="postgres://postgres@127.0.0.1:$DUET_PG_PORT/postgres"
  echo "PostgreSQL for the tests: a throwaway cluster on port $DUET_PG_PORT" >&2
elif [ "${DUET_TEST_PG_SKIP:-}" = 1 ]; then
  echo "warning: no PostgreSQL and DUET_TEST_PG_SKIP=1: the shared-registry tests skip" >&2
else
  echo "error: no PostgreSQL for the shared-registry tests: none answers on 127.0.0.1:5432, initdb/pg_ctl are not installed, and Debian's package \`postgresql\` could not be installed (apt-get install postgresql as root, or set DUET_TEST_PG)" >&2
  exit 1
fi
