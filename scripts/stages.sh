# Stage timing for scripts/test, scripts/sanitize and scripts/fuzz (sourced, not run).
# `stage NAME` ends the running stage, printing its time, and starts NAME; `stage_summary TITLE`
# ends the last one and prints the table of every stage's time. A script run by another one that
# times its stages (scripts/test runs scripts/sanitize and scripts/fuzz) hands its stages to the
# outer table, indented under the stage that ran it, instead of printing a table of its own.
_stage_name="" _stage_start=0 _stage_lines=()
_stage_depth=${VINF_STAGE_DEPTH:-0}
_stage_outer=${VINF_STAGE_FILE:-}
# The nested scripts' stage lines, read back when the stage that ran them ends.
_stage_inner=$(mktemp)
trap 'rm -f "$_stage_inner"' EXIT
export VINF_STAGE_DEPTH=$((_stage_depth + 1)) VINF_STAGE_FILE=$_stage_inner

stage() {
  local now line
  now=$(date +%s)
  if [ -n "$_stage_name" ]; then
    _stage_lines+=("$(printf '%-46s %5d s' "$_stage_name" $((now - _stage_start)))")
    while IFS= read -r line; do _stage_lines+=("  $line"); done < "$_stage_inner"
    : > "$_stage_inner"
    echo "== $_stage_name: $((now - _stage_start)) s"
  fi
  _stage_name=${1:-}
  _stage_start=$now
  [ -z "$_stage_name" ] || echo "== $_stage_name"
}
stage_summary() {
  local title=$1 line total=$(( $(date +%s) - _stages_begin ))
  stage ""
  if [ -n "$_stage_outer" ] && [ "$_stage_depth" -gt 0 ]; then
    printf '%s\n' "${_stage_lines[@]}" >> "$_stage_outer"
    echo "== $title: $total s"
    return
  fi
  echo "== $title: stage times (load average now: $(cut -d' ' -f1-3 /proc/loadavg))"
  for line in "${_stage_lines[@]}"; do echo "   $line"; done
  printf '   %-46s %5d s\n' total "$total"
}
_stages_begin=$(date +%s)
