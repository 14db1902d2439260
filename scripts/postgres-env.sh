# Sourced by scripts/test.sh: PostgreSQL for the shared-registry tests, exported as DUET_TEST_PG
# (an administrator's URL; each test creates and drops a database of its own in it).
#   - DUET_TEST_PG already set: used as it is;
#   - PostgreSQL answering on 127.0.0.1:5432: user postgres there;
#   - else PostgreSQL's programs installed (initdb, pg_ctl): a throwaway cluster on a temporary
#     folder and a free port, stopped and removed when the tests end;
#   - else, under CI=true, a failure; elsewhere the PostgreSQL tests skip with a message.

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
elif DUET_PG_BIN="$(duet_pg_bin)"; then
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
elif [ "${CI:-}" = true ]; then
  echo "error: CI=true and no PostgreSQL: none answers on 127.0.0.1:5432 and initdb/pg_ctl are not installed" >&2
  exit 1
else
  echo "warning: no PostgreSQL (none on 127.0.0.1:5432, no initdb): the shared-registry tests skip" >&2
fi
