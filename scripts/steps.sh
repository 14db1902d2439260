# Sourced by duet's setup scripts: one line on stderr when a step starts, one with its time when
# it ends, so that a first run (minutes of pip and cargo) shows what it is doing.
#   step "building duet"; ...; step_done
step() {
  _step_name="$1"
  _step_start=$SECONDS
  printf '==> %s\n' "$1" >&2
}
step_done() {
  printf '    %s: done in %d s\n' "$_step_name" "$((SECONDS - _step_start))" >&2
}
