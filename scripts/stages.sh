# Stage timing for scripts/test, scripts/sanitize and scripts/fuzz (sourced, not run).
# `stage NAME` ends the running stage, printing its time, and starts NAME; `stage_summary` ends the
# last one and prints every stage's time. Nested scripts print their own stages.
_stage_name="" _stage_start=0 _stage_lines=()
stage() {
  local now
  now=$(date +%s)
  if [ -n "$_stage_name" ]; then
    _stage_lines+=("$(printf '%-36s %5d s' "$_stage_name" $((now - _stage_start)))")
    echo "== $_stage_name: $((now - _stage_start)) s"
  fi
  _stage_name=${1:-}
  _stage_start=$now
  [ -z "$_stage_name" ] || echo "== $_stage_name"
}
stage_summary() {
  local title=$1 line total=$(( $(date +%s) - _stages_begin ))
  stage ""
  echo "== $title: stage times (load average now: $(cut -d' ' -f1-3 /proc/loadavg))"
  for line in "${_stage_lines[@]}"; do echo "   $line"; done
  printf '   %-36s %5d s\n' total "$total"
}
_stages_begin=$(date +%s)
