#!/usr/bin/env bash
# The vinf command line: help, version, exit codes and messages for bad input.
set -u
vinf=$1
. "$(dirname "$0")/expect.sh"

expect 0 "usage: vinf <command>" -- "$vinf" --help
expect 2 "usage: vinf <command>" -- "$vinf"
expect 0 "vinf 0." -- "$vinf" --version
expect 2 "unknown command 'bogus'" -- "$vinf" bogus
expect 0 "--device" -- "$vinf" selfcheck --help
expect 2 "--device must be cpu, cuda or all, got 'tpu'" -- "$vinf" selfcheck --device tpu
expect 2 "unrecognised option '--no-such-flag'" -- "$vinf" selfcheck --no-such-flag
expect 0 "checks passed" -- "$vinf" selfcheck --device cpu --filter conv2d
expect 0 "attention banded" -- "$vinf" selfcheck --list

[ "$fails" -eq 0 ] || { echo "$fails CLI check(s) failed"; exit 1; }
